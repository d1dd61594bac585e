/* test_tier.c: the host tier in the store (two host backends: one stands for a GPU, one is the
 * tier): values that leave the device move to the tier instead of being lost and come back
 * bit-exact when read; each tier keeps its limit; held values stay; the last tier evicts under
 * an evicting policy and refuses under noeviction; overwrites and deletes of values in the
 * tier free the tier's memory; the journal never names a value in the tier. */
#include <fcntl.h>
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "store.h"
#include "store_impl.h"
#include "tier_pin.h"

#define LIMIT (1u << 20)      /* the device */
#define TIER (2u << 20)       /* the host tier */
#define VAL (16u << 10)       /* 64 values fill the device, 128 the tier */

#define STORE_LIMIT LIMIT
#include "store_fixture.h"

static gkv_backend_t *tier_be;

static void tier_setup(void)
{
    setup();
    gkv_backend_config_t bc = {GKV_BACKEND_HOST, 0, TIER + VAL}; /* a swap's room */
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &tier_be, why, sizeof(why)), 0);
    ck_assert_int_eq(gkv_store_add_tier(&st, tier_be, TIER), 0);
}

static void tier_teardown(void)
{
    gkv_store_flush(&st);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].used, 0); /* every tier byte given back */
    teardown();
    tier_be->ops->close(tier_be);
}

static const char *name(int i)
{
    static char buf[32];
    snprintf(buf, sizeof(buf), "k%d", i);
    return buf;
}

/* The byte value i's bytes are made of. */
static uint8_t fill_of(int i)
{
    return (uint8_t)(i * 7 + 1);
}

static uint8_t *bytes_of(gkv_entry_t *e)
{
    gkv_backend_t *b = gkv_store_be(&st, e);
    return b->ops->host_view(b, e->mem);
}

/* SET key i: VAL bytes of fill_of(i), with metadata "m<i>". */
static int put(int i)
{
    gkv_entry_t *e;
    const char *k = name(i);
    char meta[16];
    int ml = snprintf(meta, sizeof(meta), "m%d", i);
    int rc = gkv_store_entry_new(&st, 0, k, strlen(k), VAL, meta, (uint32_t)ml, 0, &e);
    if (rc)
        return rc;
    memset(bytes_of(e), fill_of(i), VAL);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    gkv_store_unref(&st, e);
    return 0;
}

static gkv_entry_t *find(int i)
{
    const char *k = name(i);
    return gkv_store_find(&st, k, strlen(k));
}

/* Key i's value on the device, checked bit-exact with its metadata. */
static void read_back(int i)
{
    int rc;
    const char *k = name(i);
    gkv_entry_t *e = gkv_store_get_here(&st, k, strlen(k), &rc);
    ck_assert_msg(e != NULL, "%s: %d", k, rc);
    ck_assert(!gkv_store_in_tier(e));
    ck_assert_uint_eq(e->size, VAL);
    const uint8_t *b = bytes_of(e);
    for (uint32_t o = 0; o < VAL; o += 997)
        ck_assert_uint_eq(b[o], fill_of(i));
    ck_assert_uint_eq(b[VAL - 1], fill_of(i));
    char meta[16];
    int ml = snprintf(meta, sizeof(meta), "m%d", i);
    uint32_t got;
    const uint8_t *m = gkv_entry_meta(e, &got);
    ck_assert_uint_eq(got, (uint32_t)ml);
    ck_assert_mem_eq(m, meta, (size_t)ml);
}

static int in_tier(int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++) {
        gkv_entry_t *e = find(i);
        n += e && gkv_store_in_tier(e);
    }
    return n;
}

static void limits_kept(void)
{
    ck_assert_uint_le(st.dev[0].used, LIMIT);
    ck_assert_uint_le(st.dev[GKV_DEV_HOST_TIER].used, TIER);
    ck_assert_uint_le(st.used, LIMIT); /* the store's totals are the device's */
}

/* The first key from `from` on whose value is in the tier. */
static int first_in_tier(int from, int to)
{
    for (int i = from; i < to; i++)
        if (find(i) && gkv_store_in_tier(find(i)))
            return i;
    ck_abort_msg("no value in the tier");
    return -1;
}

START_TEST(values_leaving_the_device_go_to_the_tier_and_come_back_bit_exact)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    for (int i = 0; i < 150; i++) { /* 2.3x the device, within device and tier */
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
        limits_kept();
    }
    ck_assert_uint_eq(st.stats.evicted, 0);
    ck_assert_uint_eq(st.stats.demoted, 150 - 64);
    ck_assert_int_eq(in_tier(0, 150), 150 - 64);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].keys, 150 - 64);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].linked_bytes, (uint64_t)(150 - 64) * VAL);
    ck_assert_uint_eq(st.linked_bytes, 150ull * VAL); /* GETSIZE of everything */
    ck_assert_str_eq(gkv_store_tier_name(find(first_in_tier(0, 150))), "host");
    ck_assert_str_eq(gkv_store_tier_name(find(149)), "device"); /* the newest stays up */
    for (int i = 0; i < 150; i++) { /* each read promotes it (and demotes another) */
        st.now_ms = 5000 + (uint64_t)i;
        read_back(i);
        limits_kept();
    }
    ck_assert_uint_eq(st.stats.evicted, 0);
    ck_assert_uint_ge(st.stats.promoted, 150 - 64);
    ck_assert_uint_eq(st.stats.promote_errors, 0);
}
END_TEST

/* --key-versions: a value's version stays with it down to the tier and back up; a new value
 * of the key gets a higher one. */
