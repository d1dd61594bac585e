/* test_zc_write.c: zero-copy writing against a real gpukvd (host backend, arena shared):
 * CREATE, SEAL and ABORT, spares and rewriting a key in place. */
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

START_TEST(create_is_invisible_until_seal)
{
    gkv_client_t *c = conn(d.url), *reader = conn(d.url);
    gkv_mapping_t *w;
    ck_assert_int_eq(gkv_create(c, KEY("c/new"), 4096, NULL, &w), 0);
    ck_assert_int_eq(w->writable, 1);
    memset(w->ptr, 'x', 4096);
    char buf[4096];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(reader, KEY("c/new"), NULL, buf, sizeof(buf), &vi), GKV_ENOTFOUND);
    const void *k[] = {"c/new"};
    size_t kl[] = {5};
    ck_assert_int_eq(gkv_exists(reader, k, kl, 1), 0);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 1);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    ck_assert_int_eq(gkv_get(reader, KEY("c/new"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 4096);
    ck_assert_int_eq(buf[0], 'x');
    ck_assert_int_eq(buf[4095], 'x');
    /* Seal replaces an older value atomically; abort leaves the old one. */
    ck_assert_int_eq(gkv_create(c, KEY("c/new"), 3, NULL, &w), 0);
    memcpy(w->ptr, "abc", 3);
    ck_assert_int_eq(gkv_abort(c, w), 0);
    ck_assert_int_eq(gkv_get(reader, KEY("c/new"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 4096);
    gkv_set_opts_t so = {.meta = "shape=3", .meta_len = 7};
    ck_assert_int_eq(gkv_create(c, KEY("c/new"), 3, &so, &w), 0);
    memcpy(w->ptr, "abc", 3);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    ck_assert_int_eq(gkv_get(reader, KEY("c/new"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 3);
    ck_assert_int_eq(memcmp(vi.meta, "shape=3", 7), 0);
    /* NX is checked at CREATE and again at SEAL. */
    gkv_set_opts_t nx = {.flags = GKV_SET_NX};
    ck_assert_int_eq(gkv_create(c, KEY("c/new"), 3, &nx, &w), GKV_EEXISTS);
    ck_assert_int_eq(gkv_create(c, KEY("c/race"), 3, &nx, &w), 0);
    ck_assert_int_eq(gkv_set(reader, KEY("c/race"), "won", 3, NULL), 0);
    ck_assert_int_eq(gkv_seal(c, w), GKV_EEXISTS);
    ck_assert_int_eq(gkv_get(reader, KEY("c/race"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(memcmp(buf, "won", 3), 0);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 0);
    ck_assert_int_eq(gkv_create(c, KEY("c/huge"), 1ull << 50, NULL, &w), GKV_ETOOBIG);
    gkv_client_close(c);
    gkv_client_close(reader);
}
END_TEST

/* SEAL with keep turns the CREATE lease into a read lease on the sealed value. A SEAL that names
 * (field spare) this connection's read lease on the value it replaces makes that lease a spare
 * when nothing else holds the value: writable again, on the same memory, for the key's next
 * value, which its own SEAL publishes. */
START_TEST(seal_makes_the_replaced_value_a_writable_spare)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    uint64_t used0 = info_u64(c, "used_bytes");
    int a = raw_zc_connect(), b = raw_zc_connect();
    ck_assert_int_eq(raw_op(a, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_op(b, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/k", 4096, 0, 0, &r, hdr), 0);
    uint64_t l1 = r.lease, o1 = r.arena_offset;
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, 8, &r, hdr), GKV_EINVAL); /* flags */
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), GKV_EINVAL);
    ck_assert_uint_eq(info_u64(c, "leases"), 1);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 0);
    /* A CREATE's lease field (protocol 1 offered a spare that way) is ignored: it allocates. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/k", 4096, l1, 0, &r, hdr), 0);
    uint64_t l2 = r.lease;
    ck_assert_uint_ne(l2, l1);
    ck_assert_uint_ne(r.arena_offset, o1);
    /* Sealing l2 replaces l1's value, which nothing else holds: l1 becomes a spare. */
    raw_fields_t seal2 = {.lease = l2, .flags = GKV_SEAL_KEEP, .spare = l1};
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, seal2, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, l1);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), used0 + 2 * 4096);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 1);
    /* The spare takes the next value in place and its SEAL publishes it with SEAL's metadata;
     * naming l2 makes l2 the next spare. */
    raw_fields_t seal1 = {.lease = l1, .flags = GKV_SEAL_KEEP, .meta = "m2", .spare = l2};
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, seal1, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, l2);
    ck_assert_int_eq(raw_zc(b, GKV_OP_MAP, "sp/k", 0, 0, 0, &r, hdr), 0);
    uint64_t lb = r.lease;
    ck_assert_uint_eq(r.arena_offset, o1);
    ck_assert(r.has_meta && r.meta.len == 2 && memcmp(r.meta.p, "m2", 2) == 0);
    /* b holds l1's value: sealing l2 over it makes no spare of l1, which stays a read lease. */
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, seal2, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_zc(b, GKV_OP_RELEASE, NULL, 0, lb, 0, &r, hdr), 0);
    /* Another key's seal, or another connection's, never makes a spare of l1. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/other", 4096, 0, 0, &r, hdr), 0);
    raw_fields_t other = {.lease = r.lease, .spare = l1};
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, other, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, 0);
    ck_assert_int_eq(raw_zc(b, GKV_OP_CREATE, "sp/k", 4096, 0, 0, &r, hdr), 0);
    raw_fields_t theirs = {.lease = r.lease, .spare = l1};
    ck_assert_int_eq(raw_req(b, GKV_OP_SEAL, theirs, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, 0);
    /* A seal refused by NX keeps its lease writable (keep): a spare, sealed later with XX. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/nx", 4096, 0, GKV_SET_NX, &r, hdr), 0);
    uint64_t l3 = r.lease;
    ck_assert_int_eq(gkv_set(c, KEY("sp/nx"), "won", 3, NULL), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l3, GKV_SEAL_KEEP, &r, hdr), GKV_EEXISTS);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l3, GKV_SET_NX | GKV_SET_XX, &r, hdr),
                     GKV_EINVAL);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l3, GKV_SET_XX, &r, hdr), 0);
    gkv_value_info_t vi;
    char buf[4096];
    ck_assert_int_eq(gkv_get(c, KEY("sp/nx"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 4096);
    /* RELEASE ends a writable lease too, discarding its value. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/gone", 16, 0, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, r.lease, 0, &r, hdr), 0);
    const void *k[] = {"sp/gone"};
    size_t kl[] = {7};
    ck_assert_int_eq(gkv_exists(c, k, kl, 1), 0);
    close(a);
    close(b);
    wait_leases(c, 0); /* the next test starts from none */
    gkv_client_close(c);
}
END_TEST

