/* test_zerocopy.c: zero-copy on the host backend (the protocol path CI can run): MAP/RELEASE,
 * CREATE/SEAL/ABORT, leases surviving deletes and overwrites, lease misuse, caps, TCP refusal,
 * and clients killed while holding leases. */
#include <check.h>
#include <gpukv/gpukv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "fdpass.h"
#include "harness.h"
#include "message.h"

static gkv_daemon_t d;

static void start(void)
{
    static const char *const args[] = {"--host-zero-copy", "yes", "--max-leases", "4096", NULL};
    ck_assert_int_eq(harness_start(&d, args), 0);
}

static void stop(void)
{
    ck_assert_int_eq(harness_stop(&d), 0);
}

static gkv_client_t *conn(const char *url)
{
    gkv_client_t *c = NULL;
    ck_assert_int_eq(gkv_client_connect(url, &c), 0);
    return c;
}

/* One INFO field as a number. */
static uint64_t info_u64(gkv_client_t *c, const char *name)
{
    char *text, pat[64];
    ck_assert_int_eq(gkv_info(c, &text), 0);
    snprintf(pat, sizeof(pat), "\n%s:", name);
    const char *p = strstr(text, pat);
    ck_assert_msg(p != NULL, "INFO has no %s", name);
    uint64_t v = strtoull(p + strlen(pat), NULL, 10);
    gkv_free(text);
    return v;
}

#define KEY(s) (s), strlen(s)