START_TEST(a_moved_value_keeps_its_version)
{
    gkv_store_flush(&st);
    ck_assert_int_eq(gkv_store_keep_versions(&st), 0);
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    uint64_t v[150], last = 0;
    for (int i = 0; i < 150; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
        v[i] = gkv_store_version(&st, find(i));
        ck_assert_uint_gt(v[i], last);
        last = v[i];
    }
    ck_assert_int_eq(in_tier(0, 150), 150 - 64);
    for (int i = 0; i < 150; i++) { /* down (most of them) and back up */
        ck_assert_uint_eq(gkv_store_version(&st, find(i)), v[i]);
        st.now_ms = 5000 + (uint64_t)i;
        read_back(i);
        ck_assert_uint_eq(gkv_store_version(&st, find(i)), v[i]);
    }
    ck_assert_uint_gt(st.stats.promoted, 0);
    ck_assert_int_eq(put(0), 0);
    ck_assert_uint_gt(gkv_store_version(&st, find(0)), last);
}
END_TEST

START_TEST(a_full_tier_swaps_rather_than_evicts)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    for (int i = 0; i < 192; i++) /* device and tier exactly full */
        ck_assert_int_eq(put(i), 0);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 192; i++) {
            read_back(i);
            limits_kept();
        }
    ck_assert_uint_eq(st.stats.evicted, 0);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].keys, 128);
}
END_TEST

START_TEST(the_least_recently_used_goes_down_first)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    for (int i = 0; i < 64; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    st.now_ms = 5000;
    for (int i = 0; i < 16; i++)
        read_back(i); /* the oldest sixteen, read again */
    st.now_ms = 9000;
    for (int i = 64; i < 80; i++)
        ck_assert_int_eq(put(i), 0);
    /* Sampled LRU (5 of 64, the index's samples clustered): mostly the old unread keys go
     * down, now and then a read one or a new one. */
    ck_assert_int_le(in_tier(0, 16), 6);
    ck_assert_int_ge(in_tier(16, 64), 8);
    ck_assert_int_le(in_tier(64, 80), 4);
}
END_TEST

START_TEST(a_held_value_is_never_moved)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    ck_assert_int_eq(put(0), 0);
    gkv_entry_t *held = find(0);
    gkv_store_ref(held); /* a lease or a transfer */
    for (int i = 1; i < 150; i++)
        ck_assert_int_eq(put(i), 0);
    ck_assert_ptr_eq(find(0), held);
    ck_assert(!gkv_store_in_tier(held));
    ck_assert_uint_eq(bytes_of(held)[VAL - 1], fill_of(0));
    gkv_store_unref(&st, held);
}
END_TEST

START_TEST(the_last_tier_evicts_under_an_evicting_policy)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    for (int i = 0; i < 250; i++) { /* past device and tier (192 values) */
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
        limits_kept();
    }
    ck_assert_uint_eq(st.stats.evicted, 250 - 192);
    ck_assert_int_eq(in_tier(0, 250), 128);
    int left = 0;
    for (int i = 0; i < 250; i++)
        left += find(i) != NULL;
    ck_assert_int_eq(left, 192);
    for (int i = 0; i < 250; i++) /* what is left is bit-exact */
        if (find(i))
            read_back(i);
}
END_TEST

START_TEST(noeviction_moves_down_then_refuses_and_loses_nothing)
{
    for (int i = 0; i < 192; i++)
        ck_assert_int_eq(put(i), 0);
    ck_assert_uint_eq(st.stats.demoted, 128);
    ck_assert_int_eq(put(192), GKV_EOOM); /* device and tier full */
    ck_assert_uint_eq(st.stats.evicted, 0);
    /* Reads still bring values up: a full tier swaps. */
    for (int i = 0; i < 192; i++)
        read_back(i);
    ck_assert_uint_eq(st.stats.evicted, 0);
    /* Unless nothing on the device may go down (all of it held): refused, the value stays. */
    gkv_entry_t *held[64];
    int nh = 0;
    for (int i = 0; i < 192; i++)
        if (!gkv_store_in_tier(find(i)))
            gkv_store_ref(held[nh++] = find(i));
    ck_assert_int_eq(nh, 64);
    int rc, a = first_in_tier(0, 192);
    const char *k = name(a);
    ck_assert_ptr_null(gkv_store_get_here(&st, k, strlen(k), &rc));
    ck_assert_int_eq(rc, GKV_EOOM);
    ck_assert_uint_eq(st.stats.promote_errors, 1);
    ck_assert(gkv_store_in_tier(find(a)));
    for (int i = 0; i < nh; i++)
        gkv_store_unref(&st, held[i]);
    read_back(a);
    ck_assert_uint_eq(st.stats.evicted, 0);
    limits_kept();
}
END_TEST

START_TEST(overwrite_and_delete_of_a_value_in_the_tier_free_its_bytes)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    for (int i = 0; i < 80; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    int a = first_in_tier(0, 80), b = first_in_tier(a + 1, 80);
    uint64_t tier_used = st.dev[GKV_DEV_HOST_TIER].used;
    /* An overwrite: the new value on the device, the old bytes gone from the tier. */
    gkv_entry_t *e;
    const char *k = name(a);
    size_t kl = strlen(k);
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, k, kl, VAL, NULL, 0, 0, &e), 0);
    memset(bytes_of(e), 0xee, VAL);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    gkv_store_unref(&st, e);
    ck_assert(!gkv_store_in_tier(find(a)));
    ck_assert_uint_eq(bytes_of(find(a))[0], 0xee);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].used, tier_used); /* one went down, one came out */
    /* A delete. */
    ck_assert(gkv_store_in_tier(find(b)));
    k = name(b);
    ck_assert_int_eq(gkv_store_del(&st, k, strlen(k)), 1);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].used, tier_used - VAL);
    ck_assert_ptr_null(find(b));
}
END_TEST

START_TEST(deadlines_move_with_the_value)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    st.now_ms = 1000;
    for (int i = 0; i < 80; i++) {
        ck_assert_int_eq(put(i), 0);
        const char *k = name(i);
        ck_assert_int_eq(gkv_store_expire(&st, k, strlen(k), 60000), 1);
    }
    int a = first_in_tier(0, 80);
    const char *k = name(a);
    uint64_t left;
    ck_assert_int_eq(gkv_store_ttl(&st, k, strlen(k), &left), 0);
    ck_assert_uint_eq(left, 60000);
    read_back(a);
    ck_assert_int_eq(gkv_store_ttl(&st, k, strlen(k), &left), 0);
    ck_assert_uint_eq(left, 60000);
    st.now_ms = 1000 + 60001; /* past it: every key gone, wherever it was */
    for (int i = 0; i < 80; i++)
        ck_assert_ptr_null(find(i));
}
END_TEST