/* A value sealed over a smaller or larger one moves into the key's entry: the lease's byte
 * count must leave with the lease all the same. */
START_TEST(leased_bytes_stay_exact_when_a_seal_moves_the_value)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    static char big[100000];
    int a = raw_zc_connect();
    ck_assert_int_eq(raw_op(a, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    for (int keep = 0; keep < 2; keep++) {
        ck_assert_int_eq(gkv_set(c, KEY("acct/k"), big, sizeof(big), NULL), 0);
        ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "acct/k", 16, 0, 0, &r, hdr), 0);
        uint64_t l = r.lease;
        ck_assert_uint_eq(info_u64(c, "leased_bytes"), 16);
        ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l, keep ? GKV_SEAL_KEEP : 0, &r, hdr), 0);
        ck_assert_uint_eq(info_u64(c, "leased_bytes"), keep ? 16 : 0);
        if (keep)
            ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, l, 0, &r, hdr), 0);
        ck_assert_uint_eq(info_u64(c, "leased_bytes"), 0);
        ck_assert_uint_eq(info_u64(c, "leases"), 0);
    }
    close(a);
    gkv_client_close(c);
}
END_TEST

/* The library: gkv_seal caches the sealed value's lease, and the next CREATE of the key writes
 * into the older of the two values it keeps (double buffering), never into one that another
 * connection maps. */
