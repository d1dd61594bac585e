/* test_tiers.c: --tier-host against a real gpukvd (issue 36): filling five times maxmemory with
 * a host tier of four times it loses nothing (every key reads back bit-exact, by GET and by
 * MGET) and keeps each limit at every sample; mapped (leased) values never leave the GPU; a
 * value in the tier overwritten or deleted never comes back; the tier shows in LIST, GETSIZE
 * and INFO; noeviction refuses once GPU and tier are full, losing nothing; a tier larger than
 * the RAM is refused at start. */
#include <check.h>
#include <pthread.h>
#include <gpukv/gpukv.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check_client.h"
#include "commands.h"
#include "harness.h"
#include "raw_frame.h"

#define MAXMEM (8u << 20)
#define TIER (32u << 20)
#define VAL (256u << 10)
#define NVAL ((MAXMEM + TIER) / VAL) /* 160: exactly what GPU and tier hold */

static const char *key_of(int i, char *buf)
{
    snprintf(buf, 32, "t/%06d", i);
    return buf;
}
#define KEYN(i, buf) key_of((i), (buf)), strlen(key_of((i), (buf)))

/* GPU 8M, host tier 32M; promote: --tier-promote-on-get yes (GETs bring values up). */
static gkv_daemon_t start_tiered_as(const char *policy, bool promote)
{
    const char *const extra[] = {"--maxmemory", "8M", "--tier-host", "32M", "--maxmemory-policy",
                                 policy, "--host-zero-copy", "yes", "--tier-promote-on-get",
                                 promote ? "yes" : "no", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    return d;
}

static gkv_daemon_t start_tiered(const char *policy)
{
    return start_tiered_as(policy, false);
}

static int64_t del_one(gkv_client_t *c, int i)
{
    char key[32];
    const void *k = key_of(i, key);
    size_t kl = strlen(key);
    return gkv_del(c, &k, &kl, 1);
}

static void limits_kept(gkv_client_t *c)
{
    ck_assert_uint_le(info_u64(c, "used_bytes"), MAXMEM);
    ck_assert_uint_le(info_u64(c, "tier_host_used"), TIER);
}

static int tier_of(gkv_client_t *c, int i)
{
    char key[32];
    uint64_t size;
    int gpu, tier;
    ck_assert_int_eq(gkv_locate_tier(c, KEYN(i, key), &size, &gpu, &tier), 0);
    ck_assert_uint_eq(size, VAL);
    return tier;
}

/* SET of key i: VAL bytes made from seed i (read_exact's). Returns gkv_set's code. */
static int put(gkv_client_t *c, int i)
{
    static uint8_t v[VAL];
    char key[32];
    harness_fill(v, VAL, (uint64_t)i);
    return gkv_set(c, KEYN(i, key), v, VAL, NULL);
}

static void read_exact(gkv_client_t *c, int i, uint64_t seed)
{
    static uint8_t v[VAL], got[VAL];
    char key[32];
    harness_fill(v, VAL, seed);
    int rc = gkv_get(c, KEYN(i, key), NULL, got, VAL, NULL);
    if (rc) { /* what the daemon says, for a failure seen only under load */
        fprintf(stderr, "%s: %d (%s)\n", key, rc, gkv_client_errmsg(c));
        char *text;
        if (gkv_info(c, &text) == 0) {
            fprintf(stderr, "%s\n", text);
            gkv_free(text);
        }
    }
    ck_assert_msg(rc == 0, "%s: %d", key, rc);
    ck_assert_msg(memcmp(v, got, VAL) == 0, "%s: wrong bytes", key);
}

START_TEST(five_times_maxmemory_with_the_tier_loses_nothing)
{
    gkv_daemon_t d = start_tiered("allkeys-lru");
    gkv_client_t *c = connect_or_fail(d.url);
    static uint8_t v[VAL];
    char key[32];
    for (int i = 0; i < (int)NVAL; i++) {
        ck_assert_int_eq(put(c, i), 0);
        if (i % 8 == 0)
            limits_kept(c);
    }
    limits_kept(c);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "tier_host_keys"), NVAL - MAXMEM / VAL);
    ck_assert_uint_ge(info_u64(c, "demoted_keys"), NVAL - MAXMEM / VAL);
    /* The tier shows in LIST and GETSIZE. */
    gkv_list_t *it;
    gkv_list_entry_t e;
    int listed = 0, low = 0, rc;
    ck_assert_int_eq(gkv_list_open(c, "t/", 2, 0, 0, &it), 0);
    while ((rc = gkv_list_next(it, &e)) == 1) {
        listed++;
        low += gkv_list_tier(it) == GKV_TIER_HOST;
    }
    ck_assert_int_eq(rc, 0);
    gkv_list_close(it);
    ck_assert_int_eq(listed, (int)NVAL);
    ck_assert_int_eq(low, (int)(NVAL - MAXMEM / VAL));
    int in_host = 0, first_low = -1;
    for (int i = 0; i < (int)NVAL; i++)
        if (tier_of(c, i) == GKV_TIER_HOST && in_host++ == 0)
            first_low = i;
    ck_assert_int_eq(in_host, low);
    /* And in the CLI: "host" in ls -l's GPU column, locate's ", in its host tier". */
    char cmd[512], line[256];
    snprintf(cmd, sizeof(cmd), "%s -s %s ls -l t/ | grep -c '  host   t/'", GKV_CLI_PATH,
             d.sock);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
    pclose(p);
    ck_assert_int_eq(atoi(line), low);
    snprintf(cmd, sizeof(cmd), "%s -s %s locate %s", GKV_CLI_PATH, d.sock,
             key_of(first_low, key));
    ck_assert_ptr_nonnull(p = popen(cmd, "r"));
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
    pclose(p);
    ck_assert_str_eq(line, "this daemon (it is in no cluster), in its host tier\n");
    /* Every key reads back; a GET of one in the tier is answered from there (no promotion:
     * --tier-promote-on-get is off), so nothing moves. */
    uint64_t demoted = info_u64(c, "demoted_keys");
    for (int i = 0; i < (int)NVAL; i++) {
        read_exact(c, i, (uint64_t)i);
        if (i % 8 == 0)
            limits_kept(c);
    }
    ck_assert_uint_eq(info_u64(c, "promoted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "demoted_keys"), demoted);
    ck_assert_int_eq(tier_of(c, first_low), GKV_TIER_HOST);
    /* A range of one: the bytes at its offset. */
    static uint8_t part[100];
    gkv_range_t range = {.offset = 1000, .length = sizeof(part)};
    harness_fill(v, VAL, (uint64_t)first_low);
    ck_assert_int_eq(gkv_get(c, KEYN(first_low, key), &range, part, sizeof(part), NULL), 0);
    ck_assert_int_eq(memcmp(part, v + 1000, sizeof(part)), 0);
    /* And by MGET, in batches of 16 (4 MiB each). */
    for (int b = 0; b < (int)NVAL; b += 16) {
        gkv_mget_item_t items[16];
        static uint8_t bufs[16][VAL];
        char keys[16][32];
        for (int k = 0; k < 16; k++) {
            key_of(b + k, keys[k]);
            items[k] = (gkv_mget_item_t){.key = keys[k], .klen = strlen(keys[k]),
                                         .buf = bufs[k], .cap = VAL};
        }
        ck_assert_int_eq(gkv_mget(c, items, 16), 0);
        for (int k = 0; k < 16; k++) {
            ck_assert_int_eq(items[k].status, 0);
            harness_fill(v, VAL, (uint64_t)(b + k));
            ck_assert_msg(memcmp(v, bufs[k], VAL) == 0, "%s by MGET: wrong bytes", keys[k]);
        }
    }
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "promote_errors"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* --tier-headroom 25: as the GPU fills past three quarters of its limit, values move to the
 * host tier in the background until a quarter is free again, with no write waiting for it;
 * every value reads back bit-exact; later writes find room without moving anything. */
START_TEST(the_headroom_is_kept_in_the_background)
{
    const char *const extra[] = {"--maxmemory", "8M", "--tier-host", "32M", "--maxmemory-policy",
                                 "allkeys-lru", "--tier-headroom", "25", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    int n = (int)(MAXMEM / VAL); /* the GPU's limit */
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(c, i), 0);
    uint64_t used = 0;
    for (int t = 0; t < 200 && (used = info_u64(c, "used_bytes")) > MAXMEM / 4 * 3; t++)
        harness_sleep_ms(10);
    ck_assert_uint_le(used, MAXMEM / 4 * 3);
    ck_assert_uint_ge(info_u64(c, "demoted_background_keys"), (uint64_t)n / 4);
    ck_assert_uint_eq(info_u64(c, "demoted_keys"), info_u64(c, "demoted_background_keys"));
    ck_assert_uint_eq(info_u64(c, "tier_headroom"), 25);
    for (int i = 0; i < n; i++)
        read_exact(c, i, (uint64_t)i);
    limits_kept(c);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Writers into a full GPU with no headroom: each SET that finds no room waits for the moves
 * down it needs, which the demoter starts on the copy lane (INFO tier_room_waits), while the
 * other connections go on (readers among them); every key ends with its last value, limits
 * kept, nothing evicted. */
typedef struct {
    const char *url;
    int first, n, seed; /* keys first..first+n-1, written with seed + key */
    bool reader;
} room_job_t;

static void *room_worker(void *arg)
{
    room_job_t *j = arg;
    gkv_client_t *c;
    if (gkv_client_connect(j->url, &c))
        return (void *)1;
    static __thread uint8_t v[VAL], got[VAL];
    char key[32];
    intptr_t bad = 0;
    for (int i = j->first; i < j->first + j->n && !bad; i++) {
        if (j->reader) { /* the first keys, over and over: they stay readable while moving */
            int k = i % 16;
            harness_fill(v, VAL, (uint64_t)k);
            bad = gkv_get(c, KEYN(k, key), NULL, got, VAL, NULL) || memcmp(v, got, VAL);
            continue;
        }
        harness_fill(v, VAL, (uint64_t)(j->seed + i));
        bad = gkv_set(c, KEYN(i, key), v, VAL, NULL) != 0;
    }
    gkv_client_close(c);
    return (void *)bad;
}

START_TEST(writes_on_a_full_gpu_wait_for_moves_off_the_request_path)
{
    gkv_daemon_t d = start_tiered("allkeys-lru");
    gkv_client_t *c = connect_or_fail(d.url);
    for (int i = 0; i < 16; i++) /* what the reader reads */
        ck_assert_int_eq(put(c, i), 0);
    enum { WRITERS = 4, PER = 36 }; /* 16 + 144 keys: GPU and tier exactly full */
    room_job_t jobs[WRITERS + 1];
    pthread_t t[WRITERS + 1];
    for (int w = 0; w <= WRITERS; w++) {
        jobs[w] = (room_job_t){.url = d.url, .first = 16 + w * PER, .n = PER, .seed = 1000,
                               .reader = w == WRITERS};
        if (jobs[w].reader)
            jobs[w].n = 400;
        ck_assert_int_eq(pthread_create(&t[w], NULL, room_worker, &jobs[w]), 0);
    }
    for (int w = 0; w <= WRITERS; w++) {
        void *bad;
        pthread_join(t[w], &bad);
        ck_assert_msg(!bad, "worker %d failed", w);
    }
    ck_assert_uint_ge(info_u64(c, "tier_room_waits"), 1);
    ck_assert_uint_ge(info_u64(c, "demoted_background_keys"), 1);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    limits_kept(c);
    for (int i = 0; i < 16; i++)
        read_exact(c, i, (uint64_t)i);
    for (int i = 16; i < 16 + WRITERS * PER; i++)
        read_exact(c, i, (uint64_t)(1000 + i));
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* With --tier-promote-on-get yes every GET of a value in the tier brings it up (another goes
 * down), limits kept; without it a MAP does (the mapping needs GPU memory). */
START_TEST(gets_bring_values_up_when_asked_and_maps_always)
{
    for (int promote = 0; promote < 2; promote++) {
        gkv_daemon_t d = start_tiered_as("allkeys-lru", promote);
        gkv_client_t *c = connect_or_fail(d.url);
        char key[32];
        for (int i = 0; i < (int)NVAL; i++)
            ck_assert_int_eq(put(c, i), 0);
        int low = -1;
        for (int i = 0; i < (int)NVAL && low < 0; i++)
            if (tier_of(c, i) == GKV_TIER_HOST)
                low = i;
        ck_assert_int_ge(low, 0);
        if (promote) {
            for (int i = 0; i < (int)NVAL; i++) {
                read_exact(c, i, (uint64_t)i);
                if (i % 8 == 0)
                    limits_kept(c);
            }
            ck_assert_uint_ge(info_u64(c, "promoted_keys"), NVAL - MAXMEM / VAL);
        } else {
            gkv_mapping_t *m;
            ck_assert_int_eq(gkv_map(c, KEYN(low, key), NULL, &m), 0);
            ck_assert_int_eq(tier_of(c, low), GKV_TIER_GPU);
            ck_assert_int_eq(gkv_unmap(c, m), 0);
            ck_assert_uint_eq(info_u64(c, "promoted_keys"), 1);
            read_exact(c, low, (uint64_t)low);
        }
        limits_kept(c);
        ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
        gkv_client_close(c);
        ck_assert_int_eq(harness_stop(&d), 0);
    }
}
END_TEST

/* A GET of a value in the host tier goes from the tier's memory to the socket: a reader that
 * stalls while the key is overwritten and deleted and the tier fills with other values still
 * gets the old bytes whole; a reader that leaves halfway holds nothing after. */
START_TEST(a_slow_reader_of_a_tier_value_gets_the_old_bytes_whole)
{
    enum { BIG = 7u << 20 }; /* more than a widened socket buffer (4 MiB) takes */
    gkv_daemon_t d = start_tiered("allkeys-lru");
    gkv_client_t *c = connect_or_fail(d.url);
    uint8_t *old = malloc(BIG), *got = malloc(BIG);
    ck_assert_ptr_nonnull(old);
    ck_assert_ptr_nonnull(got);
    harness_fill(old, BIG, 4242);
    uint64_t size;
    int gpu, tier;
    for (int leave = 0; leave < 2; leave++) {
        /* The key, then a GPU's worth of others: it goes down (the candidates are sampled, so
         * the others are written again until it has). */
        ck_assert_int_eq(gkv_set(c, "big", 3, old, BIG, NULL), 0);
        tier = GKV_TIER_GPU;
        for (int round = 0; round < 8 && tier != GKV_TIER_HOST; round++) {
            for (int i = 0; i < (int)(MAXMEM / VAL); i++)
                ck_assert_int_eq(put(c, i), 0);
            ck_assert_int_eq(gkv_locate_tier(c, "big", 3, &size, &gpu, &tier), 0);
        }
        ck_assert_int_eq(tier, GKV_TIER_HOST);
        int fd = raw_connect(d.sock);
        gkv_response_t r;
        uint8_t hdr[4096];
        ck_assert_int_eq(raw_request(fd, GKV_OP_GET, (raw_fields_t){.key = "big"}, &r, hdr,
                                     sizeof(hdr)),
                         0);
        ck_assert_uint_eq(r.payload_len, BIG);
        ck_assert_int_eq(recv(fd, got, 1000, MSG_WAITALL), 1000);
        /* The value changes under it: overwritten, deleted, the tier filled over. */
        static uint8_t v[VAL];
        harness_fill(v, VAL, 1);
        ck_assert_int_eq(gkv_set(c, "big", 3, v, VAL, NULL), 0);
        const void *k = "big";
        size_t kl = 3;
        ck_assert_int_eq(gkv_del(c, &k, &kl, 1), 1);
        for (int i = 0; i < (int)NVAL; i++)
            ck_assert_int_eq(put(c, 2000 + i), 0);
        if (leave) {
            close(fd);
            continue;
        }
        ck_assert_int_eq(recv(fd, got + 1000, BIG - 1000, MSG_WAITALL), (ssize_t)(BIG - 1000));
        ck_assert_msg(memcmp(got, old, BIG) == 0, "the reader got bytes other than the old value");
        close(fd);
    }
    /* Nothing held: the tier's use is what its keys take. */
    ck_assert_int_eq(gkv_ping(c), 0);
    ck_assert_uint_eq(info_u64(c, "tier_host_used"), info_u64(c, "tier_host_keys") * VAL);
    ck_assert_uint_eq(info_u64(c, "promoted_keys"), 0);
    free(old);
    free(got);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(mapped_values_never_leave_the_gpu)
{
    gkv_daemon_t d = start_tiered("allkeys-lru");
    gkv_client_t *w = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    char key[32];
    gkv_mapping_t *m[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(put(w, 1000 + i), 0);
        ck_assert_int_eq(gkv_map(r, KEYN(1000 + i, key), NULL, &m[i]), 0);
    }
    for (int i = 0; i < (int)NVAL - 8; i++)
        ck_assert_int_eq(put(w, i), 0);
    ck_assert_uint_ge(info_u64(w, "demoted_keys"), NVAL - MAXMEM / VAL);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(tier_of(w, 1000 + i), GKV_TIER_GPU);
        ck_assert_int_eq(gkv_unmap(r, m[i]), 0);
        read_exact(w, 1000 + i, 1000 + (uint64_t)i);
    }
    gkv_client_close(r);
    gkv_client_close(w);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(a_value_in_the_tier_overwritten_or_deleted_never_comes_back)
{
    gkv_daemon_t d = start_tiered("allkeys-lru");
    gkv_client_t *c = connect_or_fail(d.url);
    static uint8_t v[VAL], got[VAL];
    char key[32];
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(put(c, i), 0);
    int low[2], n = 0;
    for (int i = 0; i < 64 && n < 2; i++)
        if (tier_of(c, i) == GKV_TIER_HOST)
            low[n++] = i;
    ck_assert_int_eq(n, 2);
    uint64_t tier_used = info_u64(c, "tier_host_used");
    /* Overwritten with a smaller value: the new one is read, the old bytes are gone. */
    harness_fill(v, VAL, 777);
    ck_assert_int_eq(gkv_set(c, KEYN(low[0], key), v, 1000, NULL), 0);
    ck_assert_int_eq(gkv_get(c, KEYN(low[0], key), NULL, got, VAL, NULL), 0);
    ck_assert_int_eq(memcmp(v, got, 1000), 0);
    uint64_t size;
    ck_assert_int_eq(gkv_getsize(c, KEYN(low[0], key), &size), 0);
    ck_assert_uint_eq(size, 1000);
    /* Deleted: a miss, and its bytes left the tier. */
    ck_assert_int_eq(del_one(c, low[1]), 1);
    ck_assert_int_eq(gkv_get(c, KEYN(low[1], key), NULL, got, VAL, NULL), GKV_ENOTFOUND);
    ck_assert_uint_le(info_u64(c, "tier_host_used"), tier_used - VAL);
    /* More writes and reads afterwards do not bring either old value back. */
    for (int i = 64; i < (int)NVAL; i++)
        ck_assert_int_eq(put(c, i), 0);
    ck_assert_int_eq(gkv_get(c, KEYN(low[1], key), NULL, got, VAL, NULL), GKV_ENOTFOUND);
    ck_assert_int_eq(gkv_getsize(c, KEYN(low[0], key), &size), 0);
    ck_assert_uint_eq(size, 1000);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(noeviction_refuses_once_gpu_and_tier_are_full)
{
    gkv_daemon_t d = start_tiered_as("noeviction", true);
    gkv_client_t *c = connect_or_fail(d.url), *r = connect_or_fail(d.url);
    char key[32];
    int i = 0, rc;
    while ((rc = put(c, i)) == 0)
        i++;
    ck_assert_int_eq(rc, GKV_EOOM);
    ck_assert_int_eq(i, (int)NVAL);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    /* Full, reads still bring values up (a full tier swaps), and lose nothing. */
    for (int k = 0; k < i; k++)
        read_exact(c, k, (uint64_t)k);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    /* With every value on the GPU mapped, nothing can go down: a read of one in the tier is
     * refused with OOM and a reason, and the value stays. */
    gkv_mapping_t *m[MAXMEM / VAL];
    int nm = 0, low = -1;
    for (int k = 0; k < i; k++) {
        if (tier_of(c, k) == GKV_TIER_GPU)
            ck_assert_int_eq(gkv_map(r, KEYN(k, key), NULL, &m[nm++]), 0);
        else if (low < 0)
            low = k;
    }
    ck_assert_int_eq(nm, (int)(MAXMEM / VAL));
    ck_assert_int_ge(low, 0);
    static uint8_t got[VAL];
    ck_assert_int_eq(gkv_get(c, KEYN(low, key), NULL, got, VAL, NULL), GKV_EOOM);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "tier below the GPUs"));
    ck_assert_uint_eq(info_u64(c, "promote_errors"), 1);
    for (int k = 0; k < nm; k++)
        ck_assert_int_eq(gkv_unmap(r, m[k]), 0);
    /* A request of r's that is not a mapping call ends r's lease cache (which keeps a few
     * leases after gkv_unmap), and its reply comes after every RELEASE r sent: only then are
     * the values free on the server's side (c's requests are another connection's). */
    uint64_t sz;
    ck_assert_int_eq(gkv_getsize(r, KEYN(low, key), &sz), 0);
    ck_assert_uint_eq(info_u64(c, "leases"), 0);
    read_exact(c, low, (uint64_t)low);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    gkv_client_close(r);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* GPU 4M, host tier 8M, disk tier 16M in a new directory (ddir), allkeys-lru: the flags in
 * extra (12 slots; they name ddir), the daemon started, keys 0..n-1 put through *c. */
static gkv_daemon_t start_disk(char ddir[64], const char *extra[12], int n, gkv_client_t **c)
{
    ck_assert_int_eq(harness_tmpdir(ddir, NULL, "disk"), 0);
    const char *const flags[] = {"--maxmemory", "4M", "--tier-host", "8M", "--tier-disk", ddir,
                                 "--tier-disk-size", "16M", "--maxmemory-policy", "allkeys-lru",
                                 NULL};
    memcpy(extra, flags, sizeof(flags));
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, extra), 0);
    *c = connect_or_fail(d.url);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(*c, i), 0);
    return d;
}

/* GPU 4M, host tier 8M, disk tier 16M: seven times the GPU, all of it read back, the disk's
 * values named "disk" by LIST and the CLI. */
START_TEST(values_go_down_to_the_disk_and_come_back)
{
    char ddir[64];
    const char *extra[12];
    gkv_client_t *c;
    int n = (int)((28u << 20) / VAL); /* seven times the GPU */
    gkv_daemon_t d = start_disk(ddir, extra, n, &c);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "tier_disk_keys"), (16u << 20) / VAL);
    ck_assert_uint_le(info_u64(c, "tier_disk_used"), 16u << 20);
    int on_disk = 0;
    for (int i = 0; i < n; i++)
        on_disk += tier_of(c, i) == GKV_TIER_DISK;
    ck_assert_int_eq(on_disk, (int)((16u << 20) / VAL));
    char cmd[512], line[64];
    snprintf(cmd, sizeof(cmd), "%s -s %s ls -l t/ | grep -c '  disk   t/'", GKV_CLI_PATH, d.sock);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
    pclose(p);
    ck_assert_int_eq(atoi(line), on_disk);
    for (int i = 0; i < n; i++)
        read_exact(c, i, (uint64_t)i);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "tier_dropped_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "tier_disk_corrupt"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    harness_rmdir(ddir); /* its file is kept for the next start (files_in below) */
}
END_TEST