START_TEST(a_value_larger_than_the_tier_is_evicted_or_refused_as_without_one)
{
    /* A tier smaller than one value: nothing can go down. */
    st.dev[GKV_DEV_HOST_TIER].limit = VAL / 2;
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(put(i), 0);
    ck_assert_int_eq(put(64), GKV_EOOM); /* noeviction */
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    ck_assert_int_eq(put(64), 0);
    ck_assert_uint_eq(st.stats.evicted, 1);
    ck_assert_uint_eq(st.stats.demoted, 0);
}
END_TEST

/* A move in two steps (the demoter's): the tier's entry takes the value's place when nothing
 * changed it meanwhile; an overwrite, a delete or a new deadline meanwhile wins (the tier's
 * entry goes, the tier's memory with it); a value held by a move is no candidate for another. */
START_TEST(a_move_in_two_steps_loses_to_a_change_meanwhile)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)(LIMIT / VAL);
    for (int i = 0; i < n; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    gkv_entry_t *e[4], *t[4];
    bool full;
    for (int k = 0; k < 4; k++) {
        ck_assert(gkv_store_demote_begin(&st, 0, &e[k], &t[k], &full));
        for (int j = 0; j < k; j++)
            ck_assert_ptr_ne(e[k], e[j]); /* held: not picked twice */
        memcpy(bytes_of(t[k]), bytes_of(e[k]), VAL);
    }
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].used, 4 * VAL);
    size_t kl;
    char k1[32], k2[32], k3[32];
    const uint8_t *key = gkv_store_key(&st, e[1], &kl);
    snprintf(k1, sizeof(k1), "%.*s", (int)kl, (const char *)key);
    key = gkv_store_key(&st, e[2], &kl);
    snprintf(k2, sizeof(k2), "%.*s", (int)kl, (const char *)key);
    key = gkv_store_key(&st, e[3], &kl);
    snprintf(k3, sizeof(k3), "%.*s", (int)kl, (const char *)key);
    int i1 = atoi(k1 + 1);
    ck_assert_int_eq(put(i1), 0);                                   /* overwritten */
    ck_assert_int_eq(gkv_store_del(&st, k2, strlen(k2)), 1);        /* deleted */
    gkv_entry_t *cur = gkv_store_find(&st, k3, strlen(k3));
    ck_assert_int_eq(gkv_store_entry_ttl(&st, cur, 60000), 0);      /* a deadline now */
    uint64_t moved = st.stats.demoted; /* the overwrite moved one down itself */
    ck_assert(gkv_store_demote_end(&st, e[0], t[0], true, 10));
    ck_assert(!gkv_store_demote_end(&st, e[1], t[1], true, 10));
    ck_assert(!gkv_store_demote_end(&st, e[2], t[2], true, 10));
    ck_assert(!gkv_store_demote_end(&st, e[3], t[3], true, 10));
    ck_assert_uint_eq(st.stats.demoted, moved + 1); /* only the one nothing changed */
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].keys, moved + 1);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].used, (moved + 1) * VAL); /* the rest freed */
    ck_assert_ptr_null(find(atoi(k2 + 1)));
    for (int i = 0; i < n; i++)
        if (find(i))
            read_back(i);
}
END_TEST

/* A move up in two steps (a MAP's, the demoter's): refused while the device has no room (none
 * is made) and for a value not in the host tier; the device's entry takes the key when
 * nothing changed it meanwhile (a promotion, the tier's memory freed), an overwrite wins. */
START_TEST(a_move_up_in_two_steps_needs_room_and_loses_to_a_change)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)(LIMIT / VAL) + 2; /* two in the tier */
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(i), 0);
    int low[2], k = 0;
    for (int i = 0; i < n && k < 2; i++)
        if (find(i)->dev == GKV_DEV_HOST_TIER)
            low[k++] = i;
    ck_assert_int_eq(k, 2);
    gkv_entry_t *t;
    ck_assert(!gkv_store_promote_begin(&st, find(low[0]), 0, 0, &t)); /* the device is full */
    int on_dev = 0;
    while (find(on_dev)->dev != 0)
        on_dev++;
    ck_assert(!gkv_store_promote_begin(&st, find(on_dev), 0, 0, &t)); /* not in the tier */
    for (int i = 0, gone = 0; gone < 2; i++) /* room for two on the device */
        if (find(i)->dev == 0)
            gone += gkv_store_del(&st, name(i), strlen(name(i))) == 1;
    gkv_entry_t *e0 = find(low[0]);
    ck_assert(gkv_store_promote_begin(&st, e0, 0, 0, &t));
    ck_assert_uint_eq(t->dev, 0);
    memcpy(bytes_of(t), bytes_of(e0), VAL);
    uint64_t promoted = st.stats.promoted, tier_used = st.dev[GKV_DEV_HOST_TIER].used;
    ck_assert(gkv_store_demote_end(&st, e0, t, true, 10));
    ck_assert_uint_eq(st.stats.promoted, promoted + 1);
    ck_assert_uint_eq(find(low[0])->dev, 0);
    ck_assert_uint_eq(st.dev[GKV_DEV_HOST_TIER].used, tier_used - VAL);
    read_back(low[0]);
    gkv_entry_t *e1 = find(low[1]);
    ck_assert_uint_eq(e1->dev, GKV_DEV_HOST_TIER);
    ck_assert(gkv_store_promote_begin(&st, e1, 0, 0, &t));
    ck_assert_int_eq(put(low[1]), 0); /* overwritten meanwhile */
    ck_assert(!gkv_store_demote_end(&st, e1, t, true, 10));
    ck_assert_uint_eq(st.stats.promoted, promoted + 1);
    read_back(low[1]);
    ck_assert_uint_le(st.dev[0].used, st.dev[0].limit);
}
END_TEST

