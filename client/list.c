/* list.c: the LIST iterator: pages of entries and folded directories, merged in key order. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"

struct gkv_list {
    gkv_client_t *c;
    uint8_t *prefix;
    size_t plen;
    int delim;
    uint32_t page;
    uint8_t *cursor; /* resume point from the last page, NULL before the first */
    size_t cursor_len;
    bool have_cursor, last_page;
    uint8_t *hdr; /* this page's response header (a copy) */
    gkv_reader_t entries, dirs;
    uint32_t nentries, ndirs;
    /* Lookahead of each array, so the smaller key is returned first. */
    bool e_ok, d_ok;
    gkv_slice_t e_key, d_key;
    uint64_t e_size, e_gpu, e_tier;
    int tier; /* of the entry gkv_list_next returned last */
};

static int next_entry(gkv_list_t *it)
{
    uint32_t n;
    it->e_ok = false;
    if (!it->nentries)
        return 0;
    it->nentries--;
    /* [key, size, gpu, tier] (asked for with GKV_LIST_GPU and GKV_LIST_TIER), or [key, size,
     * gpu] or [key, size] from older servers. */
    it->e_gpu = it->e_tier = 0;
    if (gkv_read_array(&it->entries, &n) || n < 2 || n > 4 ||
        gkv_read_bin(&it->entries, &it->e_key) || gkv_read_uint(&it->entries, &it->e_size) ||
        (n >= 3 && (gkv_read_uint(&it->entries, &it->e_gpu) || it->e_gpu >= GKV_FDPASS_MAX)) ||
        (n == 4 && (gkv_read_uint(&it->entries, &it->e_tier) || it->e_tier > GKV_TIER_DISK)))
        return GKV_EPROTO;
    it->e_ok = true;
    return 0;
}

static int next_dir(gkv_list_t *it)
{
    it->d_ok = false;
    if (!it->ndirs)
        return 0;
    it->ndirs--;
    if (gkv_read_bin(&it->dirs, &it->d_key))
        return GKV_EPROTO;
    it->d_ok = true;
    return 0;
}

static int fetch(gkv_list_t *it)
{
    gkv_client_t *c = it->c;
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_LIST);
    gkv_wr_bin(&c->wr, GKV_F_PREFIX, it->plen ? (const void *)it->prefix : "", it->plen);
    if (it->delim >= 0) {
        uint8_t d = (uint8_t)it->delim;
        gkv_wr_bin(&c->wr, GKV_F_DELIM, &d, 1);
    }
    if (it->have_cursor)
        gkv_wr_bin(&c->wr, GKV_F_CURSOR, it->cursor, it->cursor_len);
    gkv_wr_uint(&c->wr, GKV_F_LIMIT, it->page);
    gkv_wr_uint(&c->wr, GKV_F_FLAGS, GKV_LIST_GPU | GKV_LIST_TIER);
    int rc;
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc;
    /* Keep this page: the client's header buffer is reused by the next call on it. */
    size_t hlen = (size_t)(c->resp.entries.len + c->resp.dirs.len + c->resp.cursor.len);
    free(it->hdr);
    it->hdr = malloc(hlen ? hlen : 1);
    if (!it->hdr)
        return GKV_ENOMEM;
    uint8_t *p = it->hdr;
    memcpy(p, c->resp.entries.p, c->resp.entries.len);
    gkv_read_init(&it->entries, p, c->resp.entries.len);
    p += c->resp.entries.len;
    memcpy(p, c->resp.dirs.p, c->resp.dirs.len);
    gkv_read_init(&it->dirs, p, c->resp.dirs.len);
    it->nentries = it->ndirs = 0;
    if ((c->resp.entries.len && gkv_read_array(&it->entries, &it->nentries)) ||
        (c->resp.dirs.len && gkv_read_array(&it->dirs, &it->ndirs)))
        return GKV_EPROTO;
    it->last_page = !c->resp.has_cursor;
    if (c->resp.has_cursor) {
        uint8_t *cur = realloc(it->cursor, c->resp.cursor.len ? c->resp.cursor.len : 1);
        if (!cur)
            return GKV_ENOMEM;
        it->cursor = cur;
        memcpy(cur, c->resp.cursor.p, c->resp.cursor.len);
        it->cursor_len = c->resp.cursor.len;
        it->have_cursor = true;
    }
    if ((rc = next_entry(it)) || (rc = next_dir(it)))
        return rc;
    return 0;
}

int gkv_list_open(gkv_client_t *c, const void *prefix, size_t plen, int delimiter, uint32_t page,
                  gkv_list_t **out)
{
    if (delimiter < 0 || delimiter > 255 || page > GKV_MAX_LIST)
        return GKV_EINVAL;
    gkv_list_t *it = calloc(1, sizeof(*it));
    if (!it)
        return GKV_ENOMEM;
    it->prefix = malloc(plen ? plen : 1);
    if (!it->prefix) {
        free(it);
        return GKV_ENOMEM;
    }
    if (plen)
        memcpy(it->prefix, prefix, plen);
    it->plen = plen;
    it->c = c;
    it->delim = delimiter ? delimiter : -1;
    it->page = page ? page : 1000;
    int rc = fetch(it);
    if (rc) {
        gkv_list_close(it);
        return rc;
    }
    *out = it;
    return 0;
}

static int cmp(gkv_slice_t a, gkv_slice_t b)
{
    int r = memcmp(a.p, b.p, a.len < b.len ? a.len : b.len);
    return r ? r : (a.len > b.len) - (a.len < b.len);
}

int gkv_list_next(gkv_list_t *it, gkv_list_entry_t *e)
{
    int rc;
    while (!it->e_ok && !it->d_ok) {
        if (it->last_page)
            return 0;
        if ((rc = fetch(it)))
            return rc;
    }
    if (it->e_ok && (!it->d_ok || cmp(it->e_key, it->d_key) < 0)) {
        e->key = it->e_key.p;
        e->klen = it->e_key.len;
        e->size = it->e_size;
        e->is_dir = 0;
        e->gpu = (int)it->e_gpu;
        it->tier = (int)it->e_tier;
        rc = next_entry(it);
    } else {
        e->key = it->d_key.p;
        e->klen = it->d_key.len;
        e->size = 0;
        e->is_dir = 1;
        e->gpu = 0;
        it->tier = GKV_TIER_GPU;
        rc = next_dir(it);
    }
    return rc ? rc : 1;
}

int gkv_list_tier(const gkv_list_t *it)
{
    return it->tier;
}

void gkv_list_close(gkv_list_t *it)
{
    if (!it)
        return;
    free(it->prefix);
    free(it->cursor);
    free(it->hdr);
    free(it);
}
