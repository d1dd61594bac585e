/* make_seeds.c: writes the seed corpus (one well-formed request stream per file, every command
 * and field) into the directory given. Run once; its output is committed in corpus/. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "message.h"

static void save(const char *dir, const char *name, gkv_wr_t *w)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(w->sb.data, 1, w->sb.size, f);
    fclose(f);
    gkv_wr_reset(w);
}

static void req(gkv_wr_t *w, unsigned op, const char *key)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_OP, op);
    gkv_wr_uint(w, GKV_F_ID, 1);
    if (key)
        gkv_wr_bin(w, GKV_F_KEY, key, strlen(key));
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    gkv_wr_t w;
    gkv_wr_init(&w);
    req(&w, GKV_OP_HELLO, NULL);
    gkv_wr_uint(&w, GKV_F_VERSION, 1);
    gkv_wr_uint(&w, GKV_F_ZC, 1);
    gkv_wr_bin(&w, GKV_F_TOKEN, "0123456789abcdef", 16);
    gkv_wr_end(&w);
    save(dir, "hello", &w);
    req(&w, GKV_OP_SET, "chunk/0.0");
    gkv_wr_uint(&w, GKV_F_PAYLOAD, 4);
    gkv_wr_uint(&w, GKV_F_FLAGS, 1);
    gkv_wr_bin(&w, GKV_F_META, "dtype=u1", 8);
    gkv_wr_end(&w);
    msgpack_sbuffer_write(&w.sb, "abcd", 4);
    req(&w, GKV_OP_GET, "chunk/0.0");
    gkv_wr_uint(&w, GKV_F_OFFSET, 1);
    gkv_wr_uint(&w, GKV_F_LENGTH, 2);
    gkv_wr_end(&w);
    save(dir, "set_get", &w);
    req(&w, GKV_OP_GET, "k");
    gkv_wr_uint(&w, GKV_F_SUFFIX, 3);
    gkv_wr_end(&w);
    save(dir, "get_suffix", &w);
    req(&w, GKV_OP_MGET, NULL);
    size_t at = gkv_wr_array_begin(&w, GKV_F_ITEMS);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_array(&w.pk, 4);
        msgpack_pack_bin(&w.pk, 1);
        msgpack_pack_bin_body(&w.pk, i ? "b" : "a", 1);
        msgpack_pack_uint64(&w.pk, 0);
        msgpack_pack_uint64(&w.pk, 10);
        msgpack_pack_uint64(&w.pk, 0);
    }
    gkv_wr_array_end(&w, at, 2);
    gkv_wr_end(&w);
    save(dir, "mget", &w);
    for (unsigned op = GKV_OP_EXISTS; op <= GKV_OP_DEL; op++) {
        req(&w, op, NULL);
        at = gkv_wr_array_begin(&w, GKV_F_KEYS);
        msgpack_pack_bin(&w.pk, 1);
        msgpack_pack_bin_body(&w.pk, "a", 1);
        msgpack_pack_bin(&w.pk, 2);
        msgpack_pack_bin_body(&w.pk, "bc", 2);
        gkv_wr_array_end(&w, at, 2);
        gkv_wr_end(&w);
        save(dir, op == GKV_OP_DEL ? "del" : "exists", &w);
    }
    req(&w, GKV_OP_LIST, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "a/", 2);
    gkv_wr_bin(&w, GKV_F_DELIM, "/", 1);
    gkv_wr_bin(&w, GKV_F_CURSOR, "a/b", 3);
    gkv_wr_uint(&w, GKV_F_LIMIT, 100);
    gkv_wr_end(&w);
    req(&w, GKV_OP_GETSIZE, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "a/", 2);
    gkv_wr_bin(&w, GKV_F_CURSOR, "a/b", 3);
    gkv_wr_end(&w);
    save(dir, "list_getsize", &w);
    req(&w, GKV_OP_CREATE, "new");
    gkv_wr_uint(&w, GKV_F_SIZE, 4096);
    gkv_wr_end(&w);
    req(&w, GKV_OP_SEAL, NULL);
    gkv_wr_uint(&w, GKV_F_LEASE, 3);
    gkv_wr_uint(&w, GKV_F_SPARE, 2);
    gkv_wr_uint(&w, GKV_F_FLAGS, 4);
    gkv_wr_end(&w);
    req(&w, GKV_OP_RELEASE, NULL);
    at = gkv_wr_array_begin(&w, GKV_F_LEASES);
    msgpack_pack_uint64(&w.pk, 3);
    gkv_wr_array_end(&w, at, 1);
    gkv_wr_end(&w);
    save(dir, "zero_copy", &w);
    /* NODE requests of waits across a cluster: a LOOKUP that waits, and a home's NOTIFY. */
    req(&w, GKV_OP_NODE, "cw/1");
    gkv_wr_uint(&w, GKV_F_NODE_OP, 1);
    gkv_wr_str(&w, GKV_F_NODE, "n2");
    gkv_wr_uint(&w, GKV_F_INCARNATION, 7);
    gkv_wr_uint(&w, GKV_F_WAIT, 5000);
    gkv_wr_end(&w);
    req(&w, GKV_OP_NODE, "cw/1");
    gkv_wr_uint(&w, GKV_F_NODE_OP, 13);
    gkv_wr_str(&w, GKV_F_NODE, "n1");
    gkv_wr_uint(&w, GKV_F_INCARNATION, 9);
    gkv_wr_uint(&w, GKV_F_VVERSION, 1u << 30);
    gkv_wr_end(&w);
    save(dir, "node_waits", &w);
    /* A response, for gkv_resp_decode. */
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_ID, 1);
    gkv_wr_int(&w, GKV_F_STATUS, 0);
    gkv_wr_uint(&w, GKV_F_SIZE, 10);
    gkv_wr_uint(&w, GKV_F_PAYLOAD, 0);
    gkv_wr_bin(&w, GKV_F_CURSOR, "z", 1);
    gkv_wr_end(&w);
    save(dir, "response", &w);
    gkv_wr_fini(&w);
    return 0;
}