START_TEST(a_second_tier_or_a_bad_one_is_refused)
{
    ck_assert_int_eq(gkv_store_add_tier(&st, tier_be, TIER), GKV_EINVAL);
}
END_TEST

/* ---- the disk tier ------------------------------------------------------------------- */

#define DISK (4u << 20)
/* A device whose backend locks host memory (as cuda's does), counting what it locks (from the
 * tier's thread): the whole tier in one registration (a copy spanning two would be refused),
 * unlocked at the end; moves between the device and the tier are timed. */
static gkv_backend_ops_t locking_ops;
static atomic_int pins, unpins, pins_elsewhere;
static atomic_size_t pinned_len;

static int count_pin(gkv_backend_t *b, void *addr, size_t len)
{
    (void)b;
    uint8_t *base = tier_be->ops->host_view(tier_be, (gkv_devptr_t){0});
    if ((uint8_t *)addr != base)
        atomic_fetch_add(&pins_elsewhere, 1);
    atomic_fetch_add(&pinned_len, len);
    atomic_fetch_add(&pins, 1);
    return 0;
}

static void count_unpin(gkv_backend_t *b, void *addr)
{
    (void)b;
    (void)addr;
    atomic_fetch_add(&unpins, 1);
}

#define LOCK_TIER (150u << 20)

static void locking_setup(void)
{
    setup();
    locking_ops = *be->ops;
    locking_ops.pin_host = count_pin;
    locking_ops.unpin_host = count_unpin;
    be->ops = &locking_ops;
    atomic_store(&pins, 0);
    atomic_store(&unpins, 0);
    atomic_store(&pins_elsewhere, 0);
    atomic_store(&pinned_len, 0);
    gkv_backend_config_t bc = {GKV_BACKEND_HOST, 0, LOCK_TIER + VAL};
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &tier_be, why, sizeof(why)), 0);
    ck_assert_int_eq(gkv_store_add_tier(&st, tier_be, LOCK_TIER), 0);
}

static void locking_teardown(void)
{
    tier_teardown();
    ck_assert_int_eq(atomic_load(&unpins), atomic_load(&pins)); /* all unlocked at the end */
}

START_TEST(the_tier_is_locked_by_a_thread_and_copies_are_timed)
{
    for (int i = 0; i < 500 && !gkv_tier_pin_done(st.tier_pin); i++)
        usleep(10000);
    ck_assert(gkv_tier_pin_done(st.tier_pin));
    ck_assert_int_eq(atomic_load(&pins), 1);
    ck_assert_int_eq(atomic_load(&pins_elsewhere), 0);
    ck_assert_uint_eq(atomic_load(&pinned_len), LOCK_TIER + VAL);
    ck_assert_uint_eq(gkv_tier_pin_locked(st.tier_pin), LOCK_TIER + VAL);
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((2 * LIMIT) / VAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(i), 0);
    ck_assert_uint_gt(st.stats.demoted_bytes, 0);
    ck_assert_uint_eq(st.stats.down_host_bytes, st.stats.demoted_bytes);
    for (int i = 0; i < n; i++)
        read_back(i);
    ck_assert_uint_gt(st.stats.up_host_bytes, 0);
    ck_assert_uint_eq(st.stats.up_host_bytes, st.stats.promoted_bytes);
}
END_TEST

/* Stopped while it locks: it stops after the region at hand and unlocks what it locked. */
START_TEST(a_store_that_ends_at_once_stops_the_locking)
{
    gkv__store_tier_fini(&st);
    ck_assert_int_eq(atomic_load(&unpins), atomic_load(&pins));
    ck_assert_ptr_null(st.tier_pin);
}
END_TEST

static gkv_backend_t *disk_be;
static char disk_dir[64];
/* The tcase: O_DIRECT (where /tmp takes it) through io_uring (where built and allowed) or one
 * copy at a time, or the page cache. */
static unsigned disk_io;
static bool disk_direct;

static void disk_setup(void)
{
    tier_setup();
    snprintf(disk_dir, sizeof(disk_dir), "/tmp/gkv-disk-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(disk_dir));
    char why[256];
    /* Room for the records' headers and padding (to 4 KiB) and a swap's value. */
    ck_assert_int_eq(
        gkv_backend_disk_open(disk_dir, 2 * DISK + VAL, true, disk_io, &disk_be, why, sizeof(why)),
        0);
    ck_assert_int_eq(gkv_store_add_disk_tier(&st, disk_be, DISK), 0);
    if (!disk_direct)
        ck_assert(!gkv_backend_disk_direct(disk_be));
    if (!(disk_io & GKV_DISK_URING))
        ck_assert(!gkv_backend_disk_uring(disk_be));
}

static void uring_setup(void)
{
    disk_io = GKV_DISK_DIRECT | GKV_DISK_URING;
    disk_direct = true;
    disk_setup();
}

static void direct_setup(void)
{
    disk_io = GKV_DISK_DIRECT;
    disk_direct = true;
    disk_setup();
}

static void buffered_setup(void)
{
    disk_io = 0;
    disk_direct = false;
    disk_setup();
}

static void disk_teardown(void)
{
    gkv_store_flush(&st);
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].used, 0);
    tier_teardown();
    gkv_backend_disk_discard(disk_be); /* else kept for the next start */
    disk_be->ops->close(disk_be);
    ck_assert_int_eq(rmdir(disk_dir), 0);
}

/* The store and its disk tier end as a crash ends them (nothing retired, the file kept), then
 * start again over the same backends and directory, reloading (or not) what the file holds. */
static void restart(bool reload)
{
    gkv_store_fini(&st);
    disk_be->ops->close(disk_be);
    ck_assert_int_eq(gkv_store_init(&st, be, LIMIT), 0);
    ck_assert_int_eq(gkv_store_add_tier(&st, tier_be, TIER), 0);
    char why[256];
    ck_assert_int_eq(gkv_backend_disk_open(disk_dir, 2 * DISK + VAL, reload, disk_io, &disk_be,
                                           why, sizeof(why)),
                     0);
    ck_assert_int_eq(gkv_store_add_disk_tier(&st, disk_be, DISK), 0);
    gkv_store_disk_reload(&st);
}