START_TEST(rewrites_go_into_the_spare_in_one_round_trip)
{
    gkv_client_t *c = conn(d.url), *o = conn(d.url);
    uint64_t used0 = info_u64(o, "used_bytes"), base = info_u64(o, "leases");
    enum { N = 4096 };
    char buf[N], want[N];
    gkv_value_info_t vi;
    uint8_t *ptr[6];
    uint64_t lease[6];
    for (int i = 0; i < 6; i++) {
        gkv_mapping_t *w;
        ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, NULL, &w), 0);
        ptr[i] = w->ptr;
        lease[i] = w->lease;
        memset(w->ptr, 'a' + i, N);
        ck_assert_int_eq(gkv_seal(c, w), 0);
        ck_assert_int_eq(gkv_get(o, KEY("db/k"), NULL, buf, N, &vi), 0);
        memset(want, 'a' + i, N);
        ck_assert_int_eq(memcmp(buf, want, N), 0);
        ck_assert_uint_eq(info_u64(o, "leases"), base + (i ? 2 : 1));
        ck_assert_uint_eq(info_u64(o, "used_bytes"), used0 + (i ? 2 : 1) * N);
    }
    ck_assert_ptr_ne(ptr[1], ptr[0]);
    for (int i = 2; i < 6; i++) {
        ck_assert_ptr_eq(ptr[i], ptr[i - 2]);
        ck_assert_uint_eq(lease[i], lease[i - 2]);
    }
    /* The spare is writable already: gkv_create takes it with no request at all; SEAL carries
     * the metadata. */
    uint64_t n0 = info_u64(o, "total_commands_processed");
    uint64_t per_info = info_u64(o, "total_commands_processed") - n0;
    n0 += per_info;
    ck_assert_uint_eq(per_info, 1);
    gkv_mapping_t *m, *w;
    ck_assert_int_eq(
        gkv_create(c, KEY("db/k"), N, &(gkv_set_opts_t){.meta = "v7", .meta_len = 2}, &w), 0);
    ck_assert_ptr_eq(w->ptr, ptr[4]);
    ck_assert_uint_eq(info_u64(o, "total_commands_processed"), n0 + per_info); /* none sent */
    memset(w->ptr, 'g', N);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    ck_assert_int_eq(gkv_get(o, KEY("db/k"), NULL, buf, N, &vi), 0);
    ck_assert(vi.meta_len == 2 && memcmp(vi.meta, "v7", 2) == 0);
    ck_assert_int_eq(buf[0], 'g');
    /* A MAP of the key renews the lease on its value, not the spare (which stays one). */
    ck_assert_int_eq(gkv_map(c, KEY("db/k"), NULL, &m), 0);
    ck_assert_uint_eq(m->lease, lease[4]);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, NULL, &w), 0); /* back to ptr[5] */
    ck_assert_ptr_eq(w->ptr, ptr[5]);
    memset(w->ptr, 'f', N);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    ck_assert_int_eq(gkv_get(o, KEY("db/k"), NULL, buf, N, &vi), 0);
    ck_assert_uint_eq(vi.meta_len, 0);
    ck_assert_int_eq(buf[0], 'f');
    /* o maps the key's value; two seals later that value is the spare, but o holds it: the
     * next CREATE gets new memory, and o's bytes stay. */
    ck_assert_int_eq(gkv_map(o, KEY("db/k"), NULL, &m), 0); /* ptr[5]'s value, 'f' */
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, NULL, &w), 0);
    ck_assert_ptr_eq(w->ptr, ptr[4]);
    memset(w->ptr, 'x', N);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, NULL, &w), 0);
    ck_assert_ptr_ne(w->ptr, ptr[5]);
    ck_assert_ptr_ne(w->ptr, ptr[4]);
    memset(w->ptr, 'y', N);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    memset(want, 'f', N);
    ck_assert_int_eq(memcmp(m->ptr, want, N), 0);
    ck_assert_int_eq(gkv_unmap(o, m), 0);
    /* A failed CREATE of the key ends its parked leases (their memory goes back). */
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), 1ull << 50, NULL, &w), GKV_ETOOBIG);
    ck_assert_int_eq(gkv_ping(c), 0); /* waits for the RELEASE sent without waiting */
    ck_assert_uint_eq(info_u64(o, "leases"), base);
    ck_assert_uint_eq(info_u64(o, "used_bytes"), used0 + N);
    /* A seal that fails NX keeps the discarded value as the key's spare; abort discards it. */
    gkv_set_opts_t nx = {.flags = GKV_SET_NX};
    ck_assert_int_eq(gkv_create(c, KEY("db/nx"), N, &nx, &w), 0);
    uint8_t *lost = w->ptr;
    ck_assert_int_eq(gkv_set(o, KEY("db/nx"), "won", 3, NULL), 0);
    ck_assert_int_eq(gkv_seal(c, w), GKV_EEXISTS);
    ck_assert_int_eq(gkv_create(c, KEY("db/nx"), N, NULL, &w), 0);
    ck_assert_ptr_eq(w->ptr, lost);
    ck_assert_int_eq(gkv_abort(c, w), 0);
    ck_assert_int_eq(gkv_ping(c), 0); /* reads the reply of the RELEASE abort sent */
    ck_assert_uint_eq(info_u64(o, "unsealed_creates"), 0);
    /* Any other request ends the parked leases. */
    ck_assert_int_eq(gkv_get(c, KEY("db/k"), NULL, buf, N, &vi), 0);
    memset(want, 'y', N);
    ck_assert_int_eq(memcmp(buf, want, N), 0);
    ck_assert_uint_eq(info_u64(o, "leases"), base);
    gkv_client_close(c);
    gkv_client_close(o);
}
END_TEST

