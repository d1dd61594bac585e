/* test_slots.c: a transfer arena's slots (server/plane/slots.h): takes within the fair share,
 * waits bounded by the timeout, and retired slots never handed out again. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "slots.h"

static uint8_t arena[16 * 4096];

START_TEST(a_take_gets_what_is_free_up_to_its_share)
{
    gkv_slots_t s;
    ck_assert_int_eq(gkv_slots_init(&s, arena, sizeof(arena) + 100, 4096), 0);
    ck_assert_uint_eq(s.nslots, 16); /* the partial slot at the end is not used */
    uint32_t a[16], b[16];
    ck_assert_uint_eq(gkv_slots_take(&s, 8, a, 10), 8);
    for (uint32_t i = 0; i < 8; i++)
        ck_assert_ptr_eq(gkv_slot_addr(&s, a[i]), arena + (size_t)a[i] * 4096);
    /* A second reader while the first holds 8: its share is 16 / 2. */
    ck_assert_uint_eq(gkv_slots_take(&s, 16, b, 10), 8);
    ck_assert_uint_eq(s.taken, 16);
    gkv_slots_give(&s, a, 8, false);
    gkv_slots_give(&s, b, 8, false);
    ck_assert_uint_eq(s.taken, 0);
    ck_assert_uint_eq(s.users, 0);
    gkv_slots_fini(&s);
}
END_TEST

START_TEST(a_take_with_nothing_free_waits_no_longer_than_its_timeout)
{
    gkv_slots_t s;
    ck_assert_int_eq(gkv_slots_init(&s, arena, sizeof(arena), 4096), 0);
    uint32_t a[16], b[1];
    ck_assert_uint_eq(gkv_slots_take(&s, 16, a, 10), 16);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_uint_eq(gkv_slots_take(&s, 1, b, 50), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert(waited >= 0.04 && waited < 5);
    ck_assert_uint_eq(s.waits, 1);
    gkv_slots_give(&s, a, 16, false);
    gkv_slots_fini(&s);
}
END_TEST

typedef struct {
    gkv_slots_t *s;
    uint32_t got;
} waiter_t;

static void *wait_one(void *arg)
{
    waiter_t *w = arg;
    uint32_t slot;
    w->got = gkv_slots_take(w->s, 1, &slot, 5000);
    if (w->got)
        gkv_slots_give(w->s, &slot, 1, false);
    return NULL;
}

START_TEST(a_slot_given_back_wakes_a_waiting_take)
{
    gkv_slots_t s;
    ck_assert_int_eq(gkv_slots_init(&s, arena, 2 * 4096, 4096), 0);
    uint32_t a[2];
    ck_assert_uint_eq(gkv_slots_take(&s, 2, a, 10), 2);
    waiter_t w = {&s, 0};
    pthread_t t;
    pthread_create(&t, NULL, wait_one, &w);
    struct timespec pause = {0, 20 * 1000000L};
    nanosleep(&pause, NULL);
    gkv_slots_give(&s, a, 2, false);
    pthread_join(t, NULL);
    ck_assert_uint_eq(w.got, 1);
    gkv_slots_fini(&s);
}
END_TEST

START_TEST(retired_slots_are_never_handed_out_again)
{
    gkv_slots_t s;
    ck_assert_int_eq(gkv_slots_init(&s, arena, 4 * 4096, 4096), 0);
    uint32_t a[4], b[4];
    ck_assert_uint_eq(gkv_slots_take(&s, 2, a, 10), 2);
    gkv_slots_give(&s, a, 2, true);
    ck_assert_uint_eq(s.retired, 2);
    ck_assert_uint_eq(gkv_slots_take(&s, 4, b, 10), 2);
    for (uint32_t i = 0; i < 2; i++)
        ck_assert(b[i] != a[0] && b[i] != a[1]);
    /* Giving back a slot not taken (or twice) changes nothing. */
    gkv_slots_give(&s, b, 2, false);
    gkv_slots_give(&s, b, 2, false);
    ck_assert_uint_eq(s.taken, 0);
    ck_assert_uint_eq(s.retired, 2);
    gkv_slots_fini(&s);
}
END_TEST

Suite *make_suite(void);

Suite *make_suite(void)
{
    Suite *s = suite_create("slots");
    TCase *tc = tcase_create("slots");
    tcase_add_test(tc, a_take_gets_what_is_free_up_to_its_share);
    tcase_add_test(tc, a_take_with_nothing_free_waits_no_longer_than_its_timeout);
    tcase_add_test(tc, a_slot_given_back_wakes_a_waiting_take);
    tcase_add_test(tc, retired_slots_are_never_handed_out_again);
    suite_add_tcase(s, tc);
    return s;
}
