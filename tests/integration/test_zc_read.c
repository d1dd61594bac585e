/* test_zc_read.c: zero-copy reading against a real gpukvd (host backend, arena shared): MAP
 * and RELEASE, bytes that stay under a lease, the lease cache, misuse, caps. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "zc_daemon.h"

START_TEST(map_reads_in_place_and_release_ends_the_lease)
{
    gkv_client_t *c = conn(d.url);
    ck_assert_str_eq(gkv_client_info(c)->zero_copy, "host-memfd");
    ck_assert_int_eq(
        gkv_set(c, KEY("m/a"), "0123456789", 10, &(gkv_set_opts_t){.meta = "f4", .meta_len = 2}),
        0);
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(c, KEY("m/a"), NULL, &m), 0);
    ck_assert_int_eq(m->on_device, 0);
    ck_assert_int_eq(m->device, -1);
    ck_assert_uint_eq(m->length, 10);
    ck_assert_int_eq(memcmp(m->ptr, "0123456789", 10), 0);
    ck_assert_uint_eq(m->meta_len, 2);
    ck_assert_uint_eq(info_u64(c, "leases"), 1);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 0);
    gkv_mapping_t *r;
    ck_assert_int_eq(gkv_map(c, KEY("m/a"), &(gkv_range_t){.offset = 2, .length = 3}, &r), 0);
    ck_assert_uint_eq(r->offset, 2);
    ck_assert_uint_eq(r->length, 3);
    ck_assert_int_eq(memcmp(r->ptr, "234", 3), 0);
    gkv_mapping_t *s;
    ck_assert_int_eq(gkv_map(c, KEY("m/a"), &(gkv_range_t){.suffix = 2}, &s), 0);
    ck_assert_int_eq(memcmp(s->ptr, "89", 2), 0);
    gkv_mapping_t *both[] = {r, s};
    ck_assert_int_eq(gkv_unmap_batch(c, both, 2), 0);
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_set(c, KEY("m/empty"), "", 0, NULL), 0);
    ck_assert_int_eq(gkv_map(c, KEY("m/empty"), NULL, &m), 0);
    ck_assert_uint_eq(m->length, 0);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    gkv_client_close(c);
}
END_TEST

START_TEST(delete_and_overwrite_under_a_lease_keep_the_bytes)
{
    gkv_client_t *c = conn(d.url), *other = conn(d.url);
    size_t len = 1 << 20;
    char *v1 = malloc(len), *v2 = malloc(len);
    harness_fill(v1, len, 1);
    harness_fill(v2, len, 2);
    ck_assert_int_eq(gkv_set(c, KEY("o/k"), v1, len, NULL), 0);
    uint64_t used0 = info_u64(c, "used_bytes");
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(c, KEY("o/k"), NULL, &m), 0);
    ck_assert_int_eq(gkv_set(other, KEY("o/k"), v2, len, NULL), 0); /* overwrite */
    char *got = malloc(len);
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(other, KEY("o/k"), NULL, got, len, &vi), 0);
    ck_assert_int_eq(memcmp(got, v2, len), 0);    /* new readers see the new value */
    ck_assert_int_eq(memcmp(m->ptr, v1, len), 0); /* the holder still sees the old one */
    ck_assert_uint_eq(info_u64(c, "used_bytes"), used0 + len);
    const void *k[] = {"o/k"};
    size_t kl[] = {3};
    ck_assert_int_eq(gkv_del(other, k, kl, 1), 1);
    ck_assert_int_eq(gkv_flush(other), 0);
    ck_assert_int_eq(memcmp(m->ptr, v1, len), 0);
    ck_assert_uint_eq(info_u64(c, "keys"), 0);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), len); /* only the leased, unlinked value */
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), 0);
    free(v1);
    free(v2);
    free(got);
    gkv_client_close(c);
    gkv_client_close(other);
}
END_TEST