/* Issue 12, failure 7: memory a CREATE hands out never shows an earlier value of another key
 * (here a deleted secret of the same size, whose memory the arena hands out again). Sizes from
 * under a page to several pages, so that both the zeroed edges and whole pages are covered. */
START_TEST(create_never_shows_a_deleted_value)
{
    gkv_client_t *c = conn(d.url);
    static const size_t sizes[] = {100, 4096, 3 * 4096 + 200};
    static char secret[3 * 4096 + 200];
    memset(secret, 'S', sizeof(secret));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        ck_assert_int_eq(gkv_set(c, KEY("secret"), secret, n, NULL), 0);
        const void *k[] = {"secret"};
        size_t kl[] = {6};
        ck_assert_int_eq(gkv_del(c, k, kl, 1), 1);
        gkv_mapping_t *m;
        ck_assert_int_eq(gkv_create(c, KEY("fresh"), n, NULL, &m), 0);
        const unsigned char *p = m->ptr;
        size_t nonzero = 0;
        for (size_t j = 0; j < n; j++)
            nonzero += p[j] != 0;
        ck_assert_msg(nonzero == 0, "%zu of %zu bytes of a fresh CREATE are not zero", nonzero, n);
        ck_assert_int_eq(gkv_abort(c, m), 0);
    }
    gkv_client_close(c);
}
END_TEST

/* Protocol versions (PROTOCOL.md, Changelog): HELLO names one of 1..2 (none: the newest);
 * anything else is VERSION. */
START_TEST(hello_negotiates_the_protocol_version)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    static const struct {
        uint64_t asked, got;
        int64_t status;
    } cases[] = {{0, 2, 0}, {1, 1, 0}, {2, 2, 0}, {3, 0, GKV_EVERSION}, {99, 0, GKV_EVERSION}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = raw_zc_connect();
        ck_assert_int_eq(
            raw_req(fd, GKV_OP_HELLO, (raw_fields_t){.version = cases[i].asked}, &r, hdr),
            cases[i].status);
        if (!cases[i].status)
            ck_assert_uint_eq(r.version, cases[i].got);
        close(fd);
    }
    /* libgpukv asks for the newest. */
    gkv_client_t *c = conn(d.url);
    ck_assert_uint_eq(gkv_client_info(c)->protocol, 2);
    gkv_client_close(c);
}
END_TEST

/* RELEASE of more leases than a batch takes is TOOBIG, as PROTOCOL.md's limits say (it was
 * INVAL), and ends none. */