START_TEST(map_reads_in_place_and_release_ends_the_lease)
{
    gkv_client_t *c = conn(d.url);
    ck_assert_str_eq(gkv_client_info(c)->zero_copy, "host-memfd");
    ck_assert_int_eq(gkv_set(c, KEY("m/a"), "0123456789", 10, &(gkv_set_opts_t){.meta = "f4",
                                                                                 .meta_len = 2}),
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
    ck_assert_int_eq(memcmp(got, v2, len), 0);  /* new readers see the new value */
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

/* Raw requests on a zero-copy connection, for what the library never sends. */
static int raw_zc_connect(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, d.sock, strlen(d.sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static int64_t raw_call(int fd, gkv_wr_t *w, gkv_response_t *r, uint8_t *hdr)
{
    ck_assert_int_eq(write(fd, w->sb.data, w->sb.size), (ssize_t)w->sb.size);
    gkv_wr_reset(w);
    uint8_t pre[4];
    ck_assert_int_eq(recv(fd, pre, 4, MSG_WAITALL), 4); /* a passed fd is dropped by recv */
    uint32_t len = gkv_frame_get_len(pre);
    ck_assert_int_eq(recv(fd, hdr, len, MSG_WAITALL), (ssize_t)len);
    ck_assert_int_eq(gkv_resp_decode(hdr, len, r), 0);
    return r->status;
}

/* The fields of a raw request (0 or NULL: left out). */
typedef struct {
    const char *key, *meta;
    uint64_t size, lease, flags, spare;
} raw_fields_t;

static int64_t raw_req(int fd, unsigned op, raw_fields_t f, gkv_response_t *r, uint8_t *hdr)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, op);
    gkv_wr_uint(&w, GKV_F_ID, 7);
    if (op == GKV_OP_HELLO)
        gkv_wr_uint(&w, GKV_F_ZC, 1);
    if (f.key)
        gkv_wr_bin(&w, GKV_F_KEY, f.key, strlen(f.key));
    if (f.size)
        gkv_wr_uint(&w, GKV_F_SIZE, f.size);
    if (f.lease)
        gkv_wr_uint(&w, GKV_F_LEASE, f.lease);
    if (f.flags)
        gkv_wr_uint(&w, GKV_F_FLAGS, f.flags);
    if (f.meta)
        gkv_wr_bin(&w, GKV_F_META, f.meta, strlen(f.meta));
    if (f.spare)
        gkv_wr_uint(&w, GKV_F_SPARE, f.spare);
    gkv_wr_end(&w);
    int64_t st = raw_call(fd, &w, r, hdr);
    gkv_wr_fini(&w);
    return st;
}

/* HELLO, MAP, RELEASE, SEAL, ABORT of one lease, or CREATE of 16 bytes. */
static int64_t raw_op(int fd, unsigned op, const char *key, uint64_t lease, gkv_response_t *r,
                      uint8_t *hdr)
{
    raw_fields_t f = {.key = key, .lease = lease, .size = op == GKV_OP_CREATE ? 16 : 0};
    return raw_req(fd, op, f, r, hdr);
}

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
    ck_assert_int_eq(raw_op(a, GKV_OP_RELEASE, NULL, lc, &r, hdr), GKV_EINVAL);
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
    ck_assert_int_eq(raw_call(b, &w, &r, hdr), GKV_ENOLEASE);
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

/* A raw request with the fields the lease tests vary (0: left out). */
static int64_t raw_zc(int fd, unsigned op, const char *key, uint64_t size, uint64_t lease,
                      uint64_t flags, gkv_response_t *r, uint8_t *hdr)
{
    raw_fields_t f = {.key = key, .size = size, .lease = lease, .flags = flags};
    return raw_req(fd, op, f, r, hdr);
}

/* SEAL with keep turns the CREATE lease into a MAP lease on the sealed value; a CREATE that
 * offers a lease writes into its memory only when that lease is this connection's, on an
 * older value of the same key and size that no key names and nothing else holds. */
START_TEST(create_reuses_an_offered_lease_only_when_nothing_else_holds_it)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    uint64_t used0 = info_u64(c, "used_bytes");
    int a = raw_zc_connect(), b = raw_zc_connect();
    ck_assert_int_eq(raw_op(a, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_op(b, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 4096, 0, 0, &r, hdr), 0);
    uint64_t l1 = r.lease, o1 = r.arena_offset;
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, 8, &r, hdr), GKV_EINVAL); /* flags */
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, 0, &r, hdr), GKV_EINVAL); /* MAP now */
    ck_assert_uint_eq(info_u64(c, "leases"), 1);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 0);
    /* l1's value is still the key's: not reusable. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 4096, l1, 0, &r, hdr), 0);
    uint64_t l2 = r.lease, o2 = r.arena_offset;
    ck_assert_uint_ne(l2, l1);
    ck_assert_uint_ne(o2, o1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l2, GKV_SEAL_KEEP, &r, hdr), 0);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), used0 + 2 * 4096); /* l1's value, unlinked */
    /* Another size, another key, another connection's lease: CREATE allocates. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 2048, l1, 0, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, l1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_ABORT, NULL, 0, r.lease, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/other", 4096, l1, 0, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, l1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_ABORT, NULL, 0, r.lease, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(b, GKV_OP_CREATE, "re/k", 4096, l1, 0, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, l1);
    ck_assert_int_eq(raw_zc(b, GKV_OP_ABORT, NULL, 0, r.lease, 0, &r, hdr), 0);
    /* Reused: the same lease, the same memory, nothing more allocated or leased. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 4096, l1, 0, &r, hdr), 0);
    ck_assert_uint_eq(r.lease, l1);
    ck_assert_uint_eq(r.arena_offset, o1);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), used0 + 2 * 4096);
    ck_assert_uint_eq(info_u64(c, "leases"), 2);
    ck_assert_uint_eq(info_u64(c, "unsealed_creates"), 1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, l1, 0, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), 0);
    /* b maps the key (l1's value), then a replaces it: b still holds it, so it is not reused. */
    ck_assert_int_eq(raw_zc(b, GKV_OP_MAP, "re/k", 0, 0, 0, &r, hdr), 0);
    uint64_t lb = r.lease;
    ck_assert_uint_eq(r.arena_offset, o1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 4096, l2, 0, &r, hdr), 0);
    ck_assert_uint_eq(r.lease, l2);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l2, GKV_SEAL_KEEP, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 4096, l1, 0, &r, hdr), 0);
    ck_assert_uint_ne(r.lease, l1);
    ck_assert_uint_ne(r.arena_offset, o1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_ABORT, NULL, 0, r.lease, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(b, GKV_OP_RELEASE, NULL, 0, lb, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/k", 4096, l1, 0, &r, hdr), 0);
    ck_assert_uint_eq(r.lease, l1);
    ck_assert_int_eq(raw_zc(a, GKV_OP_ABORT, NULL, 0, l1, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, l1, 0, &r, hdr), GKV_ENOLEASE);
    /* A SEAL with keep that fails NX keeps the lease, on the discarded value. */
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/nx", 4096, 0, GKV_SET_NX, &r, hdr), 0);
    uint64_t l3 = r.lease;
    ck_assert_int_eq(gkv_set(c, KEY("re/nx"), "won", 3, NULL), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l3, GKV_SEAL_KEEP, &r, hdr), GKV_EEXISTS);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "re/nx", 4096, l3, 0, &r, hdr), 0);
    ck_assert_uint_eq(r.lease, l3);
    ck_assert_int_eq(raw_zc(a, GKV_OP_ABORT, NULL, 0, l3, 0, &r, hdr), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 1); /* l2, on the key's value */
    ck_assert_uint_eq(info_u64(c, "leased_bytes"), 4096);
    ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, l2, 0, &r, hdr), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 0); /* the next test starts from none */
    close(a);
    close(b);
    char buf[8];
    gkv_value_info_t vi;
    ck_assert_int_eq(gkv_get(c, KEY("re/nx"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_int_eq(memcmp(buf, "won", 3), 0);
    gkv_client_close(c);
}
END_TEST

/* SEAL may name a lease (field spare) to be told whether it is a spare once the seal is done
 * (a MAP lease on a value no key names and nothing else holds); SEAL of a spare publishes it
 * with SEAL's metadata, without a CREATE. */
START_TEST(seal_reports_spares_and_publishes_them)
{
    static uint8_t hdr[65536];
    gkv_response_t r;
    gkv_client_t *c = conn(d.url);
    int a = raw_zc_connect(), b = raw_zc_connect();
    ck_assert_int_eq(raw_op(a, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_op(b, GKV_OP_HELLO, NULL, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/k", 4096, 0, 0, &r, hdr), 0);
    uint64_t l1 = r.lease, o1 = r.arena_offset;
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_CREATE, "sp/k", 4096, 0, 0, &r, hdr), 0);
    uint64_t l2 = r.lease;
    /* Sealing l2 replaces l1's value, which nothing else holds: a spare. */
    raw_fields_t seal2 = {.lease = l2, .flags = GKV_SEAL_KEEP, .spare = l1};
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, seal2, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, l1);
    /* SEAL of the spare publishes it, with SEAL's metadata. */
    raw_fields_t seal1 = {.lease = l1, .flags = GKV_SEAL_KEEP, .meta = "m2", .spare = l2};
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, seal1, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, l2);
    ck_assert_int_eq(raw_zc(b, GKV_OP_MAP, "sp/k", 0, 0, 0, &r, hdr), 0);
    uint64_t lb = r.lease;
    ck_assert_uint_eq(r.arena_offset, o1);
    ck_assert(r.has_meta && r.meta.len == 2 && memcmp(r.meta.p, "m2", 2) == 0);
    /* b holds l1's value: sealing l2 over it reports no spare, and l1 cannot be sealed. */
    ck_assert_int_eq(raw_req(a, GKV_OP_SEAL, seal2, &r, hdr), 0);
    ck_assert_uint_eq(r.spare, 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l2, GKV_SEAL_KEEP, &r, hdr), GKV_EINVAL);
    ck_assert_int_eq(raw_zc(b, GKV_OP_RELEASE, NULL, 0, lb, 0, &r, hdr), 0);
    /* A spare's seal checks NX/XX like any: failing, it stays a spare (keep). */
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SEAL_KEEP | GKV_SET_NX, &r, hdr),
                     GKV_EEXISTS);
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, GKV_SET_NX | GKV_SET_XX, &r, hdr),
                     GKV_EINVAL);
    /* Without keep the lease ends; the value has no metadata (SEAL gave none). */
    ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l1, 0, &r, hdr), 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, l1, 0, &r, hdr), GKV_ENOLEASE);
    gkv_value_info_t vi;
    char buf[4096];
    ck_assert_int_eq(gkv_get(c, KEY("sp/k"), NULL, buf, sizeof(buf), &vi), 0);
    ck_assert_uint_eq(vi.length, 4096);
    ck_assert_uint_eq(vi.meta_len, 0);
    ck_assert_int_eq(raw_zc(a, GKV_OP_RELEASE, NULL, 0, l2, 0, &r, hdr), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 0); /* the next test starts from none */
    close(a);
    close(b);
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
        ck_assert_int_eq(raw_zc(a, GKV_OP_SEAL, NULL, 0, l, keep ? GKV_SEAL_KEEP : 0, &r, hdr),
                         0);
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