START_TEST(lease_misuse_gets_errors_and_disturbs_nothing)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("mis/k"), "value", 5, NULL), 0);
    int a = raw_zc_connect(), b = raw_zc_connect();
    ck_assert_int_eq(raw_op(a, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_op(b, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_op(a, GKV_OP_MAP, "mis/k", 0, &r, hdr), 0);
    uint64_t la = r.lease;
    ck_assert_int_eq(raw_op(b, GKV_OP_MAP, "mis/k", 0, &r, hdr), 0);
    uint64_t lb = r.lease;
    ck_assert_uint_ne(la, lb);
    /* A MAP may offer a lease for reuse: only this connection's MAP lease on the same value is
     * named again; another connection's lease or an unknown id gets a lease of its own. */
    ck_assert_int_eq(raw_op(a, GKV_OP_MAP, "mis/k", la, &r, hdr), 0);
    ck_assert_uint_eq(r.lease, la);
    ck_assert_int_eq(raw_op(a, GKV_OP_MAP, "mis/k", lb, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, lb);
    ck_assert_uint_ne(r.lease, la);
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, r.lease, &r, hdr), 0);
    ck_assert_int_eq(raw_op(a, GKV_OP_MAP, "mis/k", 987654321, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, 987654321);
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, r.lease, &r, hdr), 0);
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, lb, &r, hdr), GKV_ENOLEASE); /* b's */
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, 987654321, &r, hdr), GKV_ENOLEASE);
    ck_assert_int_eq(raw_op(a, GKV_OP_SEAL, NULL, la, &r, hdr), GKV_EINVAL); /* a MAP lease */
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, la, &r, hdr), 0);
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, la, &r, hdr), GKV_ENOLEASE); /* double */
    ck_assert_int_eq(raw_op(a, GKV_OP_CREATE, "mis/new", 0, &r, hdr), 0);
    uint64_t lc = r.lease;
    ck_assert_int_eq(raw_op(b, GKV_OP_SEAL, NULL, lc, &r, hdr), GKV_ENOLEASE);
    ck_assert_int_eq(raw_op(b, GKV_OP_ABORT, NULL, lc, &r, hdr), GKV_ENOLEASE);
    ck_assert_uint_eq(info_u64(c, "leases"), 2); /* b's MAP and a's CREATE, untouched */
    ck_assert_int_eq(raw_op(a, GKV_OP_SEAL, NULL, lc, &r, hdr), 0);
    ck_assert_int_eq(raw_op(a, GKV_OP_SEAL, NULL, lc, &r, hdr), GKV_ENOLEASE);
    /* A batch with one bad id releases nothing. */
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_RELEASE);
    size_t pos = gkv_wr_array_begin(&w, GKV_F_LEASES);
    msgpack_pack_uint64(&w.pk, lb);
    msgpack_pack_uint64(&w.pk, lb);
    gkv_wr_array_end(&w, pos, 2);
    gkv_wr_end(&w);
    ck_assert_int_eq(raw_call(b, &w, &r, hdr, 65536), GKV_ENOLEASE);
    ck_assert_uint_eq(info_u64(c, "leases"), 1);
    gkv_wr_fini(&w);
    close(a);
    close(b);
    char buf[8];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, KEY("mis/k"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(memcmp(buf, "value", 5), 0);
    gkv_client_close(c);
}
END_TEST

/* gkv_unmap keeps a small value's lease for the connection's next MAP of that key, which the
 * server renews while the key has that value; it ends when the value changes, the key goes,
 * another request is sent, or more than 8 are kept. */