static bool in_list(const int *list, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}

static int on_disk(int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++)
        n += find(i) && find(i)->dev == GKV_DEV_DISK_TIER;
    return n;
}

static void all_limits_kept(void)
{
    limits_kept();
    ck_assert_uint_le(st.dev[GKV_DEV_DISK_TIER].used, DISK);
}

START_TEST(values_go_down_to_the_disk_and_come_back_bit_exact)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER + DISK) / VAL); /* 7x the device: every tier full */
    for (int i = 0; i < n; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
        all_limits_kept();
    }
    ck_assert_uint_eq(st.stats.evicted, 0);
    ck_assert_int_eq(on_disk(0, n), (int)(DISK / VAL));
    ck_assert_int_eq(in_tier(0, n), (int)((TIER + DISK) / VAL));
    int d = 0;
    while (find(d)->dev != GKV_DEV_DISK_TIER)
        d++;
    ck_assert_str_eq(gkv_store_tier_name(find(d)), "disk");
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < n; i++) {
            read_back(i);
            all_limits_kept();
        }
    ck_assert_uint_eq(st.stats.evicted, 0);
    ck_assert_uint_eq(st.stats.tier_dropped, 0);
}
END_TEST

/* A read for the socket (gkv_store_get_readable) leaves a host-tier value where it is and
 * brings a disk value up to the host tier only; under promote_on_get both come to the device. */
START_TEST(a_read_for_the_socket_stops_at_the_host_tier_unless_asked)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER + DISK) / VAL);
    for (int i = 0; i < n; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    for (int promote = 0; promote < 2; promote++) {
        st.promote_on_get = promote;
        int host = -1, disk = -1;
        for (int i = 0; i < n; i++) {
            if (host < 0 && find(i)->dev == GKV_DEV_HOST_TIER)
                host = i;
            if (disk < 0 && find(i)->dev == GKV_DEV_DISK_TIER)
                disk = i;
        }
        ck_assert_int_ge(host, 0);
        ck_assert_int_ge(disk, 0);
        uint64_t promoted = st.stats.promoted;
        int rc;
        const char *k = name(host);
        gkv_entry_t *e = gkv_store_get_readable(&st, k, strlen(k), &rc);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->dev, promote ? 0u : GKV_DEV_HOST_TIER);
        ck_assert_uint_eq(bytes_of(e)[VAL - 1], fill_of(host));
        k = name(disk);
        e = gkv_store_get_readable(&st, k, strlen(k), &rc);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->dev, promote ? 0u : GKV_DEV_HOST_TIER);
        ck_assert_uint_eq(bytes_of(e)[0], fill_of(disk));
        ck_assert_uint_eq(st.stats.promoted, promoted + (promote ? 2 : 1));
        all_limits_kept();
    }
    ck_assert_uint_eq(st.stats.evicted, 0);
}
END_TEST

/* After a crash the disk's values come back, bit-exact with their metadata; a key deleted or
 * overwritten before it never comes back with the disk's old bytes. */
START_TEST(the_disk_comes_back_after_a_crash_without_what_left_it)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER + DISK) / VAL);
    for (int i = 0; i < n; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    int disk[512], nd = 0, gone[2] = {-1, -1};
    for (int i = 0; i < n && gone[1] < 0; i++)
        if (find(i)->dev == GKV_DEV_DISK_TIER)
            gone[gone[0] < 0 ? 0 : 1] = i;
    ck_assert_int_eq(gkv_store_del(&st, name(gone[0]), strlen(name(gone[0]))), 1);
    ck_assert_int_eq(put(gone[1]), 0); /* a new value, on the device: the disk's is old */
    ck_assert_uint_eq(find(gone[1])->dev, 0);
    /* What is on the disk now (the write moved values down, the disk evicted its oldest). */
    disk[nd++] = gone[0];
    disk[nd++] = gone[1];
    for (int i = 0; i < n; i++)
        if (find(i) && find(i)->dev == GKV_DEV_DISK_TIER)
            disk[nd++] = i;
    ck_assert_int_ge(nd, 3);
    restart(true);
    ck_assert_ptr_null(find(disk[0]));
    ck_assert_ptr_null(find(disk[1])); /* the device's value went with the crash */
    for (int k = 2; k < nd; k++) {
        ck_assert_ptr_nonnull(find(disk[k]));
        ck_assert_uint_eq(find(disk[k])->dev, GKV_DEV_DISK_TIER);
    }
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].keys, (uint64_t)nd - 2);
    ck_assert_uint_eq(st.stats.disk_reloaded, (uint64_t)nd - 2);
    for (int k = 2; k < nd; k++)
        read_back(disk[k]);
    for (int i = 0; i < n; i++) /* nothing else came back */
        ck_assert(!find(i) || in_list(disk + 2, nd - 2, i));
    /* Again: what was read back (moved up, its record retired) is gone with this crash too;
     * nothing comes back twice. */
    restart(true);
    for (int i = 0; i < n; i++)
        ck_assert(!find(i) || find(i)->dev == GKV_DEV_DISK_TIER);
}
END_TEST

/* --tier-disk-reload no: the file left behind is removed, nothing comes back. */
START_TEST(without_reload_the_disk_starts_empty)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER + DISK) / VAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(i), 0);
    restart(false);
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].keys, 0);
    for (int i = 0; i < n; i++)
        ck_assert_ptr_null(find(i));
}
END_TEST

/* A record is trusted only with its MAC under the file's own key: one whose key was altered,
 * and one made up and written into the file, are not reloaded; the others are. */