/* The library: gkv_seal parks the sealed value's lease, and the next CREATE of the key writes
 * into the older of the two values it keeps (double buffering), never into one that another
 * connection maps. */
START_TEST(seal_keeps_a_spare_that_the_next_create_reuses)
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
    /* The spare is ours alone (the seal said so): CREATE takes it with no request at all,
     * and ABORT gives it back the same way; SEAL carries the metadata. */
    uint64_t n0 = info_u64(o, "total_commands_processed");
    uint64_t per_info = info_u64(o, "total_commands_processed") - n0;
    n0 += per_info;
    ck_assert_uint_eq(per_info, 1);
    gkv_mapping_t *m, *w;
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, NULL, &w), 0);
    ck_assert_ptr_eq(w->ptr, ptr[4]);
    ck_assert_int_eq(gkv_abort(c, w), 0);
    ck_assert_uint_eq(info_u64(o, "total_commands_processed"), n0 + per_info); /* none sent */
    n0 += per_info + 1; /* that INFO and the MAP below */
    /* A MAP of the key renews the lease on its value, not the spare (which stays one). */
    ck_assert_int_eq(gkv_map(c, KEY("db/k"), NULL, &m), 0);
    ck_assert_uint_eq(m->lease, lease[5]);
    ck_assert_int_eq(gkv_unmap(c, m), 0);
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, &(gkv_set_opts_t){.meta = "v7", .meta_len = 2},
                                &w),
                     0);
    ck_assert_ptr_eq(w->ptr, ptr[4]);
    ck_assert_uint_eq(info_u64(o, "total_commands_processed"), n0 + per_info);
    memset(w->ptr, 'g', N);
    ck_assert_int_eq(gkv_seal(c, w), 0);
    ck_assert_int_eq(gkv_get(o, KEY("db/k"), NULL, buf, N, &vi), 0);
    ck_assert(vi.meta_len == 2 && memcmp(vi.meta, "v7", 2) == 0);
    ck_assert_int_eq(buf[0], 'g');
    ck_assert_int_eq(gkv_create(c, KEY("db/k"), N, NULL, &w), 0); /* back to ptr[5] */
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
    /* A seal that fails NX keeps the discarded value as the key's spare. */
    gkv_set_opts_t nx = {.flags = GKV_SET_NX};
    ck_assert_int_eq(gkv_create(c, KEY("db/nx"), N, &nx, &w), 0);
    uint8_t *lost = w->ptr;
    ck_assert_int_eq(gkv_set(o, KEY("db/nx"), "won", 3, NULL), 0);
    ck_assert_int_eq(gkv_seal(c, w), GKV_EEXISTS);
    ck_assert_int_eq(gkv_create(c, KEY("db/nx"), N, NULL, &w), 0);
    ck_assert_ptr_eq(w->ptr, lost);
    ck_assert_int_eq(gkv_abort(c, w), 0);
    /* Any other request ends the parked leases. */
    ck_assert_int_eq(gkv_get(c, KEY("db/k"), NULL, buf, N, &vi), 0);
    memset(want, 'y', N);
    ck_assert_int_eq(memcmp(buf, want, N), 0);
    ck_assert_uint_eq(info_u64(o, "leases"), base);
    gkv_client_close(c);
    gkv_client_close(o);
}
END_TEST