START_TEST(release_of_more_than_a_batch_is_toobig)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    int fd = raw_zc_connect();
    ck_assert_int_eq(raw_op(fd, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("rel/k"), "v", 1, NULL), 0);
    ck_assert_int_eq(raw_op(fd, GKV_OP_MAP, "rel/k", 0, &r, hdr), 0);
    uint64_t lease = r.lease;
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_RELEASE);
    gkv_wr_uint(&w, GKV_F_ID, 3);
    size_t at = gkv_wr_array_begin(&w, GKV_F_LEASES);
    for (uint32_t i = 0; i <= GKV_MAX_BATCH; i++)
        msgpack_pack_uint64(&w.pk, lease);
    gkv_wr_array_end(&w, at, GKV_MAX_BATCH + 1);
    ck_assert_int_eq(gkv_wr_end(&w), 0);
    ck_assert_int_eq(raw_call(fd, &w, &r, hdr, sizeof(hdr)), GKV_ETOOBIG);
    gkv_wr_fini(&w);
    ck_assert_int_eq(raw_op(fd, GKV_OP_RELEASE, NULL, lease, &r, hdr), 0); /* still held */
    close(fd);
    gkv_client_close(c);
}
END_TEST

/* A client of protocol 1 as it was until 2026-11-23 keeps its meaning: RELEASE of a CREATE lease
 * is INVAL; CREATE may offer a spare (a MAP lease on a value nothing else holds) in `lease` and
 * gets the same lease, writable, on the same memory; SEAL may name such a read spare directly;
 * SEAL's `spare` only reports one (the lease stays a MAP lease). */