START_TEST(unmap_caches_small_leases_for_the_next_map)
{
    gkv_client_t *c = conn(d.url), *o = conn(d.url);
    uint64_t base = info_u64(o, "leases");
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_set(o, KEY("park/a"), "first!", 6, NULL), 0);
    ck_assert_int_eq(gkv_map(c, KEY("park/a"), NULL, &m), 0);
    uint64_t first = m->lease;
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_uint_eq(info_u64(o, "leases"), base + 1); /* parked: still a lease */
    ck_assert_int_eq(gkv_map(c, KEY("park/a"), &(gkv_range_t){.offset = 2}, &m), 0);
    ck_assert_uint_eq(m->lease, first); /* renewed */
    ck_assert_uint_eq(m->length, 4);
    ck_assert_int_eq(memcmp(m->ptr, "rst!", 4), 0);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    /* The value changes: a new lease, the new bytes, and the parked one ended. */
    ck_assert_int_eq(gkv_set(o, KEY("park/a"), "second", 6, NULL), 0);
    ck_assert_int_eq(gkv_map(c, KEY("park/a"), NULL, &m), 0);
    ck_assert_uint_ne(m->lease, first);
    ck_assert_int_eq(memcmp(m->ptr, "second", 6), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), base + 1);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), base); /* another request ends parked leases */
    /* The key goes: MAP fails and ends the parked lease. */
    ck_assert_int_eq(gkv_map(c, KEY("park/a"), NULL, &m), 0);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    const void *dk[] = {"park/a"};
    size_t dl[] = {6};
    ck_assert_int_eq(gkv_del(o, dk, dl, 1), 1);
    ck_assert_int_eq(gkv_map(c, KEY("park/a"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(c, "leases"), base);
    /* At most 8 are kept: the oldest goes first. */
    uint64_t ids[9];
    char key[16];
    for (int i = 0; i < 9; i++) {
        snprintf(key, sizeof(key), "park/%d", i);
        ck_assert_int_eq(gkv_set(o, key, strlen(key), "v", 1, NULL), 0);
    }
    for (int i = 0; i < 9; i++) {
        snprintf(key, sizeof(key), "park/%d", i);
        ck_assert_int_eq(gkv_map(c, key, strlen(key), NULL, &m), 0);
        ids[i] = m->lease;
        ck_assert_int_eq(gkv_unmap(c, m), 0);
    }
    ck_assert_uint_eq(info_u64(o, "leases"), base + 8);
    ck_assert_int_eq(gkv_map(c, KEY("park/8"), NULL, &m), 0);
    ck_assert_uint_eq(m->lease, ids[8]);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_int_eq(gkv_map(c, KEY("park/0"), NULL, &m), 0);
    ck_assert_uint_ne(m->lease, ids[0]);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    /* Values over 1 MiB are released at unmap. */
    size_t big = (1u << 20) + 1;
    char *buf = calloc(1, big);
    ck_assert_int_eq(gkv_set(o, KEY("park/big"), buf, big, NULL), 0);
    free(buf);
    ck_assert_int_eq(gkv_map(c, KEY("park/big"), NULL, &m), 0);
    uint64_t big_lease = m->lease;
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_int_eq(gkv_map(c, KEY("park/big"), NULL, &m), 0);
    ck_assert_uint_ne(m->lease, big_lease);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    gkv_client_close(c); /* its parked leases end when the daemon has seen the close */
    for (int i = 0; i < 200 && info_u64(o, "leases") != base; i++)
        usleep(5000);
    ck_assert_uint_eq(info_u64(o, "leases"), base);
    gkv_client_close(o);
}
END_TEST

/* gkv_client_set_lease_cache: a larger cache keeps large values' leases, gkv_map_many renews
 * them (a key asked twice renews once, a changed key gets a new lease and its new bytes), the
 * byte budget evicts the oldest (gkv_unmap and gkv_unmap_many alike; gkv_unmap_batch never
 * caches), and 0 slots turns the cache off. */
START_TEST(a_sized_lease_cache_serves_map_many_without_imports)
{
    gkv_client_t *c = conn(d.url), *o = conn(d.url);
    wait_leases(o, 0); /* the earlier tests' closed connections' leases have ended */
    uint64_t base = 0;
    ck_assert_int_eq(gkv_client_set_lease_cache(c, 4097, 0, 0), GKV_EINVAL);
    ck_assert_int_eq(gkv_client_set_lease_cache(c, 64, 8u << 20, 12u << 20), 0);
    size_t big = 4u << 20;
    char *buf = malloc(big), key[16];
    for (int i = 0; i < 4; i++) {
        memset(buf, 'a' + i, big);
        snprintf(key, sizeof(key), "lc/%d", i);
        ck_assert_int_eq(gkv_set(o, key, strlen(key), buf, big, NULL), 0);
    }
    gkv_map_item_t it[5];
    char keys[5][16];
    uint64_t first[5];
    for (int i = 0; i < 5; i++) {
        snprintf(keys[i], sizeof(keys[i]), "lc/%d", i < 3 ? i : 0); /* lc/0 asked twice */
        it[i] = (gkv_map_item_t){.key = keys[i], .klen = strlen(keys[i])};
    }
    ck_assert_int_eq(gkv_map_many(c, it, 3), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(it[i].status, 0);
        first[i] = it[i].mapping->lease;
        ck_assert_int_eq(gkv_unmap(c, it[i].mapping), 0); /* cached: 4 MiB <= 8 MiB */
    }
    /* 12 MiB in all: three cached leases fit, with their imports. */
    ck_assert_uint_eq(info_u64(o, "leases"), base + 3);
    memset(buf, 'z', big);
    ck_assert_int_eq(gkv_set(o, KEY("lc/1"), buf, big, NULL), 0); /* lc/1 changes */
    ck_assert_int_eq(gkv_map_many(c, it, 5), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(it[i].status, 0);
    ck_assert_uint_eq(it[0].mapping->lease, first[0]); /* renewed */
    ck_assert_uint_eq(it[2].mapping->lease, first[2]);
    ck_assert_uint_ne(it[1].mapping->lease, first[1]); /* a new value, a new lease */
    ck_assert_uint_ne(it[3].mapping->lease, first[0]); /* lc/0 again: a lease of its own */
    ck_assert_int_eq(((const char *)it[1].mapping->ptr)[big - 1], 'z');
    ck_assert_int_eq(((const char *)it[0].mapping->ptr)[big - 1], 'a');
    ck_assert_int_eq(((const char *)it[2].mapping->ptr)[0], 'c');
    gkv_mapping_t *five[5];
    for (int i = 0; i < 5; i++)
        five[i] = it[i].mapping;
    ck_assert_int_eq(gkv_unmap_many(c, five, 0), GKV_EINVAL);
    ck_assert_int_eq(gkv_unmap_many(c, five, 5), 0); /* as gkv_unmap on each */
    /* Five unmapped, 12 MiB allowed: the three newest stay (the evictions' RELEASEs, sent
     * without waiting, are answered before the next reply on c). */
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(o, "leases"), base + 3);
    /* gkv_unmap_batch ends its leases, cached or not: mapped again, a key gets a new lease. */
    ck_assert_int_eq(gkv_map(c, KEY("lc/3"), NULL, &m), 0);
    uint64_t once = m->lease;
    ck_assert_int_eq(gkv_unmap_batch(c, &m, 1), 0);
    ck_assert_int_eq(gkv_map(c, KEY("lc/3"), NULL, &m), 0);
    ck_assert_uint_ne(m->lease, once);
    ck_assert_uint_eq(info_u64(o, "leases"), base + 4);
    ck_assert_int_eq(gkv_unmap_batch(c, &m, 1), 0);
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(o, "leases"), base + 3);
    /* Off: unmap ends the lease, and what was cached goes. */
    ck_assert_int_eq(gkv_client_set_lease_cache(c, 0, 0, 0), 0);
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(o, "leases"), base);
    ck_assert_int_eq(gkv_map(c, KEY("lc/2"), NULL, &m), 0);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(o, "leases"), base);
    free(buf);
    gkv_client_close(c);
    gkv_client_close(o);
}
END_TEST