/* With room on the disk, a GET of a disk value waits while the demoter's thread reads it up
 * into the host tier (a full host tier first sends its coldest value down), and readers of the
 * same key at once all get it; every value bit-exact, nothing evicted or dropped. */
typedef struct {
    const char *url;
    int key;
    intptr_t bad;
} fetch_job_t;

static void *fetch_reader(void *arg)
{
    fetch_job_t *j = arg;
    gkv_client_t *c;
    if (gkv_client_connect(j->url, &c)) {
        j->bad = 1;
        return NULL;
    }
    static __thread uint8_t v[VAL], got[VAL];
    char key[32];
    harness_fill(v, VAL, (uint64_t)j->key);
    j->bad = gkv_get(c, KEYN(j->key, key), NULL, got, VAL, NULL) || memcmp(v, got, VAL);
    gkv_client_close(c);
    return NULL;
}

START_TEST(gets_of_disk_values_wait_for_their_read_off_the_request_path)
{
    char ddir[64];
    ck_assert_int_eq(harness_tmpdir(ddir, NULL, "disk"), 0);
    const char *const flags[] = {"--maxmemory", "4M", "--tier-host", "8M", "--tier-disk", ddir,
                                 "--tier-disk-size", "32M", "--maxmemory-policy", "allkeys-lru",
                                 NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    int n = (int)((20u << 20) / VAL); /* 8 MiB of it on the disk, 24 MiB free there */
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(c, i), 0);
    int first = -1, on_disk = 0;
    for (int i = 0; i < n; i++)
        if (tier_of(c, i) == GKV_TIER_DISK) {
            on_disk++;
            if (first < 0)
                first = i;
        }
    ck_assert_int_ge(on_disk, 8);
    uint64_t waits = info_u64(c, "tier_room_waits");
    enum { READERS = 4 }; /* of one disk key at once */
    fetch_job_t jobs[READERS];
    pthread_t t[READERS];
    for (int r = 0; r < READERS; r++) {
        jobs[r] = (fetch_job_t){.url = d.url, .key = first};
        ck_assert_int_eq(pthread_create(&t[r], NULL, fetch_reader, &jobs[r]), 0);
    }
    for (int r = 0; r < READERS; r++) {
        pthread_join(t[r], NULL);
        ck_assert_msg(!jobs[r].bad, "reader %d", r);
    }
    for (int i = 0; i < n; i++)
        read_exact(c, i, (uint64_t)i);
    ck_assert_uint_gt(info_u64(c, "tier_room_waits"), waits);
    ck_assert_uint_gt(info_u64(c, "promoted_from_disk_bytes"), 0);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "tier_dropped_keys"), 0);
    ck_assert_uint_le(info_u64(c, "tier_host_used"), 8u << 20);
    ck_assert_uint_le(info_u64(c, "used_bytes"), 4u << 20);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    harness_rmdir(ddir);
}
END_TEST

