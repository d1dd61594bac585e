/* test_journal.c: the index log (journal.h): the last PUT of each key survives DEL and FLUSH in
 * replay; bytes past the committed length (a record cut short by a SIGKILL) are never read; a
 * damaged record ends the replay there, what came before standing; the memfd grows; devices and
 * export data come back; pins hold the committed length back; a store with a journal attached
 * records what it links, swaps in place, deletes, expires and flushes, deadlines included, and
 * holds freed memory back while records wait to commit. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "journal.h"
#define STORE_LIMIT (1u << 20)
#include "store_fixture.h"

static gkv_jdevs_t devs;

/* Replays the journal in fd through fn (the test fails unless the replay returns 0); true when
 * it met a damaged record. */
static bool replay(int fd, int (*fn)(void *arg, const gkv_jrec_t *r), void *arg)
{
    bool bad;
    char why[128];
    ck_assert_int_eq(gkv_journal_replay(fd, &devs, fn, arg, &bad, why, sizeof(why)), 0);
    return bad;
}

typedef struct {
    char keys[64][32];
    uint64_t addr[64];
    int n;
} seen_t;

static int collect(void *arg, const gkv_jrec_t *r)
{
    seen_t *s = arg;
    ck_assert_int_lt(s->n, 64);
    snprintf(s->keys[s->n], sizeof(s->keys[0]), "%.*s", (int)r->klen, (const char *)r->key);
    s->addr[s->n++] = r->addr;
    return 0;
}

static uint64_t addr_of(const seen_t *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->keys[i], key) == 0)
            return s->addr[i];
    return UINT64_MAX;
}

static void put(gkv_journal_t *j, const char *key, uint64_t addr)
{
    gkv_jrec_t r = {.key = (const uint8_t *)key,
                    .klen = (uint32_t)strlen(key),
                    .meta = (const uint8_t *)"m",
                    .meta_len = 1,
                    .size = 10,
                    .addr = addr};
    ck_assert_int_eq(gkv_journal_put(j, &r), 0);
}

START_TEST(the_last_put_of_each_live_key_is_replayed)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    put(j, "a", 1);
    put(j, "b", 2);
    put(j, "a", 3);
    ck_assert_int_eq(gkv_journal_del(j, (const uint8_t *)"b", 1), 0);
    put(j, "c", 4);
    seen_t s = {0};
    ck_assert(!replay(gkv_journal_fd(j), collect, &s));
    ck_assert_int_eq(s.n, 2);
    ck_assert_uint_eq(addr_of(&s, "a"), 3);
    ck_assert_uint_eq(addr_of(&s, "c"), 4);
    ck_assert_int_eq(gkv_journal_flush(j), 0);
    put(j, "d", 5);
    memset(&s, 0, sizeof(s));
    ck_assert(!replay(gkv_journal_fd(j), collect, &s));
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(addr_of(&s, "d"), 5);
    gkv_journal_close(j);
}
END_TEST

START_TEST(bytes_past_the_committed_length_and_damaged_records)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    put(j, "a", 1);
    put(j, "b", 2);
    int fd = gkv_journal_fd(j);
    uint64_t used = gkv_journal_used(j);
    /* A record being written when the process died: past the committed length. */
    uint8_t junk[64];
    memset(junk, 0xab, sizeof(junk));
    ck_assert_int_eq(pwrite(fd, junk, sizeof(junk), (off_t)(64 + used)), (ssize_t)sizeof(junk));
    seen_t s = {0};
    ck_assert(!replay(fd, collect, &s));
    ck_assert_int_eq(s.n, 2);
    /* A flipped byte in the second record: the first stands, the damage is reported. */
    uint8_t b;
    off_t at = (off_t)(64 + used / 2 + 50);
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 1;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    memset(&s, 0, sizeof(s));
    ck_assert(replay(fd, collect, &s));
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(addr_of(&s, "a"), 1);
    gkv_journal_close(j);
}
END_TEST