/* A cache of hundreds of keys (found by key through its index, not a scan): every lease of a
 * read repeated with gkv_map_many and gkv_unmap_many is renewed, and a key rewritten meanwhile
 * gets its new bytes. */
START_TEST(a_large_lease_cache_renews_every_key_of_a_repeated_read)
{
    enum { N = 300 };
    gkv_client_t *c = conn(d.url), *o = conn(d.url);
    wait_leases(o, 0);
    uint64_t base = 0;
    ck_assert_int_eq(gkv_client_set_lease_cache(c, 1024, 1 << 20, 0), 0);
    static char keys[N][16];
    static gkv_map_item_t it[N];
    static gkv_mapping_t *ms[N];
    static uint64_t first[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "many/%d", i);
        ck_assert_int_eq(gkv_set(o, keys[i], strlen(keys[i]), keys[i], strlen(keys[i]), NULL), 0);
        it[i] = (gkv_map_item_t){.key = keys[i], .klen = strlen(keys[i])};
    }
    for (int round = 0; round < 3; round++) {
        if (round == 2)
            ck_assert_int_eq(gkv_set(o, KEY("many/7"), "new", 3, NULL), 0);
        ck_assert_int_eq(gkv_map_many(c, it, N), 0);
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(it[i].status, 0);
            ms[i] = it[i].mapping;
            if (round == 0)
                first[i] = ms[i]->lease;
            else if (round == 1 || i != 7)
                ck_assert_uint_eq(ms[i]->lease, first[i]); /* renewed */
        }
        if (round == 2) {
            ck_assert_uint_ne(ms[7]->lease, first[7]);
            ck_assert_int_eq(memcmp(ms[7]->ptr, "new", 3), 0);
        }
        ck_assert_int_eq(memcmp(ms[299]->ptr, "many/299", 8), 0);
        ck_assert_int_eq(gkv_unmap_many(c, ms, N), 0);
    }
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    ck_assert_uint_eq(info_u64(o, "leases"), base + N);
    /* Shrunk to 8 slots, a read of all of them again keeps the 8 newest, and what it lets go
     * (the 292 evicted and the ones it could not keep) ends with one RELEASE. */
    ck_assert_int_eq(gkv_client_set_lease_cache(c, 8, 1 << 20, 0), 0);
    ck_assert_int_eq(gkv_map_many(c, it, N), 0);
    for (int i = 0; i < N; i++)
        ms[i] = it[i].mapping;
    uint64_t before = info_u64(o, "total_commands_processed");
    ck_assert_int_eq(gkv_unmap_many(c, ms, N), 0);
    ck_assert_int_eq(gkv_map(c, KEY("absent"), NULL, &m), GKV_ENOTFOUND);
    /* The INFO before, one RELEASE, the MAP: 3 commands (one RELEASE per lease would be 295). */
    ck_assert_uint_eq(info_u64(o, "total_commands_processed") - before, 3);
    ck_assert_uint_eq(info_u64(o, "leases"), base + 8);
    gkv_client_close(c);
    gkv_client_close(o);
}
END_TEST

