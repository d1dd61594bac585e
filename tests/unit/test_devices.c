/* test_devices.c: one store over two devices (two host backends, each standing for a GPU):
 * per-device accounting, OOM on one device while the other has room, the default placement,
 * overwrites that move a key's value to another device, and eviction that frees room only on
 * the device that needs it. */
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "store.h"

#define LIMIT0 (64u << 10)
#define LIMIT1 (128u << 10)

static gkv_backend_t *be[2];
static gkv_store_t st;

static void setup(void)
{
    char why[256];
    for (int i = 0; i < 2; i++) {
        /* arenas with room to spare: the store's limits decide */
        gkv_backend_config_t bc = {GKV_BACKEND_HOST, i, 2 * (i ? LIMIT1 : LIMIT0)};
        ck_assert_int_eq(gkv_backend_open(&bc, &be[i], why, sizeof(why)), 0);
    }
    ck_assert_int_eq(gkv_store_init(&st, be[0], LIMIT0), 0);
    ck_assert_int_eq(gkv_store_add_device(&st, be[1], LIMIT1), 1);
}

static void teardown(void)
{
    gkv_store_fini(&st);
    ck_assert_uint_eq(st.used, 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(st.dev[i].used, 0);
        be[i]->ops->close(be[i]);
    }
}

/* Publishes key with size bytes of byte fill on dev; returns what entry_new returned. */
static int put(unsigned dev, const char *key, uint64_t size, int fill)
{
    gkv_entry_t *e;
    int rc = gkv_store_entry_new(&st, dev, key, strlen(key), size, NULL, 0, 0, &e);
    if (rc)
        return rc;
    ck_assert_uint_eq(e->dev, dev);
    memset(be[dev]->ops->host_view(be[dev], e->mem), fill, size);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    gkv_store_unref(&st, e);
    return 0;
}

/* True when key's value is on dev and every byte is fill. */
static bool holds(const char *key, unsigned dev, uint64_t size, int fill)
{
    gkv_entry_t *e = gkv_store_find(&st, key, strlen(key));
    if (!e || e->dev != dev || e->size != size)
        return false;
    const uint8_t *p = gkv_store_be(&st, e)->ops->host_view(gkv_store_be(&st, e), e->mem);
    for (uint64_t i = 0; i < size; i++)
        if (p[i] != fill)
            return false;
    return true;
}

START_TEST(each_device_counts_its_own_values)
{
    ck_assert_uint_eq(st.ndev, 2);
    ck_assert_uint_eq(st.limit, LIMIT0 + LIMIT1);
    ck_assert_int_eq(put(0, "a", 1000, 1), 0);
    ck_assert_int_eq(put(1, "b", 3000, 2), 0);
    ck_assert_int_eq(put(1, "c", 5000, 3), 0);
    ck_assert_uint_eq(st.dev[0].used, 1000);
    ck_assert_uint_eq(st.dev[1].used, 8000);
    ck_assert_uint_eq(st.used, 9000);
    ck_assert_uint_eq(st.dev[0].keys, 1);
    ck_assert_uint_eq(st.dev[1].keys, 2);
    ck_assert_uint_eq(st.dev[1].linked_bytes, 8000);
    ck_assert_uint_eq(st.linked_bytes, 9000);
    ck_assert(holds("a", 0, 1000, 1) && holds("b", 1, 3000, 2) && holds("c", 1, 5000, 3));
    ck_assert_int_eq(gkv_store_del(&st, "c", 1), 1);
    ck_assert_uint_eq(st.dev[1].used, 3000);
    ck_assert_uint_eq(st.dev[1].keys, 1);
    gkv_store_flush(&st);
    ck_assert_uint_eq(st.dev[0].keys + st.dev[1].keys, 0);
    ck_assert_uint_eq(st.dev[0].linked_bytes + st.dev[1].linked_bytes, 0);
}
END_TEST

START_TEST(a_full_device_is_oom_while_the_other_has_room)
{
    ck_assert_int_eq(put(0, "a", LIMIT0 - 100, 1), 0);
    ck_assert_int_eq(put(0, "b", 200, 2), GKV_EOOM); /* never spills to device 1 */
    ck_assert_uint_eq(st.dev[0].oom_errors, 1);
    ck_assert_uint_eq(st.dev[1].oom_errors, 0);
    ck_assert_uint_eq(st.stats.oom_errors, 1);
    ck_assert_uint_eq(st.dev[1].used, 0);
    ck_assert_int_eq(put(1, "b", 200, 2), 0);
    ck_assert(holds("a", 0, LIMIT0 - 100, 1) && holds("b", 1, 200, 2));
    gkv_store_flush(&st);
}
END_TEST