/* A client mapping key j->key (in a tier): the mapping shows its bytes (read through the host
 * arena; on a GPU, the tier's copy is checked by a GET after). */
static void *map_reader(void *arg)
{
    fetch_job_t *j = arg;
    gkv_client_t *c;
    if (gkv_client_connect(j->url, &c)) {
        j->bad = 1;
        return NULL;
    }
    static __thread uint8_t v[VAL];
    char key[32];
    harness_fill(v, VAL, (uint64_t)j->key);
    gkv_mapping_t *m;
    j->bad = gkv_map(c, KEYN(j->key, key), NULL, &m);
    if (j->bad)
        fprintf(stderr, "map of %ld: %ld %s\n", (long)j->key, (long)j->bad, gkv_client_errmsg(c));
    if (!j->bad) {
        j->bad = m->length != VAL || (!m->on_device && memcmp(m->ptr, v, VAL));
        j->bad |= gkv_unmap(c, m);
    }
    gkv_client_close(c);
    return NULL;
}

/* MAPs of values in the tiers wait while the demoter brings them up off the request path:
 * from the host tier on the GPU's copy lane, from the disk through the host tier; four MAPs of
 * one key at once share its moves (one promotion each); GETs of others go on meanwhile. */
START_TEST(maps_of_tier_values_wait_for_their_moves_off_the_request_path)
{
    char ddir[64];
    ck_assert_int_eq(harness_tmpdir(ddir, NULL, "disk"), 0);
    const char *const flags[] = {"--maxmemory", "4M", "--tier-host", "8M", "--tier-disk", ddir,
                                 "--tier-disk-size", "32M", "--maxmemory-policy", "allkeys-lru",
                                 "--host-zero-copy", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    int n = (int)((20u << 20) / VAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(c, i), 0);
    int host = -1, disk = -1;
    for (int i = 0; i < n; i++) {
        unsigned t = tier_of(c, i);
        if (t == GKV_TIER_HOST && host < 0)
            host = i;
        if (t == GKV_TIER_DISK && disk < 0)
            disk = i;
    }
    ck_assert_int_ge(host, 0);
    ck_assert_int_ge(disk, 0);
    for (int round = 0; round < 2; round++) {
        int k = round ? disk : host;
        uint64_t waits = info_u64(c, "tier_room_waits"),
                 promoted = info_u64(c, "promoted_keys");
        enum { READERS = 4 };
        fetch_job_t jobs[READERS + 1];
        pthread_t t[READERS + 1];
        for (int r = 0; r <= READERS; r++) {
            /* the last one GETs another key of the same tier meanwhile */
            jobs[r] = (fetch_job_t){.url = d.url, .key = r < READERS ? k : k + 1};
            ck_assert_int_eq(pthread_create(&t[r], NULL, r < READERS ? map_reader : fetch_reader,
                                            &jobs[r]),
                             0);
        }
        for (int r = 0; r <= READERS; r++) {
            pthread_join(t[r], NULL);
            ck_assert_msg(!jobs[r].bad, "round %d, client %d", round, r);
        }
        ck_assert_int_eq(tier_of(c, k), GKV_TIER_GPU);
        ck_assert_uint_gt(info_u64(c, "tier_room_waits"), waits);
        /* the one key's moves up: host to GPU, or disk to host and host to GPU (or disk to GPU
         * at once, where a MAP that found no move to start made it itself) */
        ck_assert_uint_ge(info_u64(c, "promoted_keys"), promoted + 1);
        read_exact(c, k, (uint64_t)k);
    }
    for (int i = 0; i < n; i++)
        read_exact(c, i, (uint64_t)i);
    ck_assert_uint_gt(info_u64(c, "promoted_from_host_bytes"), 0);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_eq(info_u64(c, "tier_dropped_keys"), 0);
    ck_assert_uint_le(info_u64(c, "tier_host_used"), 8u << 20);
    ck_assert_uint_le(info_u64(c, "used_bytes"), 4u << 20);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    harness_rmdir(ddir);
}
END_TEST

/* With --tier-promote-on-get yes a GET of a value in the host tier waits while the demoter
 * brings it up (room made by a move down first): it reads back exact and is on the GPU after. */
START_TEST(a_promoting_get_waits_for_its_move_off_the_request_path)
{
    const char *const flags[] = {"--maxmemory", "4M", "--tier-host", "16M", "--maxmemory-policy",
                                 "allkeys-lru", "--tier-promote-on-get", "yes", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    int n = (int)((12u << 20) / VAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(c, i), 0);
    int low = -1;
    for (int i = 0; i < n && low < 0; i++)
        if (tier_of(c, i) == GKV_TIER_HOST)
            low = i;
    ck_assert_int_ge(low, 0);
    uint64_t waits = info_u64(c, "tier_room_waits"), promoted = info_u64(c, "promoted_keys");
    read_exact(c, low, (uint64_t)low);
    ck_assert_int_eq(tier_of(c, low), GKV_TIER_GPU);
    ck_assert_uint_gt(info_u64(c, "tier_room_waits"), waits);
    ck_assert_uint_eq(info_u64(c, "promoted_keys"), promoted + 1);
    for (int i = 0; i < n; i++)
        read_exact(c, i, (uint64_t)i);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_le(info_u64(c, "used_bytes"), 4u << 20);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Values of mixed sizes moving into a host tier of several hundred MiB: a 4 KiB value first,
 * so that 4 MiB values lie across any 64 MiB boundary of the tier's memory (on a GPU, a copy
 * spanning two page-locked registrations is refused: the tier is locked as one). Nothing
 * evicted, every value bit-exact. */
START_TEST(values_of_mixed_sizes_move_into_a_large_tier)
{
    const char *const flags[] = {"--maxmemory", "16M", "--tier-host", "256M",
                                 "--maxmemory-policy", "allkeys-lru", NULL};
    gkv_daemon_t d;
    ck_assert_int_eq(harness_start(&d, flags), 0);
    gkv_client_t *c = connect_or_fail(d.url);
    enum { BIG = 4u << 20, NBIG = 60 };
    uint8_t *v = malloc(BIG), *got = malloc(BIG);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(got);
    harness_fill(v, 4096, 7);
    ck_assert_int_eq(gkv_set(c, "small", 5, v, 4096, NULL), 0);
    char key[32];
    for (int i = 0; i < NBIG; i++) {
        harness_fill(v, BIG, (uint64_t)i);
        snprintf(key, sizeof(key), "big/%d", i);
        ck_assert_int_eq(gkv_set(c, key, strlen(key), v, BIG, NULL), 0);
    }
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    ck_assert_uint_ge(info_u64(c, "tier_host_keys"), NBIG / 2);
    for (int i = 0; i < NBIG; i++) {
        harness_fill(v, BIG, (uint64_t)i);
        snprintf(key, sizeof(key), "big/%d", i);
        ck_assert_int_eq(gkv_get(c, key, strlen(key), NULL, got, BIG, NULL), 0);
        ck_assert_msg(memcmp(v, got, BIG) == 0, "%s: wrong bytes", key);
    }
    free(v);
    free(got);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static int files_in(const char *dir)
{
    char cmd[128], line[32];
    snprintf(cmd, sizeof(cmd), "ls %s | wc -l", dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
    pclose(p);
    return atoi(line);
}

/* The disk tier comes back after a SIGKILL (and after a stop): every value that was on the
 * disk reads back bit-exact, in the disk tier; a key deleted before the crash stays deleted;
 * --tier-disk-reload no starts empty and removes the file left. */
START_TEST(the_disk_tier_comes_back_after_sigkill)
{
    char ddir[64];
    const char *extra[12];
    gkv_client_t *c;
    int n = (int)((28u << 20) / VAL); /* seven times the GPU */
    gkv_daemon_t d = start_disk(ddir, extra, n, &c);
    bool disk[256] = {false};
    int on_disk = 0, deleted = -1;
    for (int i = 0; i < n; i++)
        if (tier_of(c, i) == GKV_TIER_DISK) {
            if (deleted < 0) {
                deleted = i;
                continue;
            }
            disk[i] = true;
            on_disk++;
        }
    ck_assert_int_eq(del_one(c, deleted), 1);
    gkv_client_close(c);
    harness_kill(&d);
    uint64_t left = 0;
    for (int round = 0; round < 2; round++) { /* after the SIGKILL, then after a stop */
        ck_assert_int_eq(harness_start(&d, extra), 0);
        c = connect_or_fail(d.url);
        ck_assert_uint_eq(info_u64(c, "tier_disk_keys"), (uint64_t)on_disk);
        ck_assert_uint_eq(info_u64(c, "tier_disk_reloaded"), (uint64_t)on_disk);
        char key[32];
        uint64_t size;
        ck_assert_int_eq(gkv_getsize(c, KEYN(deleted, key), &size), GKV_ENOTFOUND);
        for (int i = 0; i < n; i++) {
            if (!disk[i]) {
                ck_assert_int_eq(gkv_getsize(c, KEYN(i, key), &size), GKV_ENOTFOUND);
                continue;
            }
            ck_assert_int_eq(tier_of(c, i), GKV_TIER_DISK);
            if (round) /* a GET brings it up to the host tier: the disk keeps fewer */
                read_exact(c, i, (uint64_t)i);
        }
        ck_assert_uint_eq(info_u64(c, "tier_disk_corrupt"), 0);
        left = info_u64(c, "tier_disk_keys");
        gkv_client_close(c);
        ck_assert_int_eq(harness_stop(&d), 0);
        ck_assert_int_eq(files_in(ddir), 1);
    }
    /* The reads moved values up and others down: what the disk held at the stop is what comes
     * back, each bit-exact, no more. */
    ck_assert_int_eq(harness_start(&d, extra), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(info_u64(c, "tier_disk_keys"), left);
    int back = 0;
    for (int i = 0; i < n; i++) {
        char key[32];
        uint64_t size;
        if (gkv_getsize(c, KEYN(i, key), &size) == GKV_ENOTFOUND)
            continue;
        ck_assert_int_eq(tier_of(c, i), GKV_TIER_DISK);
        read_exact(c, i, (uint64_t)i);
        back++;
    }
    ck_assert_uint_eq((uint64_t)back, left);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    /* Without reload: nothing, and the file left is gone (the daemon's own stays). */
    const char *const fresh[] = {"--maxmemory", "4M", "--tier-host", "8M", "--tier-disk", ddir,
                                 "--tier-disk-size", "16M", "--tier-disk-reload", "no", NULL};
    ck_assert_int_eq(harness_start(&d, fresh), 0);
    c = connect_or_fail(d.url);
    ck_assert_uint_eq(info_u64(c, "tier_disk_keys"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    ck_assert_int_eq(files_in(ddir), 1);
    harness_rmdir(ddir);
}
END_TEST

/* A disk that refuses writes (here a file-size limit, EFBIG, standing for a full disk's
 * ENOSPC): values stay where they are, the write that finds no room gets OOM saying why, the
 * daemon lives on, and nothing acknowledged is lost. */
START_TEST(a_disk_that_fills_up_gets_a_clear_error_and_loses_nothing)
{
    char ddir[64];
    ck_assert_int_eq(harness_tmpdir(ddir, NULL, "full"), 0);
    const char *const extra[] = {"--maxmemory", "4M", "--tier-host", "8M", "--tier-disk", ddir,
                                 "--tier-disk-size", "64M", "--maxmemory-policy", "noeviction",
                                 NULL};
    struct rlimit was, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
    lim = was;
    /* The tier's file stops at 14 MiB (the memfds of the GPU's arena, 4 MiB, and of the host
     * tier, 12 MiB with its swap room, count too; the log stays small). */
    lim.rlim_cur = 14u << 20;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    gkv_daemon_t d;
    int started = harness_start(&d, extra);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    ck_assert_int_eq(started, 0);
    gkv_client_t *c = connect_or_fail(d.url);
    int n = 0, rc;
    while ((rc = put(c, n)) == 0)
        n++;
    ck_assert_int_eq(rc, GKV_EOOM);
    ck_assert_ptr_nonnull(strstr(gkv_client_errmsg(c), "the disk tier refuses writes"));
    ck_assert_uint_gt(info_u64(c, "tier_disk_io_errors"), 0);
    ck_assert_uint_eq(info_u64(c, "evicted_keys"), 0);
    int on_disk = (int)info_u64(c, "tier_disk_keys");
    ck_assert_int_gt(on_disk, 0);
    ck_assert_int_lt(on_disk, (int)((14u << 20) / VAL));
    ck_assert_int_eq(n, (int)((12u << 20) / VAL) + on_disk); /* GPU, host tier, what the disk took */
    /* Room above for the disk's values (deleting keys on the GPU and in the host tier), then
     * every other key reads back bit-exact. */
    int gone = 0;
    bool deleted[512] = {false};
    for (int i = 0; i < n && gone < on_disk; i++)
        if (tier_of(c, i) != GKV_TIER_DISK) {
            ck_assert_int_eq(del_one(c, i), 1);
            deleted[i] = true;
            gone++;
        }
    for (int i = 0; i < n; i++)
        if (!deleted[i])
            read_exact(c, i, (uint64_t)i);
    ck_assert_uint_eq(info_u64(c, "tier_dropped_keys"), 0);
    gkv_client_close(c);
    ck_assert_int_eq(harness_stop(&d), 0);
    harness_rmdir(ddir);
}
END_TEST

START_TEST(a_disk_tier_needs_a_directory_and_a_size)
{
    const char *const no_size[] = {"--tier-disk", "/tmp", NULL};
    const char *const no_dir[] = {"--tier-disk", "/nonexistent/gkv", "--tier-disk-size", "1M",
                                  NULL};
    gkv_daemon_t d;
    ck_assert_int_ne(harness_start(&d, no_size), 0);
    ck_assert_int_ne(harness_start(&d, no_dir), 0);
}
END_TEST

START_TEST(a_tier_larger_than_the_ram_is_refused)
{
    const char *const extra[] = {"--tier-host", "1000T", NULL};
    gkv_daemon_t d;
    ck_assert_int_ne(harness_start(&d, extra), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("tiers");
    TCase *t = tcase_create("tiers");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, five_times_maxmemory_with_the_tier_loses_nothing);
    tcase_add_test(t, gets_bring_values_up_when_asked_and_maps_always);
    tcase_add_test(t, the_headroom_is_kept_in_the_background);
    tcase_add_test(t, writes_on_a_full_gpu_wait_for_moves_off_the_request_path);
    tcase_add_test(t, a_slow_reader_of_a_tier_value_gets_the_old_bytes_whole);
    tcase_add_test(t, mapped_values_never_leave_the_gpu);
    tcase_add_test(t, a_value_in_the_tier_overwritten_or_deleted_never_comes_back);
    tcase_add_test(t, noeviction_refuses_once_gpu_and_tier_are_full);
    tcase_add_test(t, a_tier_larger_than_the_ram_is_refused);
    tcase_add_test(t, values_go_down_to_the_disk_and_come_back);
    tcase_add_test(t, gets_of_disk_values_wait_for_their_read_off_the_request_path);
    tcase_add_test(t, maps_of_tier_values_wait_for_their_moves_off_the_request_path);
    tcase_add_test(t, a_promoting_get_waits_for_its_move_off_the_request_path);
    tcase_add_test(t, values_of_mixed_sizes_move_into_a_large_tier);
    tcase_add_test(t, the_disk_tier_comes_back_after_sigkill);
    tcase_add_test(t, a_disk_that_fills_up_gets_a_clear_error_and_loses_nothing);
    tcase_add_test(t, a_disk_tier_needs_a_directory_and_a_size);
    suite_add_tcase(s, t);
    return s;
}

#include "suite_main.h"