START_TEST(zero_copy_is_refused_over_tcp_and_where_not_granted)
{
    gkv_client_t *t = conn(d.tcp_url);
    ck_assert_str_eq(gkv_client_info(t)->zero_copy, "none");
    ck_assert(strstr(gkv_client_info(t)->zero_copy_why, "Unix socket") != NULL);
    ck_assert_int_eq(gkv_set(t, KEY("tcp/k"), "v", 1, NULL), 0);
    gkv_mapping_t *m;
    ck_assert_int_eq(gkv_map(t, KEY("tcp/k"), NULL, &m), GKV_ENOTSUP);
    ck_assert_int_eq(gkv_create(t, KEY("tcp/n"), 8, NULL, &m), GKV_ENOTSUP);
    ck_assert(strstr(gkv_client_errmsg(t), "zero-copy") != NULL);
    gkv_client_close(t);
    /* A host-backend daemon shares its arena only when told to. */
    gkv_daemon_t closed;
    ck_assert_int_eq(harness_start(&closed, NULL), 0);
    gkv_client_t *c = conn(closed.url);
    ck_assert_str_eq(gkv_client_info(c)->zero_copy, "none");
    ck_assert(strstr(gkv_client_info(c)->zero_copy_why, "--host-zero-copy") != NULL);
    ck_assert_int_eq(gkv_set(c, KEY("k"), "v", 1, NULL), 0);
    ck_assert_int_eq(gkv_map(c, KEY("k"), NULL, &m), GKV_ENOTSUP);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&closed), 0);
}
END_TEST