/* gkv_unmap keeps a small value's lease for the connection's next MAP of that key, which the
 * server renews while the key has that value; it ends when the value changes, the key goes,
 * another request is sent, or more than 8 are kept. */
START_TEST(unmap_parks_small_leases_for_the_next_map)
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

START_TEST(lease_caps_per_connection)
{
    static const char *const args[] = {"--host-zero-copy", "yes", "--max-leases", "5",
                                       "--max-leased-bytes", "1M", NULL};
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

/* A child that takes leases, reports ready on a pipe, then waits to be killed. */
static pid_t spawn_holder(int nmaps, int create, int *ready_fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        gkv_client_t *c;
        if (gkv_client_connect(d.url, &c))
            _exit(2);
        gkv_mapping_t *m;
        for (int i = 0; i < nmaps; i++)
            if (gkv_map(c, KEY("kill/v"), NULL, &m))
                _exit(3);
        if (create && gkv_create(c, KEY("kill/pending"), 1 << 20, NULL, &m))
            _exit(4);
        if (write(p[1], "r", 1) != 1)
            _exit(5);
        pause();
        _exit(0);
    }
    close(p[1]);
    *ready_fd = p[0];
    return pid;
}

static void wait_ready(int fd)
{
    char ch;
    ck_assert_int_eq(read(fd, &ch, 1), 1);
    close(fd);
}

/* Polls INFO until no lease, no unsealed create and the baseline memory; returns ms taken. */
static long wait_released(gkv_client_t *c, uint64_t used)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (info_u64(c, "leases") == 0 && info_u64(c, "unsealed_creates") == 0 &&
            info_u64(c, "used_bytes") == used)
            return ms;
        if (ms > 1000)
            return ms;
        usleep(5000);
    }
}