START_TEST(a_record_altered_or_made_up_is_never_reloaded)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER + DISK) / VAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(i), 0);
    int d = 0, nd = 0;
    while (find(d)->dev != GKV_DEV_DISK_TIER)
        d++;
    for (int i = 0; i < n; i++)
        nd += find(i)->dev == GKV_DEV_DISK_TIER;
    char path[128];
    snprintf(path, sizeof(path), "%s/gpukv-tier-%d.bin", disk_dir, (int)getpid());
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    /* The key after the value: its first byte changed. */
    uint64_t at = find(d)->mem.v + VAL;
    uint8_t x;
    ck_assert_int_eq(pread(fd, &x, 1, (off_t)at), 1);
    x ^= 1;
    ck_assert_int_eq(pwrite(fd, &x, 1, (off_t)at), 1);
    /* A record made up past the end: a header as the daemon writes it, with any MAC. */
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    uint64_t end = ((uint64_t)sb.st_size + 4095) & ~4095ull; /* records start on a block */
    uint8_t rec[128] = {0};
    memcpy(rec, "GKV2", 4);
    rec[4] = 1;           /* live */
    rec[8] = 8;           /* 8 bytes of value */
    rec[20] = 3;          /* a 3-byte key */
    rec[32] = 0xff;       /* a high sequence */
    memset(rec + 48, 0x5a, 8);
    memcpy(rec + 64, "12345678new", 11);
    ck_assert_int_eq(pwrite(fd, rec, sizeof(rec), (off_t)end), (ssize_t)sizeof(rec));
    close(fd);
    restart(true);
    ck_assert_ptr_null(find(d));
    ck_assert_ptr_null(gkv_store_find(&st, "new", 3));
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].keys, (uint64_t)nd - 1);
}
END_TEST

START_TEST(a_damaged_disk_copy_is_dropped_loudly_never_served)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    for (int i = 0; i < 250; i++)
        ck_assert_int_eq(put(i), 0);
    int d = 0;
    while (!find(d) || find(d)->dev != GKV_DEV_DISK_TIER)
        d++;
    /* Damage one byte of its record in the file. */
    char path[128];
    snprintf(path, sizeof(path), "%s/gpukv-tier-%d.bin", disk_dir, (int)getpid());
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t x = 0;
    ck_assert_int_eq(pread(fd, &x, 1, (off_t)(find(d)->mem.v + 100)), 1);
    x ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &x, 1, (off_t)(find(d)->mem.v + 100)), 1);
    close(fd);
    int rc;
    const char *k = name(d);
    ck_assert_ptr_null(gkv_store_get_here(&st, k, strlen(k), &rc));
    ck_assert_int_eq(rc, GKV_ENOTFOUND);
    ck_assert_ptr_null(find(d));
    ck_assert_uint_eq(st.stats.tier_dropped, 1);
    ck_assert_uint_eq(gkv_backend_disk_corrupt(disk_be), 1);
    for (int i = 0; i < 250; i++) /* the others still read back */
        if (i != d && find(i))
            read_back(i);
}
END_TEST

/* The tier file's descriptors (buffered and O_DIRECT) swapped for read-only ones of the same
 * file: every write to the disk fails, as on a full or broken disk. */
static void disk_refuses_writes(void)
{
    char path[128], link[256], want[PATH_MAX];
    snprintf(path, sizeof(path), "%s/gpukv-tier-%d.bin", disk_dir, (int)getpid());
    ck_assert_ptr_nonnull(realpath(path, want));
    int found = 0;
    for (int fd = 3; fd < 1024; fd++) {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        char got[PATH_MAX];
        ssize_t n = readlink(link, got, sizeof(got) - 1);
        if (n <= 0)
            continue;
        got[n] = 0;
        if (strcmp(got, want))
            continue;
        int ro = open(path, O_RDONLY);
        ck_assert_int_ge(ro, 0);
        ck_assert_int_eq(dup2(ro, fd), fd);
        close(ro);
        found++;
    }
    ck_assert_msg(found, "the tier file is not open");
}

START_TEST(a_disk_that_refuses_writes_loses_nothing_served)
{
    for (int i = 0; i < 100; i++) /* some values on the disk already */
        ck_assert_int_eq(put(i), 0);
    ck_assert_int_eq(on_disk(0, 100), 0);
    for (int i = 100; i < 200; i++)
        ck_assert_int_eq(put(i), 0);
    int before = on_disk(0, 200);
    ck_assert_int_gt(before, 0);
    disk_refuses_writes();
    int i = 200, rc = 0;
    while (i < 500 && (rc = put(i)) == 0) /* noeviction: nothing more can go down: refused */
        i++;
    ck_assert_int_eq(rc, GKV_EOOM);
    ck_assert_uint_ge(gkv_backend_disk_errors(disk_be), 1);
    ck_assert_uint_eq(st.stats.evicted, 0);
    ck_assert_int_eq(on_disk(0, i), before);
    /* What is on the GPU and in the host tier reads back; what is on the disk needs the disk to
     * take another value to come up (a swap): OOM, the value staying, never wrong bytes. */
    for (int k = 0; k < i; k++)
        if (find(k)->dev != GKV_DEV_DISK_TIER)
            read_back(k);
}
END_TEST

/* A move to the disk whose write runs off the loop (the demoter's): the record is written
 * pending and made live only as it takes the key, so a crash before that reloads nothing; an
 * overwrite meanwhile wins; one that took the key comes back after a crash. */
/* The i of e's key "k<i>". */
static int index_of(const gkv_entry_t *e)
{
    size_t kl;
    const uint8_t *key = gkv_store_key(&st, e, &kl);
    char buf[32];
    snprintf(buf, sizeof(buf), "%.*s", (int)kl, (const char *)key);
    return atoi(buf + 1);
}