/* Registered buffers (BUFFER, GET with into) need GPU memory of a client: what cannot be taken
 * (the host backend, a garbage handle, a buffer not registered, TCP, host memory) answers a
 * clear error and disturbs nothing (the bytes' tests are in tests/gpu/test_gpu_zerocopy.c). */
static int64_t raw_buffer(int fd, const uint8_t *handle, size_t hlen, uint64_t into, uint64_t len,
                          gkv_response_t *r, uint8_t *hdr)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_BUFFER);
    gkv_wr_uint(&w, GKV_F_ID, 9);
    if (handle)
        gkv_wr_bin(&w, GKV_F_EXPORT, handle, hlen);
    if (into)
        gkv_wr_uint(&w, GKV_F_INTO, into);
    if (len)
        gkv_wr_uint(&w, GKV_F_LENGTH, len);
    gkv_wr_end(&w);
    int64_t st = raw_call(fd, &w, r, hdr, 65536);
    gkv_wr_fini(&w);
    return st;
}

static int64_t raw_get_into(int fd, const char *key, uint64_t into, gkv_response_t *r, uint8_t *hdr)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_GET);
    gkv_wr_uint(&w, GKV_F_ID, 10);
    gkv_wr_bin(&w, GKV_F_KEY, key, strlen(key));
    gkv_wr_uint(&w, GKV_F_INTO, into);
    gkv_wr_end(&w);
    int64_t st = raw_call(fd, &w, r, hdr, 65536);
    gkv_wr_fini(&w);
    return st;
}