START_TEST(protocol_1_clients_keep_their_meaning)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    int fd = raw_zc_connect();
    ck_assert_int_eq(raw_req(fd, GKV_OP_HELLO, (raw_fields_t){.version = 1}, &r, hdr), 0);
    ck_assert_uint_eq(r.version, 1);
    char old[16] = "old-bytes-16-byt", back[16];
    ck_assert_int_eq(gkv_set(c, KEY("v1/k"), old, 16, NULL), 0);
    /* CREATE reusing a spare. */
    ck_assert_int_eq(raw_op(fd, GKV_OP_MAP, "v1/k", 0, &r, hdr), 0);
    uint64_t a = r.lease, a_off = r.arena_offset;
    ck_assert_int_eq(gkv_set(c, KEY("v1/k"), "newer-value-16by", 16, NULL), 0); /* a: a spare */
    ck_assert_int_eq(raw_zc(fd, GKV_OP_CREATE, "v1/k", 16, a, 0, &r, hdr), 0);
    ck_assert_uint_eq(r.lease, a);
    ck_assert_uint_eq(r.arena_offset, a_off);
    ck_assert_int_eq(raw_op(fd, GKV_OP_RELEASE, NULL, a, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_op(fd, GKV_OP_SEAL, NULL, a, &r, hdr), 0);
    ck_assert_int_eq(gkv_get(c, KEY("v1/k"), NULL, back, sizeof(back), NULL), 0);
    ck_assert_int_eq(memcmp(back, old, 16), 0); /* the spare's memory, published as it was */
    /* An offer that is not a spare (the key still names the value) is ignored. */
    ck_assert_int_eq(raw_op(fd, GKV_OP_MAP, "v1/k", 0, &r, hdr), 0);
    uint64_t b = r.lease;
    ck_assert_int_eq(raw_zc(fd, GKV_OP_CREATE, "v1/k", 16, b, 0, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, b);
    ck_assert_int_eq(raw_op(fd, GKV_OP_ABORT, NULL, r.lease, &r, hdr), 0);
    /* SEAL of a read spare publishes it. */
    ck_assert_int_eq(gkv_set(c, KEY("v1/k"), "third-value-16by", 16, NULL), 0); /* b: a spare */
    ck_assert_int_eq(raw_op(fd, GKV_OP_SEAL, NULL, b, &r, hdr), 0);
    ck_assert_int_eq(gkv_get(c, KEY("v1/k"), NULL, back, sizeof(back), NULL), 0);
    ck_assert_int_eq(memcmp(back, old, 16), 0);
    /* SEAL of a MAP lease that is not a spare is INVAL. */
    ck_assert_int_eq(raw_op(fd, GKV_OP_MAP, "v1/k", 0, &r, hdr), 0);
    uint64_t m = r.lease;
    ck_assert_int_eq(raw_op(fd, GKV_OP_SEAL, NULL, m, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_op(fd, GKV_OP_RELEASE, NULL, m, &r, hdr), 0);
    /* SEAL's spare reports the lease; it stays a MAP lease (RELEASE ends it, nothing unsealed). */
    ck_assert_int_eq(raw_zc(fd, GKV_OP_CREATE, "v1/s", 32, 0, 0, &r, hdr), 0);
    uint64_t l1 = r.lease;
    ck_assert_int_eq(raw_zc(fd, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(fd, GKV_OP_CREATE, "v1/s", 32, 0, 0, &r, hdr), 0);
    uint64_t l2 = r.lease;
    ck_assert_int_eq(raw_req(fd, GKV_OP_SEAL, (raw_fields_t){.lease = l2, .spare = l1}, &r, hdr),
                     0);
    ck_assert_uint_eq(r.spare, l1);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 0);
    ck_assert_int_eq(raw_op(fd, GKV_OP_RELEASE, NULL, l1, &r, hdr), 0);
    /* The same requests on protocol 2: CREATE ignores the offer, RELEASE ends a CREATE lease. */
    int fd2 = raw_zc_connect();
    ck_assert_int_eq(raw_op(fd2, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_op(fd2, GKV_OP_MAP, "v1/k", 0, &r, hdr), 0);
    uint64_t e = r.lease;
    ck_assert_int_eq(gkv_set(c, KEY("v1/k"), "fourth-value-16b", 16, NULL), 0);
    ck_assert_int_eq(raw_zc(fd2, GKV_OP_CREATE, "v1/k", 16, e, 0, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, e);
    ck_assert_int_eq(raw_op(fd2, GKV_OP_RELEASE, NULL, r.lease, &r, hdr), 0);
    ck_assert_int_eq(raw_op(fd2, GKV_OP_RELEASE, NULL, e, &r, hdr), 0);
    close(fd);
    close(fd2);
    wait_leases(c, 0);
    gkv_client_close(c);
}
END_TEST

/* gkv_set_many_from_device against the host backend (in a process without a GPU the buffers
 * are host memory, copied as such): 40 values of 0 B-64 KiB stored together, read back right
 * by another client; rewrites after the keys were mapped take the lease cache's spares; NX
 * refuses the existing keys only; over TCP one at a time, the same bytes; bad input refused
 * before anything is sent; no lease left behind. The daemon sees pipelined CREATEs and SEALs. */
#define MANY 40
static size_t many_size(int i)
{
    static const size_t sizes[] = {0, 1, 4096, 65536 + 3, 17, 65536};
    return sizes[i % 6];
}

static void many_fill(uint8_t *src, int round)
{
    for (int i = 0; i < MANY; i++)
        for (size_t j = 0; j < many_size(i); j++)
            src[(size_t)i * 65540 + j] = (uint8_t)(round * 31 + i * 7 + j);
}

static void many_check(gkv_client_t *r, const char *keys[MANY], const uint8_t *src)
{
    static uint8_t got[65540];
    for (int i = 0; i < MANY; i++) {
        gkv_value_info_t vi;
        ck_assert_int_eq(gkv_get(r, keys[i], strlen(keys[i]), NULL, got, sizeof(got), &vi), 0);
        ck_assert_uint_eq(vi.length, many_size(i));
        ck_assert_int_eq(memcmp(got, src + (size_t)i * 65540, many_size(i)), 0);
    }
}

/* Every key's value from src on c, in one gkv_set_many_from_device (items are left filled);
 * each must be stored. */
static void many_store(gkv_client_t *c, gkv_set_item_t items[MANY], const char *keys[MANY],
                       const uint8_t *src)
{
    for (int i = 0; i < MANY; i++)
        items[i] = (gkv_set_item_t){keys[i], strlen(keys[i]), src + (size_t)i * 65540,
                                    many_size(i), -1};
    ck_assert_int_eq(gkv_set_many_from_device(c, items, MANY, NULL), 0);
    for (int i = 0; i < MANY; i++)
        ck_assert_int_eq(items[i].status, 0);
}

START_TEST(many_values_stored_together)
{
    uint8_t *src = malloc((size_t)MANY * 65540);
    char names[MANY][32];
    const char *keys[MANY];
    gkv_set_item_t items[MANY];
    for (int i = 0; i < MANY; i++) {
        snprintf(names[i], sizeof(names[i]), "many/%02d", i);
        keys[i] = names[i];
    }
    gkv_client_t *c = conn(d.url), *r = conn(d.url);
    ck_assert_int_eq(gkv_client_set_lease_cache(c, 64, 1u << 20, 0), 0);
    uint64_t used0 = info_u64(r, "used_bytes"), total = 0;
    for (int i = 0; i < MANY; i++)
        total += many_size(i);
    for (int round = 0; round < 4; round++) {
        many_fill(src, round);
        many_store(c, items, keys, src);
        many_check(r, keys, src);
        for (int i = 0; i < MANY; i++) { /* into c's lease cache: spares at the next seals */
            gkv_mapping_t *m;
            if (!many_size(i))
                continue;
            ck_assert_int_eq(gkv_map(c, keys[i], strlen(keys[i]), NULL, &m), 0);
            ck_assert_int_eq(gkv_unmap(c, m), 0);
        }
        /* Each key: its value and at most one spare (rewrites take the spares; without them
         * a third copy would be held). */
        ck_assert_uint_le(info_u64(r, "used_bytes") - used0, 2 * total);
    }
    /* NX: the existing keys refused, a new one stored, nothing else changed. */
    uint8_t *keep = malloc((size_t)MANY * 65540);
    memcpy(keep, src, (size_t)MANY * 65540);
    many_fill(src, 7);
    gkv_set_opts_t nx = {.flags = GKV_SET_NX};
    items[0] = (gkv_set_item_t){"many/new", 8, src, 4096, -1};
    ck_assert_int_eq(gkv_set_many_from_device(c, items, 5, &nx), 0);
    ck_assert_int_eq(items[0].status, 0);
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq(items[i].status, GKV_EEXISTS);
    many_check(r, keys, keep);
    /* Over TCP: one at a time through the socket, the same bytes. */
    gkv_client_t *t = conn(d.tcp_url);
    many_store(t, items, keys, src);
    many_check(r, keys, src);
    /* Bad input: refused before anything is sent, nothing changed. */
    ck_assert_int_eq(gkv_set_many_from_device(c, items, 0, NULL), GKV_EINVAL);
    ck_assert_int_eq(gkv_set_many_from_device(c, items, 4097, NULL), GKV_EINVAL);
    items[3].dptr = NULL;
    ck_assert_int_eq(gkv_set_many_from_device(c, items, MANY, NULL), GKV_EINVAL);
    items[3].dptr = src + 3 * 65540;
    items[4].klen = 0;
    ck_assert_int_eq(gkv_set_many_from_device(c, items, MANY, NULL), GKV_EINVAL);
    items[4].klen = strlen(keys[4]);
    gkv_set_opts_t bad = {.flags = 1u << 7};
    ck_assert_int_eq(gkv_set_many_from_device(c, items, MANY, &bad), GKV_EINVAL);
    gkv_set_opts_t meta = {.meta_len = GKV_MAX_META + 1, .meta = "x"};
    ck_assert_int_eq(gkv_set_many_from_device(c, items, MANY, &meta), GKV_ETOOBIG);
    many_check(r, keys, src);
    gkv_client_close(t);
    gkv_client_close(c); /* its cached leases and spares end with it */
    wait_leases(r, 0);
    ck_assert_uint_eq(info_u64(r, "unsealed_creates"), 0);
    gkv_client_close(r);
    free(src);
    free(keep);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {
        create_is_invisible_until_seal,
        seal_makes_the_replaced_value_a_writable_spare,
        leased_bytes_stay_exact_when_a_seal_moves_the_value,
        rewrites_go_into_the_spare_in_one_round_trip,
        create_never_shows_a_deleted_value,
        hello_negotiates_the_protocol_version,
        release_of_more_than_a_batch_is_toobig,
        protocol_1_clients_keep_their_meaning,
        many_values_stored_together,
    };
    return zc_run_suite("zc_write", tests, sizeof(tests) / sizeof(tests[0]));
}
