/* make_daemon_seeds.c: writes fuzz_daemon's seed corpus (fuzz_daemon.c says how an input is
 * read) into the directory given: sessions of one to three clients that use every command, move
 * small and large values, pipeline past the output limit, go away mid-transfer, hand over and
 * drop a TAKEOVER, stop the daemon under load, watch keys past the watch buffer, and wait
 * for keys and newer versions, take early MAP frames, hold imports. Its output is committed in
 * corpus_daemon/; run it again after changing the steps (tests/fuzz/run.sh builds it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "message.h"

static unsigned char buf[1 << 20];
static size_t len;

static void byte(unsigned b)
{
    if (len < sizeof(buf))
        buf[len++] = (unsigned char)b;
}

/* Client k writes w's frames (then w is reset). */
static void send_frames(int k, gkv_wr_t *w)
{
    const unsigned char *p = (const unsigned char *)w->sb.data;
    size_t n = w->sb.size;
    while (n) {
        size_t m = n > 256 ? 256 : n;
        byte((0u << 2) | (unsigned)k);
        byte((unsigned)(m - 1));
        for (size_t i = 0; i < m; i++)
            byte(p[i]);
        p += m;
        n -= m;
    }
    gkv_wr_reset(w);
}

static void filler(int k, unsigned pages) /* pages * 4 KiB of payload */
{
    while (pages) {
        unsigned m = pages > 63 ? 63 : pages;
        byte((3u << 2) | (unsigned)k);
        byte(m);
        pages -= m;
    }
}

static void turns(unsigned n)
{
    byte(4u << 2);
    byte(n - 1);
}

static void drain(int k)
{
    byte((5u << 2) | (unsigned)k);
}

static void leave(int k, int reset)
{
    byte((7u << 2) | (unsigned)k);
    byte(reset ? 1 : 0);
}

static void stop_daemon(void)
{
    byte(0xff); /* (c >> 5) == 7 with op 7 */
}

static void save(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(buf, 1, len, f);
    fclose(f);
    len = 0;
}

static void req(gkv_wr_t *w, unsigned op, unsigned id, const char *key)
{
    gkv_wr_begin(w);
    gkv_wr_uint(w, GKV_F_OP, op);
    gkv_wr_uint(w, GKV_F_ID, id);
    if (key)
        gkv_wr_bin(w, GKV_F_KEY, key, strlen(key));
}

static void hello(gkv_wr_t *w, unsigned version)
{
    req(w, GKV_OP_HELLO, 1, NULL);
    if (version)
        gkv_wr_uint(w, GKV_F_VERSION, version);
    gkv_wr_uint(w, GKV_F_ZC, 2);
    gkv_wr_end(w);
}

static void set_small(gkv_wr_t *w, unsigned id, const char *key, const char *value)
{
    req(w, GKV_OP_SET, id, key);
    gkv_wr_uint(w, GKV_F_PAYLOAD, strlen(value));
    gkv_wr_bin(w, GKV_F_META, "dtype=u1", 8);
    gkv_wr_end(w);
    msgpack_sbuffer_write(&w->sb, value, strlen(value));
}

static void set_large_header(gkv_wr_t *w, unsigned id, const char *key, unsigned pages)
{
    req(w, GKV_OP_SET, id, key);
    gkv_wr_uint(w, GKV_F_PAYLOAD, (uint64_t)pages * 4096);
    gkv_wr_end(w);
}