START_TEST(killed_client_gives_back_leases_and_creates)
{
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_flush(c), 0);
    ck_assert_int_eq(gkv_set(c, KEY("kill/v"), "leased", 6, NULL), 0);
    uint64_t used = info_u64(c, "used_bytes");
    int ready;
    pid_t pid = spawn_holder(1000, 1, &ready);
    wait_ready(ready);
    ck_assert_uint_eq(info_u64(c, "leases"), 1001);
    ck_assert_uint_eq(info_u64(c, "used_bytes"), used + (1 << 20));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    long ms = wait_released(c, used);
    fprintf(stderr, "1000 leases and a 1 MiB CREATE given back %ld ms after SIGKILL\n", ms);
    ck_assert_int_le(ms, 1000);
    const void *k[] = {"kill/pending"};
    size_t kl[] = {12};
    ck_assert_int_eq(gkv_exists(c, k, kl, 1), 0);
    gkv_client_close(c);
}
END_TEST

START_TEST(hundred_clients_killed_at_once)
{
    enum { N = 100 };
    gkv_client_t *c = conn(d.url);
    ck_assert_int_eq(gkv_set(c, KEY("kill/v"), "leased", 6, NULL), 0);
    uint64_t used = info_u64(c, "used_bytes");
    pid_t pids[N];
    int ready[N];
    for (int i = 0; i < N; i++)
        pids[i] = spawn_holder(10, 0, &ready[i]);
    for (int i = 0; i < N; i++)
        wait_ready(ready[i]);
    ck_assert_uint_eq(info_u64(c, "leases"), N * 10);
    for (int i = 0; i < N; i++)
        kill(pids[i], SIGKILL);
    for (int i = 0; i < N; i++)
        waitpid(pids[i], NULL, 0);
    long ms = wait_released(c, used);
    fprintf(stderr, "%d clients x 10 leases given back %ld ms after SIGKILL\n", N, ms);
    ck_assert_int_le(ms, 1000);
    gkv_client_close(c);
}
END_TEST

static int open_fds(pid_t pid)
{
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "ls /proc/%d/fd | wc -l", (int)pid);
    FILE *f = popen(cmd, "r");
    int n = -1;
    ck_assert_int_eq(fscanf(f, "%d", &n), 1);
    pclose(f);
    return n;
}

START_TEST(descriptors_sent_by_clients_are_not_kept)
{
    gkv_client_t *c = conn(d.url);
    int before = open_fds(d.pid);
    int fd = raw_zc_connect();
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, GKV_OP_PING);
    gkv_wr_uint(&w, GKV_F_ID, 1);
    gkv_wr_end(&w);
    for (int i = 0; i < 20; i++) {
        int passed = dup(1);
        ck_assert_int_eq(gkv_fd_send(fd, w.sb.data, w.sb.size, passed), (ssize_t)w.sb.size);
        close(passed);
        uint8_t resp[64];
        ck_assert_int_gt(recv(fd, resp, sizeof(resp), 0), 0);
    }
    gkv_wr_fini(&w);
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_int_le(open_fds(d.pid), before + 1); /* only the new connection itself */
    close(fd);
    gkv_client_close(c);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("zerocopy");
    TCase *t = tcase_create("host backend");
    tcase_add_unchecked_fixture(t, start, stop);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, map_reads_in_place_and_release_ends_the_lease);
    tcase_add_test(t, delete_and_overwrite_under_a_lease_keep_the_bytes);
    tcase_add_test(t, create_is_invisible_until_seal);
    tcase_add_test(t, lease_misuse_gets_errors_and_disturbs_nothing);
    tcase_add_test(t, create_reuses_an_offered_lease_only_when_nothing_else_holds_it);
    tcase_add_test(t, seal_reports_spares_and_publishes_them);
    tcase_add_test(t, leased_bytes_stay_exact_when_a_seal_moves_the_value);
    tcase_add_test(t, seal_keeps_a_spare_that_the_next_create_reuses);
    tcase_add_test(t, unmap_parks_small_leases_for_the_next_map);
    tcase_add_test(t, zero_copy_is_refused_over_tcp_and_where_not_granted);
    tcase_add_test(t, lease_caps_per_connection);
    tcase_add_test(t, thousands_of_unmaps_in_a_row_do_not_stall);
    tcase_add_test(t, killed_client_gives_back_leases_and_creates);
    tcase_add_test(t, hundred_clients_killed_at_once);
    tcase_add_test(t, descriptors_sent_by_clients_are_not_kept);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