START_TEST(placement_keeps_a_key_where_it_is_else_takes_the_most_room)
{
    /* New keys: the device with the most room (device 1 has twice device 0's). */
    ck_assert_uint_eq(gkv_store_place(&st, "new", 3, 10), 1);
    ck_assert_int_eq(put(1, "big", LIMIT1 - LIMIT0 + 1000, 1), 0); /* 1 now has less room */
    ck_assert_uint_eq(gkv_store_place(&st, "new", 3, 10), 0);
    /* A key stays on its device while its new value fits there... */
    ck_assert_uint_eq(gkv_store_place(&st, "big", 3, 2000), 1);
    /* ...and goes to the roomiest one when it does not (noeviction). */
    ck_assert_uint_eq(gkv_store_place(&st, "big", 3, LIMIT0 - 10), 0);
    /* With an evicting policy a value up to the device's limit stays. */
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    ck_assert_uint_eq(gkv_store_place(&st, "big", 3, LIMIT1), 1);
    ck_assert_uint_eq(gkv_store_place(&st, "big", 3, LIMIT1 + 1), 0);
    gkv_store_flush(&st);
}
END_TEST

START_TEST(an_overwrite_moves_the_key_to_the_new_values_device)
{
    ck_assert_int_eq(put(0, "k", 4000, 7), 0);
    ck_assert_int_eq(put(1, "k", 6000, 8), 0); /* in place: the old entry takes the new value */
    ck_assert(holds("k", 1, 6000, 8));
    ck_assert_uint_eq(st.dev[0].used, 0); /* the old value went back to device 0 */
    ck_assert_uint_eq(st.dev[1].used, 6000);
    ck_assert_uint_eq(st.dev[0].keys, 0);
    ck_assert_uint_eq(st.dev[1].keys, 1);
    ck_assert_uint_eq(st.dev[0].linked_bytes, 0);
    ck_assert_uint_eq(st.dev[1].linked_bytes, 6000);
    /* Under a reader, the new entry is linked instead; the reader keeps device 1's bytes. */
    gkv_entry_t *reader = gkv_store_find(&st, "k", 1);
    gkv_store_ref(reader);
    ck_assert_int_eq(put(0, "k", 100, 9), 0);
    ck_assert(holds("k", 0, 100, 9));
    ck_assert_uint_eq(reader->dev, 1);
    ck_assert_uint_eq(st.dev[1].keys, 0);
    ck_assert_uint_eq(st.dev[1].used, 6000);
    gkv_store_unref(&st, reader);
    ck_assert_uint_eq(st.dev[1].used, 0);
    gkv_store_flush(&st);
}
END_TEST

START_TEST(eviction_frees_room_only_on_the_device_that_needs_it)
{
    st.policy = GKV_POLICY_ALLKEYS_LRU;
    char key[16];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "d0-%d", i);
        ck_assert_int_eq(put(0, key, LIMIT0 / 8, i), 0);
        snprintf(key, sizeof(key), "d1-%d", i);
        ck_assert_int_eq(put(1, key, LIMIT1 / 16, i), 0);
    }
    ck_assert_uint_eq(st.dev[0].used, LIMIT0);
    ck_assert_int_eq(put(0, "more", LIMIT0 / 4, 42), 0); /* evicts two of device 0's */
    ck_assert_uint_eq(st.stats.evicted, 2);
    ck_assert_uint_eq(st.dev[0].keys, 7);
    ck_assert_uint_eq(st.dev[1].keys, 8); /* device 1 lost nothing */
    ck_assert_uint_eq(st.dev[1].used, LIMIT1 / 2);
    ck_assert(holds("more", 0, LIMIT0 / 4, 42));
    gkv_store_flush(&st);
}
END_TEST

START_TEST(a_store_holds_at_most_the_maximum_of_devices)
{
    for (unsigned i = 2; i < GKV_MAX_DEVICES; i++)
        ck_assert_int_eq(gkv_store_add_device(&st, be[1], 0), (int)i);
    ck_assert_int_eq(gkv_store_add_device(&st, be[1], 0), GKV_EINVAL);
    ck_assert_uint_eq(st.ndev, GKV_MAX_DEVICES);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("devices");
    TCase *t = tcase_create("core");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, each_device_counts_its_own_values);
    tcase_add_test(t, a_full_device_is_oom_while_the_other_has_room);
    tcase_add_test(t, placement_keeps_a_key_where_it_is_else_takes_the_most_room);
    tcase_add_test(t, an_overwrite_moves_the_key_to_the_new_values_device);
    tcase_add_test(t, eviction_frees_room_only_on_the_device_that_needs_it);
    tcase_add_test(t, a_store_holds_at_most_the_maximum_of_devices);
    suite_add_tcase(s, t);
    return s;
}