START_TEST(a_move_to_the_disk_in_two_steps_is_live_only_once_linked)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER) / VAL); /* GPU and host tier full, the disk empty */
    for (int i = 0; i < n; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    ck_assert_int_eq(on_disk(0, n), 0);
    gkv_entry_t *e, *t;
    gkv_disk_write_t *w;
    /* A GPU value finds the tier full: the disk is asked first. */
    bool full = false;
    ck_assert(!gkv_store_demote_begin(&st, 0, &e, &t, &full));
    ck_assert(full);
    /* Taken: on the disk, bit-exact, and back after a crash. */
    ck_assert(gkv_store_disk_move_begin(&st, true, &e, &t, &w));
    ck_assert_uint_eq(e->dev, GKV_DEV_HOST_TIER);
    int taken = index_of(e);
    ck_assert_int_eq(gkv_backend_disk_write_run(w), 0);
    ck_assert(gkv_store_disk_move_end(&st, e, t, w, 0, 10));
    ck_assert_uint_eq(find(taken)->dev, GKV_DEV_DISK_TIER);
    ck_assert_uint_eq(st.stats.down_disk_bytes, VAL);
    /* Overwritten meanwhile: the overwrite wins. */
    ck_assert(gkv_store_disk_move_begin(&st, true, &e, &t, &w));
    int changed = index_of(e);
    ck_assert_int_eq(gkv_backend_disk_write_run(w), 0);
    ck_assert_int_eq(put(changed), 0);
    ck_assert(!gkv_store_disk_move_end(&st, e, t, w, 0, 10));
    ck_assert_uint_ne(find(changed)->dev, GKV_DEV_DISK_TIER);
    /* Written, never linked (the demoter stopped): the record stays pending. */
    ck_assert(gkv_store_disk_move_begin(&st, true, &e, &t, &w));
    int pending = index_of(e);
    ck_assert_int_eq(gkv_backend_disk_write_run(w), 0);
    ck_assert(!gkv_store_disk_move_end(&st, e, t, w, -1, 10));
    ck_assert_uint_eq(find(pending)->dev, GKV_DEV_HOST_TIER);
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].keys, 1);
    restart(true); /* a crash: only the disk's live record comes back */
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].keys, 1);
    ck_assert_ptr_nonnull(find(taken));
    ck_assert_ptr_null(find(pending));
    ck_assert_ptr_null(find(changed));
    read_back(taken);
}
END_TEST

/* The scan at start skips the file's holes (never written) and finds a record past one: a live
 * record copied further into the file, its first place retired, comes back from there. */
START_TEST(a_record_past_a_hole_in_the_file_comes_back)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER) / VAL) + 4; /* four on the disk */
    for (int i = 0; i < n; i++) {
        st.now_ms = 1000 + (uint64_t)i;
        ck_assert_int_eq(put(i), 0);
    }
    ck_assert_int_eq(on_disk(0, n), 4);
    int d = 0;
    while (find(d)->dev != GKV_DEV_DISK_TIER)
        d++;
    uint64_t at = find(d)->mem.v - 64, far = 6u << 20; /* its record's start; past a hole */
    char path[128];
    snprintf(path, sizeof(path), "%s/gpukv-tier-%d.bin", disk_dir, (int)getpid());
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    enum { TOTAL = (64 + VAL + 32 + 4095) / 4096 * 4096 }; /* header, value, key, metadata */
    static uint8_t rec[TOTAL];
    /* The file's last record may end short of its padding (written buffered). */
    ssize_t got = pread(fd, rec, sizeof(rec), (off_t)at);
    ck_assert_int_ge(got, 64 + VAL);
    ck_assert_int_eq(pwrite(fd, rec, (size_t)got, (off_t)far), got);
    uint8_t retired[4] = {2, 0, 0, 0};
    ck_assert_int_eq(pwrite(fd, retired, 4, (off_t)at + 4), 4);
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    ck_assert_int_lt((uint64_t)sb.st_blocks * 512, (uint64_t)sb.st_size); /* a hole */
    close(fd);
    restart(true);
    ck_assert_uint_eq(st.dev[GKV_DEV_DISK_TIER].keys, 4);
    ck_assert_ptr_nonnull(find(d));
    read_back(d);
}
END_TEST

/* With O_DIRECT the disk's values stay out of the page cache (the host tier is the cache);
 * through the page cache they are in it after their writes. */
START_TEST(o_direct_keeps_the_values_out_of_the_page_cache)
{
    if (disk_direct && !gkv_backend_disk_direct(disk_be)) {
        fprintf(stderr, "skipped: /tmp does not take O_DIRECT\n");
        return;
    }
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    int n = (int)((LIMIT + TIER + DISK) / VAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(i), 0);
    ck_assert_int_ge(on_disk(0, n), (int)(DISK / VAL) / 2);
    char path[128];
    snprintf(path, sizeof(path), "%s/gpukv-tier-%d.bin", disk_dir, (int)getpid());
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    size_t len = (size_t)sb.st_size, page = (size_t)sysconf(_SC_PAGESIZE);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(map, MAP_FAILED);
    size_t pages = (len + page - 1) / page, cached = 0;
    unsigned char *in = malloc(pages);
    ck_assert_int_eq(mincore(map, len, in), 0);
    for (size_t i = 4096 / page; i < pages; i++) /* past the superblock */
        cached += in[i] & 1;
    free(in);
    munmap(map, len);
    close(fd);
    if (disk_direct)
        ck_assert_uint_eq(cached, 0);
    else
        ck_assert_uint_ge(cached, (DISK / 2) / page);
}
END_TEST

/* Values of many sizes, up to more pieces than an O_DIRECT copy keeps in flight and more bytes
 * than its buffers hold, written and read back whole, on the loop's copier and on copiers of
 * their own (the two-step copies); one damaged byte deep in a large value is caught. */
