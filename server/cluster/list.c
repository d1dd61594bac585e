/* list.c: LIST's rules over a sorted array of keys (a home's records, or the answers of every
 * home merged): the same prefix, delimiter, cursor and limit as a LIST of one node's keys
 * (cmd_keys.c), so that a client pages through a cluster as through one node. */
#include <stdlib.h>
#include <string.h>

#include "cluster_impl.h"

static int cmp_bytes(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

static int cmp_items(const void *x, const void *y)
{
    const cl_item_t *a = x, *b = y;
    return cmp_bytes(a->key, a->klen, b->key, b->klen);
}

void gkv_cl_items_sort(cl_item_t *items, size_t n)
{
    if (n > 1)
        qsort(items, n, sizeof(*items), cmp_items);
}

/* Whether key comes after the cursor: a key's cursor means "after it"; a directory's (it ends
 * with the delimiter) means "after everything under it". */
static bool after_cursor(const uint8_t *k, size_t kl, const uint8_t *cursor, size_t clen,
                         int delim)
{
    if (!clen)
        return true;
    if (delim >= 0 && cursor[clen - 1] == delim && kl >= clen && !memcmp(k, cursor, clen))
        return false;
    return cmp_bytes(k, kl, cursor, clen) > 0;
}

void gkv_cl_list_write(gkv_wr_t *w, cl_item_t *items, size_t n, const uint8_t *prefix,
                       size_t plen, int delim, const uint8_t *cursor, size_t clen,
                       uint64_t limit, bool more_elsewhere)
{
    /* Entries first, then directories, as two arrays; both in key order among themselves. */
    size_t epos = gkv_wr_array_begin(w, GKV_F_ENTRIES);
    msgpack_sbuffer dirs;
    msgpack_packer dpk;
    msgpack_sbuffer_init(&dirs);
    msgpack_packer_init(&dpk, &dirs, msgpack_sbuffer_write);
    uint32_t nentries = 0, ndirs = 0;
    const uint8_t *last = NULL, *last_dir = NULL;
    size_t last_len = 0, last_dir_len = 0;
    bool more = false;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = items[i].key;
        size_t kl = items[i].klen;
        if (kl < plen || memcmp(k, prefix, plen))
            continue;
        size_t dl = 0;
        if (items[i].dir) {
            dl = kl;
        } else if (delim >= 0) {
            const uint8_t *d = memchr(k + plen, delim, kl - plen);
            dl = d ? (size_t)(d - k) + 1 : 0;
        }
        const uint8_t *name = k;
        size_t nl = dl ? dl : kl;
        if (!after_cursor(name, nl, cursor, clen, delim))
            continue;
        if (dl && last_dir && last_dir_len == dl && !memcmp(last_dir, k, dl))
            continue; /* the same directory again */
        if (nentries + ndirs == limit || gkv_wr_frame_size(w) + dirs.size > GKV_MAX_HEADER / 2) {
            more = true;
            break;
        }
        if (dl) {
            msgpack_pack_bin(&dpk, dl);
            msgpack_pack_bin_body(&dpk, k, dl);
            ndirs++;
            last_dir = k;
            last_dir_len = dl;
        } else {
            msgpack_pack_array(&w->pk, 2);
            msgpack_pack_bin(&w->pk, kl);
            msgpack_pack_bin_body(&w->pk, k, kl);
            msgpack_pack_uint64(&w->pk, items[i].size);
            nentries++;
        }
        last = name;
        last_len = nl;
    }
    gkv_wr_array_end(w, epos, nentries);
    size_t dpos = gkv_wr_array_begin(w, GKV_F_DIRS);
    if (msgpack_sbuffer_write(&w->sb, dirs.data, dirs.size))
        w->failed = true;
    gkv_wr_array_end(w, dpos, ndirs);
    if ((more || more_elsewhere) && last)
        gkv_wr_bin(w, GKV_F_CURSOR, last, last_len);
    msgpack_sbuffer_destroy(&dirs);
}