/* Any one flipped bit in any byte of a record is detected: the replay stops before it. */
START_TEST(every_damaged_byte_of_a_record_is_detected)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    put(j, "a", 1);
    uint64_t first = gkv_journal_used(j);
    put(j, "bb", 2);
    uint64_t used = gkv_journal_used(j);
    int fd = gkv_journal_fd(j);
    for (uint64_t i = first; i < used; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            uint8_t b, d;
            off_t at = (off_t)(64 + i);
            ck_assert_int_eq(pread(fd, &b, 1, at), 1);
            d = b ^ (uint8_t)(1u << bit);
            ck_assert_int_eq(pwrite(fd, &d, 1, at), 1);
            seen_t s = {0};
            ck_assert_msg(replay(fd, collect, &s), "byte %llu bit %u", (unsigned long long)i, bit);
            ck_assert_int_eq(s.n, 1);
            ck_assert_uint_eq(addr_of(&s, "a"), 1);
            ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
        }
    }
    seen_t s = {0};
    ck_assert(!replay(fd, collect, &s));
    ck_assert_int_eq(s.n, 2);
    gkv_journal_close(j);
}
END_TEST

START_TEST(the_journal_grows_past_its_first_size)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    static uint8_t meta[4096];
    char key[32];
    for (int i = 0; i < 10000; i++) { /* ~41 MB */
        snprintf(key, sizeof(key), "k%d", i % 50);
        gkv_jrec_t r = {.key = (const uint8_t *)key,
                        .klen = (uint32_t)strlen(key),
                        .meta = meta,
                        .meta_len = sizeof(meta),
                        .size = 1,
                        .addr = (uint64_t)i};
        ck_assert_int_eq(gkv_journal_put(j, &r), 0);
    }
    ck_assert_uint_gt(gkv_journal_used(j), 32u << 20);
    seen_t s = {0};
    ck_assert(!replay(gkv_journal_fd(j), collect, &s));
    ck_assert_int_eq(s.n, 50);
    ck_assert_uint_eq(addr_of(&s, "k7"), 9957);
    gkv_journal_close(j);
}
END_TEST

static gkv_entry_t *stored(const char *key, const char *value)
{
    gkv_entry_t *e;
    size_t n = strlen(value);
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, key, strlen(key), n, NULL, 0, 0, &e), 0);
    memcpy(be->ops->host_view(be, e->mem), value, n);
    ck_assert_int_eq(gkv_store_publish(&st, e, 0, NULL), 0);
    gkv_store_unref(&st, e);
    return gkv_store_find(&st, key, strlen(key));
}

typedef struct {
    int n;
    char key[8][16];
    uint64_t addr[8], expire[8], base[8], base_size[8];
    uint8_t exp[8][64];
    uint32_t exp_len[8];
} recs_t;

static int keep(void *arg, const gkv_jrec_t *r)
{
    recs_t *s = arg;
    ck_assert_int_lt(s->n, 8);
    snprintf(s->key[s->n], sizeof(s->key[0]), "%.*s", (int)r->klen, (const char *)r->key);
    s->addr[s->n] = r->addr;
    s->base[s->n] = r->base;
    s->base_size[s->n] = r->base_size;
    s->exp_len[s->n] = r->exp_len;
    memcpy(s->exp[s->n], r->exp, r->exp_len);
    s->expire[s->n++] = r->expire_unix_ms;
    return 0;
}

static int find(const recs_t *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->key[i], key) == 0)
            return i;
    return -1;
}