START_TEST(values_of_any_size_cross_the_copy_pieces_whole)
{
    char dir[64], why[256];
    snprintf(dir, sizeof(dir), "/tmp/gkv-pieces-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    gkv_backend_t *b;
    ck_assert_int_eq(gkv_backend_disk_open(dir, 64u << 20, false, disk_io, &b, why, sizeof(why)),
                     0);
    if ((disk_io & GKV_DISK_URING) && !gkv_backend_disk_uring(b))
        fprintf(stderr, "note: no io_uring here (or no O_DIRECT): copies one at a time\n");
    static const uint64_t sizes[] = {1, 4031, 4032, 4033, (1u << 20) - 64, (1u << 20) + 5,
                                     (9u << 20) + 123, 3u << 20};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    gkv_devptr_t p[N];
    uint8_t *src = malloc(10u << 20), *dst = malloc(10u << 20);
    for (size_t i = 0; i < (10u << 20); i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof(key), "v%d", i);
        gkv_backend_disk_label(b, key, (uint32_t)strlen(key), NULL, 0, 0);
        ck_assert_int_eq(b->ops->alloc(b, sizes[i], 0, &p[i]), 0);
        const uint8_t *from = src + i; /* a different start each time */
        if (i % 2) {
            ck_assert_int_eq(b->ops->write_sync(b, p[i], from, sizes[i]), 0);
        } else {
            gkv_disk_write_t *w = gkv_backend_disk_write_begin(b, p[i], from, sizes[i]);
            ck_assert_ptr_nonnull(w);
            int rc = gkv_backend_disk_write_run(w);
            gkv_backend_disk_write_end(b, w, rc);
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(gkv_backend_disk_make_live(b, p[i]), 0);
        }
    }
    for (int i = 0; i < N; i++) {
        memset(dst, 0xa5, sizes[i]);
        if (i % 2) {
            gkv_disk_read_t *r = gkv_backend_disk_read_begin(b, p[i], dst, sizes[i]);
            ck_assert_ptr_nonnull(r);
            ck_assert_int_eq(gkv_backend_disk_read_end(b, r, gkv_backend_disk_read_run(r)), 0);
        } else {
            ck_assert_int_eq(gkv_backend_disk_read_value(b, dst, p[i], sizes[i]), 0);
        }
        ck_assert_msg(!memcmp(dst, src + i, sizes[i]), "value %d (%llu bytes) differs", i,
                      (unsigned long long)sizes[i]);
    }
    /* One byte of the 9 MiB value, in its ninth piece, flipped in the file. */
    char path[128];
    snprintf(path, sizeof(path), "%s/gpukv-tier-%d.bin", dir, (int)getpid());
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t x = 0;
    off_t at = (off_t)(p[6].v + (8u << 20) + 77);
    ck_assert_int_eq(pread(fd, &x, 1, at), 1);
    x ^= 0x08;
    ck_assert_int_eq(pwrite(fd, &x, 1, at), 1);
    close(fd);
    ck_assert_int_eq(gkv_backend_disk_read_value(b, dst, p[6], sizes[6]), GKV_EIO);
    ck_assert_uint_eq(gkv_backend_disk_corrupt(b), 1);
    ck_assert_int_eq(gkv_backend_disk_read_value(b, dst, p[7], sizes[7]), 0); /* others fine */
    ck_assert(!memcmp(dst, src + 7, sizes[7]));
    free(src);
    free(dst);
    gkv_backend_disk_discard(b);
    b->ops->close(b);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("tier");
    TCase *tc = tcase_create("host tier");
    tcase_add_checked_fixture(tc, tier_setup, tier_teardown);
    tcase_add_test(tc, values_leaving_the_device_go_to_the_tier_and_come_back_bit_exact);
    tcase_add_test(tc, a_moved_value_keeps_its_version);
    tcase_add_test(tc, a_full_tier_swaps_rather_than_evicts);
    tcase_add_test(tc, the_least_recently_used_goes_down_first);
    tcase_add_test(tc, a_held_value_is_never_moved);
    tcase_add_test(tc, the_last_tier_evicts_under_an_evicting_policy);
    tcase_add_test(tc, noeviction_moves_down_then_refuses_and_loses_nothing);
    tcase_add_test(tc, overwrite_and_delete_of_a_value_in_the_tier_free_its_bytes);
    tcase_add_test(tc, deadlines_move_with_the_value);
    tcase_add_test(tc, a_value_larger_than_the_tier_is_evicted_or_refused_as_without_one);
    tcase_add_test(tc, a_second_tier_or_a_bad_one_is_refused);
    tcase_add_test(tc, a_move_in_two_steps_loses_to_a_change_meanwhile);
    tcase_add_test(tc, a_move_up_in_two_steps_needs_room_and_loses_to_a_change);
    suite_add_tcase(s, tc);
    for (int mode = 2; mode >= 0; mode--) {
        TCase *td = tcase_create(mode == 2   ? "disk tier"
                                 : mode == 1 ? "disk tier, one copy at a time"
                                             : "disk tier, buffered");
        tcase_add_checked_fixture(td, mode == 2 ? uring_setup : mode ? direct_setup : buffered_setup,
                                  disk_teardown);
        tcase_add_test(td, values_of_any_size_cross_the_copy_pieces_whole);
        tcase_add_test(td, values_go_down_to_the_disk_and_come_back_bit_exact);
        tcase_add_test(td, a_read_for_the_socket_stops_at_the_host_tier_unless_asked);
        tcase_add_test(td, a_damaged_disk_copy_is_dropped_loudly_never_served);
        tcase_add_test(td, the_disk_comes_back_after_a_crash_without_what_left_it);
        tcase_add_test(td, without_reload_the_disk_starts_empty);
        tcase_add_test(td, a_record_altered_or_made_up_is_never_reloaded);
        tcase_add_test(td, a_disk_that_refuses_writes_loses_nothing_served);
        tcase_add_test(td, o_direct_keeps_the_values_out_of_the_page_cache);
        tcase_add_test(td, a_move_to_the_disk_in_two_steps_is_live_only_once_linked);
        tcase_add_test(td, a_record_past_a_hole_in_the_file_comes_back);
        suite_add_tcase(s, td);
    }
    TCase *tl = tcase_create("a tier locked for the GPUs");
    tcase_add_checked_fixture(tl, locking_setup, locking_teardown);
    tcase_add_test(tl, the_tier_is_locked_by_a_thread_and_copies_are_timed);
    tcase_add_test(tl, a_store_that_ends_at_once_stops_the_locking);
    suite_add_tcase(s, tl);
    return s;
}