START_TEST(registered_buffers_refuse_what_they_cannot_take)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("buf/k"), "value", 5, NULL), 0);
    uint8_t handle[64];
    memset(handle, 0xa5, sizeof(handle));
    int a = raw_zc_connect();
    ck_assert_int_eq(raw_op(a, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    /* Registering: the host backend writes into no client memory; the cuda backend opens no
     * handle of garbage. */
    if (strcmp(gkv_client_info(c)->backend, "cuda") == 0) {
        ck_assert_int_eq(raw_buffer(a, handle, sizeof(handle), 0, 4096, &r, hdr), GKV_EINVAL);
    } else {
        ck_assert_int_eq(raw_buffer(a, handle, sizeof(handle), 0, 4096, &r, hdr), GKV_ENOTSUP);
        ck_assert(r.message.len && memmem(r.message.p, r.message.len, "cuda backend", 12));
    }
    /* Neither a handle nor a buffer to drop; no length. */
    ck_assert_int_eq(raw_buffer(a, NULL, 0, 0, 0, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_buffer(a, handle, sizeof(handle), 0, 0, &r, hdr), GKV_EINVAL);
    /* Dropping a buffer that is not there counts 0. */
    ck_assert_int_eq(raw_buffer(a, NULL, 0, 5, 0, &r, hdr), 0);
    ck_assert_uint_eq(r.count, 0);
    /* A GET into a buffer that is not registered is INVAL, and sends no bytes. */
    ck_assert_int_eq(raw_get_into(a, "buf/k", 1, &r, hdr), GKV_EINVAL);
    ck_assert(r.message.len && memmem(r.message.p, r.message.len, "no buffer 1", 11));
    ck_assert_int_eq(raw_get_into(a, "buf/none", 1, &r, hdr), GKV_EINVAL);
    /* The connection goes on: a plain GET after them. */
    ck_assert_int_eq(raw_op(a, GKV_OP_MAP, "buf/k", 0, &r, hdr), 0);
    ck_assert_uint_eq(r.size, 5);
    close(a);
    /* Without zero-copy (TCP) BUFFER is NOTSUP like MAP. */
    gkv_client_t *t = conn(d.tcp_url);
    uint64_t id = 0;
    ck_assert_int_eq(gkv_buffer_register(t, handle, sizeof(handle), &id), GKV_ENOTSUP);
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get_into(t, KEY("buf/k"), NULL, 1, 0, &vi), GKV_EINVAL);
    gkv_client_close(t);
    /* libgpukv refuses host memory before sending anything (not device memory). */
    ck_assert_int_eq(gkv_buffer_register(c, handle, sizeof(handle), &id), GKV_ENOTSUP);
    ck_assert_int_eq(gkv_buffer_register(c, handle, 0, &id), GKV_EINVAL);
    ck_assert_int_eq(gkv_buffer_drop(c, 3), 0);
    ck_assert_int_eq(gkv_get_into(c, KEY("buf/k"), NULL, 3, 0, &vi), GKV_EINVAL);
    ck_assert_uint_eq(info_u64(c, "registered_buffers"), 0);
    ck_assert_uint_eq(info_u64(c, "gets_into"), 0);
    char buf[8];
    ck_assert_int_eq(gkv_get(c, KEY("buf/k"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(memcmp(buf, "value", 5), 0);
    gkv_client_close(c);
}
END_TEST

START_TEST(lease_caps_per_connection)
{
    static const char *const args[] = {
        "--host-zero-copy", "yes", "--max-leases", "5", "--max-leased-bytes", "1M", NULL};
    gkv_daemon_t capped;
    ck_assert_int_eq(harness_start(&capped, args), 0);
    gkv_client_t *c = conn(capped.url);
    static char big[600 << 10];
    ck_assert_int_eq(gkv_set(c, KEY("small"), "s", 1, NULL), 0);
    ck_assert_int_eq(gkv_set(c, KEY("big"), big, sizeof(big), NULL), 0);
    gkv_mapping_t *m[6];
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(gkv_map(c, KEY("small"), NULL, &m[i]), 0);
    ck_assert_int_eq(gkv_map(c, KEY("small"), NULL, &m[5]), GKV_ELEASELIMIT);
    ck_assert_int_eq(gkv_unmap_batch(c, m, 5), 0);
    ck_assert_int_eq(gkv_map(c, KEY("big"), NULL, &m[0]), 0);
    ck_assert_int_eq(gkv_map(c, KEY("big"), NULL, &m[1]), GKV_ELEASELIMIT); /* 1.2 MB > 1 MiB */
    gkv_client_t *other = conn(capped.url); /* caps are per connection */
    ck_assert_int_eq(gkv_map(other, KEY("big"), NULL, &m[1]), 0);
    ck_assert_int_eq(gkv_unmap(other, m[1]), 0);
    ck_assert_int_eq(gkv_unmap(c, m[0]), 0);
    gkv_client_close(other);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&capped), 0);
}
END_TEST

START_TEST(thousands_of_unmaps_in_a_row_do_not_stall)
{
    enum { N = 4000 };
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("u/k"), "v", 1, NULL), 0);
    static gkv_mapping_t *m[N];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(gkv_map(c, KEY("u/k"), NULL, &m[i]), 0);
    /* Each RELEASE is sent without waiting for its reply. */
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(gkv_unmap(c, m[i]), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 0);
    gkv_client_close(c);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {
        map_reads_in_place_and_release_ends_the_lease,
        delete_and_overwrite_under_a_lease_keep_the_bytes,
        lease_misuse_gets_errors_and_disturbs_nothing,
        unmap_caches_small_leases_for_the_next_map,
        a_sized_lease_cache_serves_map_many_without_imports,
        a_large_lease_cache_renews_every_key_of_a_repeated_read,
        zero_copy_is_refused_over_tcp_and_where_not_granted,
        registered_buffers_refuse_what_they_cannot_take,
        lease_caps_per_connection,
        thousands_of_unmaps_in_a_row_do_not_stall,
    };
    return zc_run_suite("zc_read", tests, sizeof(tests) / sizeof(tests[0]));
}