START_TEST(a_store_journals_what_it_links_and_unlinks)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    st.journal = j;
    st.now_ms = 1000;
    stored("a", "one");
    stored("b", "two");
    gkv_entry_t *a = stored("a", "three"); /* an overwrite: swapped in place or linked anew */
    ck_assert_int_eq(gkv_store_del(&st, "b", 1), 1);
    ck_assert_int_eq(gkv_store_expire(&st, "a", 1, 60000), 1);
    stored("c", "four");
    recs_t s = {0};
    ck_assert(!replay(gkv_journal_fd(j), keep, &s));
    ck_assert_int_eq(s.n, 2);
    int ia = find(&s, "a");
    ck_assert_int_ge(ia, 0);
    ck_assert_uint_eq(s.addr[ia], a->mem.v); /* where "three" is now */
    ck_assert_uint_gt(s.expire[ia], 0);      /* the deadline, as wall-clock time */
    ck_assert_int_ge(find(&s, "c"), 0);
    ck_assert_int_eq(gkv_store_persist(&st, "a", 1), 1);
    gkv_store_flush(&st);
    stored("d", "five");
    memset(&s, 0, sizeof(s));
    ck_assert(!replay(gkv_journal_fd(j), keep, &s));
    ck_assert_int_eq(s.n, 1);
    ck_assert_int_ge(find(&s, "d"), 0);
    ck_assert_uint_eq(s.expire[0], 0);
    st.journal = NULL; /* detached before the fixture's fini */
    gkv_store_flush(&st);
    gkv_journal_close(j);
}
END_TEST

START_TEST(devices_and_export_data_come_back)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    ck_assert_int_eq(gkv_journal_device(j, 1, "GPU-1234"), 0);
    ck_assert_int_eq(gkv_journal_device(j, 0, ""), 0);
    ck_assert_int_eq(gkv_journal_device(j, GKV_MAX_DEVICES, "x"), GKV_EINVAL);
    uint8_t exp[64];
    for (int i = 0; i < 64; i++)
        exp[i] = (uint8_t)(i * 3);
    gkv_jrec_t r = {.key = (const uint8_t *)"k",
                    .klen = 1,
                    .size = 100,
                    .addr = 4096 + 64,
                    .dev = 1,
                    .base = 4096,
                    .base_size = 1 << 20,
                    .exp = exp,
                    .exp_len = 64};
    ck_assert_int_eq(gkv_journal_put(j, &r), 0);
    r.exp_len = 65;
    ck_assert_int_eq(gkv_journal_put(j, &r), GKV_EINVAL);
    recs_t s = {0};
    ck_assert(!replay(gkv_journal_fd(j), keep, &s));
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(devs.n, 2);
    ck_assert_str_eq(devs.uuid[1], "GPU-1234");
    ck_assert_str_eq(devs.uuid[0], "");
    ck_assert_uint_eq(s.base[0], 4096);
    ck_assert_uint_eq(s.base_size[0], 1 << 20);
    ck_assert_uint_eq(s.exp_len[0], 64);
    ck_assert_mem_eq(s.exp[0], exp, 64);
    gkv_journal_close(j);
}
END_TEST

START_TEST(pins_hold_the_committed_length_back)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    put(j, "a", 1);
    uint64_t one = gkv_journal_used(j);
    ck_assert_uint_eq(gkv_journal_committed(j), one);
    ck_assert(gkv_journal_idle(j));
    uint64_t p1 = gkv_journal_pin(j); /* a batch takes its first write */
    put(j, "b", 2);                   /* that SET's record: its bytes are not in place yet */
    uint64_t p2 = gkv_journal_pin(j); /* the next batch */
    put(j, "c", 3);
    ck_assert_uint_eq(gkv_journal_committed(j), one);
    ck_assert(!gkv_journal_idle(j));
    seen_t s = {0};
    ck_assert(!replay(gkv_journal_fd(j), collect, &s));
    ck_assert_int_eq(s.n, 1); /* a crash now: only what is in place */
    gkv_journal_unpin(j, p1);
    ck_assert_uint_eq(gkv_journal_committed(j), p2); /* b commits, c waits for the second */
    gkv_journal_unpin(j, p2);
    ck_assert_uint_eq(gkv_journal_committed(j), gkv_journal_used(j));
    ck_assert(gkv_journal_idle(j));
    memset(&s, 0, sizeof(s));
    ck_assert(!replay(gkv_journal_fd(j), collect, &s));
    ck_assert_int_eq(s.n, 3);
    gkv_journal_close(j);
}
END_TEST