static void get(gkv_wr_t *w, unsigned id, const char *key)
{
    req(w, GKV_OP_GET, id, key);
    gkv_wr_end(w);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    gkv_wr_t w;
    gkv_wr_init(&w);

    /* Values small and large, read back, ranges, metadata. */
    hello(&w, 0);
    set_small(&w, 2, "a/b/1", "hello");
    get(&w, 3, "a/b/1");
    req(&w, GKV_OP_GET, 4, "a/b/1");
    gkv_wr_uint(&w, GKV_F_SUFFIX, 2);
    gkv_wr_end(&w);
    send_frames(0, &w);
    set_large_header(&w, 5, "big", 300);
    send_frames(0, &w);
    filler(0, 300);
    turns(8);
    get(&w, 6, "big");
    req(&w, GKV_OP_GET, 7, "big");
    gkv_wr_uint(&w, GKV_F_OFFSET, 4096);
    gkv_wr_uint(&w, GKV_F_LENGTH, 70000);
    gkv_wr_end(&w);
    send_frames(0, &w);
    turns(8);
    drain(0);
    turns(8);
    drain(0);
    save(dir, "values");

    /* Every other command. */
    hello(&w, 0);
    set_small(&w, 2, "k/1", "one");
    set_small(&w, 3, "k/2", "two");
    req(&w, GKV_OP_MGET, 4, NULL);
    size_t at = gkv_wr_array_begin(&w, GKV_F_ITEMS);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_array(&w.pk, 4);
        msgpack_pack_bin(&w.pk, 3);
        msgpack_pack_bin_body(&w.pk, i == 0 ? "k/1" : i == 1 ? "k/2" : "k/9", 3);
        msgpack_pack_uint64(&w.pk, 0);
        msgpack_pack_uint64(&w.pk, 0);
        msgpack_pack_uint64(&w.pk, 0);
    }
    gkv_wr_array_end(&w, at, 3);
    gkv_wr_end(&w);
    for (unsigned op = GKV_OP_EXISTS; op <= GKV_OP_DEL; op++) {
        req(&w, op, 5, NULL);
        at = gkv_wr_array_begin(&w, GKV_F_KEYS);
        msgpack_pack_bin(&w.pk, 3);
        msgpack_pack_bin_body(&w.pk, "k/2", 3);
        gkv_wr_array_end(&w, at, 1);
        gkv_wr_end(&w);
    }
    req(&w, GKV_OP_LIST, 6, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "k/", 2);
    gkv_wr_bin(&w, GKV_F_DELIM, "/", 1);
    gkv_wr_uint(&w, GKV_F_LIMIT, 1);
    gkv_wr_uint(&w, GKV_F_FLAGS, 1);
    gkv_wr_end(&w);
    req(&w, GKV_OP_GETSIZE, 7, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "k/", 2);
    gkv_wr_end(&w);
    req(&w, GKV_OP_GETSIZE, 8, "k/1");
    gkv_wr_end(&w);
    req(&w, GKV_OP_EXPIRE, 9, "k/1");
    gkv_wr_uint(&w, GKV_F_TTL, 100000);
    gkv_wr_end(&w);
    req(&w, GKV_OP_TTL, 10, "k/1");
    gkv_wr_end(&w);
    req(&w, GKV_OP_PERSIST, 11, "k/1");
    gkv_wr_end(&w);
    req(&w, GKV_OP_MOVE, 12, "k/1");
    gkv_wr_uint(&w, GKV_F_GPU, 0);
    gkv_wr_end(&w);
    req(&w, GKV_OP_INFO, 13, NULL);
    gkv_wr_end(&w);
    req(&w, GKV_OP_INFO, 14, NULL);
    gkv_wr_uint(&w, GKV_F_FLAGS, 1);
    gkv_wr_end(&w);
    req(&w, GKV_OP_SAVE, 15, NULL);
    gkv_wr_end(&w);
    req(&w, GKV_OP_DEL, 16, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "k/", 2);
    gkv_wr_end(&w);
    req(&w, GKV_OP_PING, 17, NULL);
    gkv_wr_end(&w);
    req(&w, GKV_OP_FLUSH, 18, NULL);
    gkv_wr_end(&w);
    send_frames(1, &w);
    turns(8);
    drain(1);
    save(dir, "commands");

    /* Zero-copy: MAP, CREATE, SEAL (keep, spare), ABORT, RELEASE; protocol 1 too. */
    for (unsigned v = 1; v <= 2; v++) {
        hello(&w, v);
        set_small(&w, 2, "z/k", "0123456789abcdef");
        req(&w, GKV_OP_MAP, 3, "z/k");
        gkv_wr_end(&w);
        req(&w, GKV_OP_CREATE, 4, "z/k");
        gkv_wr_uint(&w, GKV_F_SIZE, 16);
        gkv_wr_uint(&w, GKV_F_LEASE, 1);
        gkv_wr_end(&w);
        req(&w, GKV_OP_SEAL, 5, NULL);
        gkv_wr_uint(&w, GKV_F_LEASE, 2);
        gkv_wr_uint(&w, GKV_F_SPARE, 1);
        gkv_wr_uint(&w, GKV_F_FLAGS, 4);
        gkv_wr_end(&w);
        req(&w, GKV_OP_CREATE, 6, "z/n");
        gkv_wr_uint(&w, GKV_F_SIZE, 70000);
        gkv_wr_end(&w);
        req(&w, GKV_OP_ABORT, 7, NULL);
        gkv_wr_uint(&w, GKV_F_LEASE, 3);
        gkv_wr_end(&w);
        req(&w, GKV_OP_RELEASE, 8, NULL);
        at = gkv_wr_array_begin(&w, GKV_F_LEASES);
        msgpack_pack_uint64(&w.pk, 1);
        msgpack_pack_uint64(&w.pk, 2);
        gkv_wr_array_end(&w, at, 2);
        gkv_wr_end(&w);
        send_frames(2, &w);
        turns(4);
        drain(2);
        leave(2, 0);
        save(dir, v == 1 ? "zero_copy_v1" : "zero_copy");
    }

    /* Issue 32's defects: GETs pipelined and the client gone; past the output limit; a TAKEOVER
     * dropped at once; the daemon stopped under load. */
    hello(&w, 0);
    set_large_header(&w, 2, "v64", 16);
    send_frames(0, &w);
    filler(0, 16);
    turns(4);
    for (int i = 0; i < 200; i++)
        get(&w, 10 + (unsigned)i, "v64");
    send_frames(0, &w);
    turns(2);
    leave(0, 1);
    turns(8);
    save(dir, "gets_then_gone");

    hello(&w, 0);
    set_small(&w, 2, "s", "0123456789012345678901234567890123456789");
    for (int i = 0; i < 600; i++)
        get(&w, 10 + (unsigned)i, "s");
    send_frames(0, &w);
    turns(8);
    drain(0);
    turns(8);
    drain(0);
    save(dir, "past_the_output_limit");

    req(&w, GKV_OP_TAKEOVER, 1, NULL);
    gkv_wr_uint(&w, GKV_F_FLAGS, 0);
    gkv_wr_end(&w);
    send_frames(1, &w);
    leave(1, 0);
    hello(&w, 0);
    send_frames(0, &w);
    turns(4);
    drain(0);
    req(&w, GKV_OP_TAKEOVER, 1, NULL);
    gkv_wr_uint(&w, GKV_F_FLAGS, 0);
    gkv_wr_end(&w);
    req(&w, GKV_OP_TAKEOVER, 2, NULL);
    gkv_wr_uint(&w, GKV_F_FLAGS, 1);
    gkv_wr_end(&w);
    req(&w, GKV_OP_TAKEOVER, 3, NULL);
    gkv_wr_uint(&w, GKV_F_FLAGS, 2);
    gkv_wr_end(&w);
    send_frames(2, &w);
    turns(8);
    save(dir, "takeover");

    hello(&w, 0);
    set_large_header(&w, 2, "big", 2000);
    send_frames(0, &w);
    filler(0, 500);
    get(&w, 3, "big");
    send_frames(1, &w);
    stop_daemon();
    filler(0, 100);
    turns(8);
    save(dir, "stop_under_load");

    /* Client 0 watches every key, then stops reading while client 1 writes well past the
     * watch buffer (fuzz_daemon.c's 64K), sends requests a watcher may not make, watches
     * again and unwatches; client 2 watches a prefix (local) and goes away with events
     * unread. */
    hello(&w, 0);
    req(&w, GKV_OP_WATCH, 2, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "", 0);
    gkv_wr_end(&w);
    send_frames(0, &w);
    req(&w, GKV_OP_WATCH, 2, NULL);
    gkv_wr_bin(&w, GKV_F_PREFIX, "w/", 2);
    gkv_wr_uint(&w, GKV_F_LOCAL, 1); /* a daemon alone: the same as without */
    gkv_wr_end(&w);
    send_frames(2, &w);
    turns(2);
    for (int i = 0; i < 400; i++) {
        char key[300];
        memset(key, 'w', 250);
        snprintf(key + 250, 50, "/%d", i);
        set_small(&w, 10 + (unsigned)i, key, "v");
    }
    send_frames(1, &w);
    turns(8);
    leave(2, 0);
    get(&w, 3, "w/1");
    set_small(&w, 4, "w/2", "refused while watching");
    req(&w, GKV_OP_WATCH, 5, NULL);
    gkv_wr_end(&w);
    req(&w, GKV_OP_PING, 6, NULL);
    gkv_wr_end(&w);
    req(&w, GKV_OP_UNWATCH, 7, NULL);
    gkv_wr_end(&w);
    get(&w, 8, "w/1");
    send_frames(0, &w);
    turns(4);
    drain(0);
    turns(4);
    save(dir, "watches");

    /* Asynchronous seals: HELLO asks for a fence page; seals name good and bad counters and
     * targets; the client goes away with one waiting. */
    req(&w, GKV_OP_HELLO, 1, NULL);
    gkv_wr_uint(&w, GKV_F_ZC, 2);
    gkv_wr_uint(&w, GKV_F_FENCES, 1);
    gkv_wr_end(&w);
    send_frames(0, &w);
    turns(2);
    for (unsigned i = 0; i < 4; i++) {
        req(&w, GKV_OP_CREATE, 10 + i, "f");
        gkv_wr_uint(&w, GKV_F_SIZE, 64);
        gkv_wr_end(&w);
        req(&w, GKV_OP_SEAL, 20 + i, NULL);
        gkv_wr_uint(&w, GKV_F_LEASE, 2 + i); /* lease ids count from 1; a wrong one is fine */
        gkv_wr_uint(&w, GKV_F_ASYNC, 1);
        gkv_wr_uint(&w, GKV_F_FENCE, i == 3 ? 4 : 8 * i);
        gkv_wr_uint(&w, GKV_F_TARGET, i == 2 ? 0 : 1 + i);
        gkv_wr_end(&w);
    }
    req(&w, GKV_OP_SEAL, 30, NULL); /* a synchronous seal behind the waiting ones */
    gkv_wr_uint(&w, GKV_F_LEASE, 3);
    gkv_wr_end(&w);
    send_frames(0, &w);
    turns(8);
    leave(0, 0);
    turns(4);
    save(dir, "async_seals");

    /* Waits for a newer version (after): with a wait (the daemon keeps no versions: NOTSUP),
     * without one (INVAL), a huge one; and a waiting GET the client leaves. */
    hello(&w, 0);
    set_small(&w, 2, "v", "1");
    for (unsigned i = 0; i < 3; i++) {
        req(&w, i == 2 ? GKV_OP_MAP : GKV_OP_GET, 3 + i, "v");
        if (i != 1)
            gkv_wr_uint(&w, GKV_F_WAIT, 20);
        gkv_wr_uint(&w, GKV_F_AFTER, i == 0 ? 0 : UINT64_MAX);
        gkv_wr_end(&w);
    }
    req(&w, GKV_OP_GET, 6, "absent");
    gkv_wr_uint(&w, GKV_F_WAIT, 1000);
    gkv_wr_end(&w);
    send_frames(0, &w);
    turns(4);
    leave(0, 0);
    turns(2);
    save(dir, "waits_after");

    /* Early MAPs: client 1 waits for a key with early (and one with a range, which takes none);
     * client 0 seals it asynchronously, its counter never written, then goes away; client 1's
     * waits then end. */
    req(&w, GKV_OP_HELLO, 1, NULL);
    gkv_wr_uint(&w, GKV_F_ZC, 2);
    gkv_wr_end(&w);
    req(&w, GKV_OP_MAP, 2, "e");
    gkv_wr_uint(&w, GKV_F_WAIT, 50);
    gkv_wr_uint(&w, GKV_F_EARLY, 1);
    gkv_wr_end(&w);
    send_frames(1, &w);
    req(&w, GKV_OP_HELLO, 1, NULL);
    gkv_wr_uint(&w, GKV_F_ZC, 2);
    gkv_wr_uint(&w, GKV_F_FENCES, 1);
    gkv_wr_end(&w);
    req(&w, GKV_OP_CREATE, 2, "e");
    gkv_wr_uint(&w, GKV_F_SIZE, 4096);
    gkv_wr_end(&w);
    req(&w, GKV_OP_SEAL, 3, NULL);
    gkv_wr_uint(&w, GKV_F_LEASE, 2);
    gkv_wr_uint(&w, GKV_F_ASYNC, 1);
    gkv_wr_uint(&w, GKV_F_FENCE, 8);
    gkv_wr_uint(&w, GKV_F_TARGET, 1);
    gkv_wr_end(&w);
    send_frames(0, &w);
    turns(4);
    req(&w, GKV_OP_MAP, 3, "e");
    gkv_wr_uint(&w, GKV_F_WAIT, 20);
    gkv_wr_uint(&w, GKV_F_EARLY, 1);
    gkv_wr_uint(&w, GKV_F_OFFSET, 1);
    gkv_wr_end(&w);
    req(&w, GKV_OP_RELEASE, 4, NULL);
    gkv_wr_uint(&w, GKV_F_LEASE, 1);
    gkv_wr_end(&w);
    send_frames(1, &w);
    turns(4);
    leave(0, 0);
    turns(4);
    leave(1, 0);
    turns(2);
    save(dir, "early_maps");

    /* Held imports: RELEASEs with hold (refused where holds are not offered, as on the host
     * backend; a hold named twice), an unhold alone of ids not held, then the lease ended. */
    hello(&w, 2);
    set_small(&w, 2, "h/k", "0123456789abcdef");
    req(&w, GKV_OP_MAP, 3, "h/k");
    gkv_wr_end(&w);
    for (unsigned id = 4, twice = 0; twice < 2; twice++, id++) {
        req(&w, GKV_OP_RELEASE, id, NULL);
        gkv_wr_uint(&w, GKV_F_LEASE, 1);
        size_t at = gkv_wr_array_begin(&w, GKV_F_HOLD);
        for (unsigned i = 0; i <= twice; i++)
            msgpack_pack_uint64(&w.pk, 1);
        gkv_wr_array_end(&w, at, twice + 1);
        gkv_wr_end(&w);
    }
    req(&w, GKV_OP_RELEASE, 6, NULL);
    size_t unheld = gkv_wr_array_begin(&w, GKV_F_UNHOLD);
    msgpack_pack_uint64(&w.pk, 1);
    msgpack_pack_uint64(&w.pk, 99);
    gkv_wr_array_end(&w, unheld, 2);
    gkv_wr_end(&w);
    req(&w, GKV_OP_RELEASE, 7, NULL);
    gkv_wr_uint(&w, GKV_F_LEASE, 1);
    gkv_wr_end(&w);
    send_frames(0, &w);
    turns(4);
    drain(0);
    leave(0, 0);
    save(dir, "holds");

    gkv_wr_fini(&w);
    return 0;
}