START_TEST(freed_memory_waits_for_the_record_that_frees_it)
{
    gkv_journal_t *j;
    ck_assert_int_eq(gkv_journal_create(&j), 0);
    st.journal = j;
    stored("a", "one");
    uint64_t used = st.used;
    uint64_t pin = gkv_journal_pin(j); /* a batch in flight */
    ck_assert_int_eq(gkv_store_del(&st, "a", 1), 1);
    /* The DEL is not committed: a successor would still find "a" at its address, so the
     * memory stays taken. */
    ck_assert_uint_eq(st.used, used);
    ck_assert_uint_gt(st.limbo_bytes, 0);
    gkv_store_journal_committed(&st);
    ck_assert_uint_eq(st.used, used); /* nothing committed yet: nothing freed */
    gkv_journal_unpin(j, pin);
    gkv_store_journal_committed(&st);
    ck_assert_uint_eq(st.used, 0);
    ck_assert_uint_eq(st.limbo_bytes, 0);
    /* With nothing waiting, memory is freed at once. */
    stored("b", "two");
    ck_assert_int_eq(gkv_store_del(&st, "b", 1), 1);
    ck_assert_uint_eq(st.used, 0);
    st.journal = NULL;
    gkv_journal_close(j);
}
END_TEST

/* A successor's copy out of adopted memory stays inside it (the host backend: the arena). */
START_TEST(adopted_copies_stay_inside_the_memory)
{
    gkv_entry_t *a = stored("a", "adopt me");
    int fd;
    char why[128];
    ck_assert_int_eq(be->ops->share(be, &fd, why, sizeof(why)), 0);
    void *src;
    ck_assert_int_eq(be->ops->adopt_open(be, fd, &src, why, sizeof(why)), 0);
    gkv_entry_t *b;
    ck_assert_int_eq(gkv_store_entry_new(&st, 0, "b", 1, 8, NULL, 0, 0, &b), 0);
    uint64_t base, size;
    uint8_t exp[64];
    size_t len;
    ck_assert_int_eq(be->ops->origin(be, a->mem, 8, &base, &size, exp, sizeof(exp), &len), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(be->ops->adopt_copy(be, src, base, size, exp, len, a->mem.v, 8, b->mem), 0);
    ck_assert_mem_eq(be->ops->host_view(be, b->mem), "adopt me", 8);
    /* Past the end, straddling it, or with export data the host backend never makes: refused. */
    ck_assert_int_eq(be->ops->adopt_copy(be, src, base, size, exp, len, size, 8, b->mem),
                     GKV_EINVAL);
    ck_assert_int_eq(be->ops->adopt_copy(be, src, base, size, exp, len, size - 4, 8, b->mem),
                     GKV_EINVAL);
    ck_assert_int_eq(be->ops->adopt_copy(be, src, base, size, exp, 64, a->mem.v, 8, b->mem),
                     GKV_EINVAL);
    ck_assert_int_eq(be->ops->adopt_close(be, src), 0);
    close(fd);
    gkv_store_unref(&st, b);
    gkv_store_flush(&st);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("journal");
    TCase *t = tcase_create("log");
    tcase_add_test(t, the_last_put_of_each_live_key_is_replayed);
    tcase_add_test(t, bytes_past_the_committed_length_and_damaged_records);
    tcase_add_test(t, every_damaged_byte_of_a_record_is_detected);
    tcase_add_test(t, the_journal_grows_past_its_first_size);
    tcase_add_test(t, devices_and_export_data_come_back);
    tcase_add_test(t, pins_hold_the_committed_length_back);
    suite_add_tcase(s, t);
    t = tcase_create("store");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, a_store_journals_what_it_links_and_unlinks);
    tcase_add_test(t, freed_memory_waits_for_the_record_that_frees_it);
    tcase_add_test(t, adopted_copies_stay_inside_the_memory);
    suite_add_tcase(s, t);
    return s;
}
