/* test_size.c: sizes and durations written by people, SipHash's reference vector, and CRC-32C's
 * (snapshots' checksum). */
#include <gpukv/gpukv.h>
#include <string.h>

#include "check_main.h"
#include "crc32c.h"
#include "duration.h"
#include "hash.h"
#include "size.h"

static const struct {
    const char *text;
    uint64_t value;
} good[] = {
    {"0", 0},
    {"17", 17},
    {"1K", 1024},
    {"1k", 1024},
    {"4M", 4u << 20},
    {"4MB", 4u << 20},
    {"4MiB", 4u << 20},
    {"2G", 2ull << 30},
    {"3T", 3ull << 40},
    {"100B", 100},
    {"18446744073709551615", UINT64_MAX},
};

static const char *const bad[] = {"",          "-1", "1.5G", " 1G", "1G ",
                                  "G",         "1X", "1GG",  "1Bx", "99999999999999999999",
                                  "16777216T", "1 G"};

START_TEST(parses_good_sizes)
{
    uint64_t v = 99;
    ck_assert_int_eq(gkv_size_parse(good[_i].text, &v), 0);
    ck_assert_uint_eq(v, good[_i].value);
}
END_TEST

START_TEST(refuses_bad_sizes)
{
    uint64_t v = 99;
    ck_assert_int_eq(gkv_size_parse(bad[_i], &v), GKV_EINVAL);
    ck_assert_uint_eq(v, 99);
}
END_TEST

START_TEST(formats_sizes)
{
    char buf[32];
    gkv_size_format(37, buf, sizeof(buf));
    ck_assert_str_eq(buf, "37B");
    gkv_size_format(3u << 29, buf, sizeof(buf));
    ck_assert_str_eq(buf, "1.5G");
}
END_TEST

static const struct {
    const char *text;
    uint64_t ms;
} good_durations[] = {
    {"0", 0}, {"30", 30000}, {"30s", 30000}, {"250ms", 250}, {"2m", 120000}, {"1h", 3600000},
};

static const char *const bad_durations[] = {"",
                                            "-1",
                                            "1.5s",
                                            " 1s",
                                            "1s ",
                                            "s",
                                            "1x",
                                            "1sec",
                                            "99999999999999999999",
                                            "18446744073709551615h"};

START_TEST(parses_good_durations)
{
    uint64_t v = 99;
    ck_assert_int_eq(gkv_duration_parse(good_durations[_i].text, &v), 0);
    ck_assert_uint_eq(v, good_durations[_i].ms);
}
END_TEST

START_TEST(refuses_bad_durations)
{
    uint64_t v = 99;
    ck_assert_int_eq(gkv_duration_parse(bad_durations[_i], &v), GKV_EINVAL);
    ck_assert_uint_eq(v, 99);
}
END_TEST

START_TEST(siphash_reference_vectors)
{
    /* From the SipHash paper's appendix: key 00..0f, messages 00..(n-1). */
    uint8_t key[16], msg[15];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++)
        msg[i] = (uint8_t)i;
    ck_assert_uint_eq(gkv_siphash(msg, 0, key), 0x726fdb47dd0e0e31ULL);
    ck_assert_uint_eq(gkv_siphash(msg, 15, key), 0xa129ca6149be45e5ULL);
}
END_TEST

/* RFC 3720's check value, whole and continued across every split, and an unaligned 1 MiB run
 * continued at odd offsets gives the same CRC as in one call. */
START_TEST(crc32c_reference_vector_in_any_split)
{
    const char *v = "123456789";
    ck_assert_uint_eq(gkv_crc32c(0, v, 9), 0xe3069283u);
    for (size_t i = 0; i <= 9; i++)
        ck_assert_uint_eq(gkv_crc32c(gkv_crc32c(0, v, i), v + i, 9 - i), 0xe3069283u);
    static uint8_t big[(1u << 20) + 7];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 131u + 7u);
    uint32_t whole = gkv_crc32c(0, big + 3, sizeof(big) - 3), part = 0;
    for (size_t off = 3; off < sizeof(big); off += 4099)
        part = gkv_crc32c(part, big + off, sizeof(big) - off < 4099 ? sizeof(big) - off : 4099);
    ck_assert_uint_eq(part, whole);
    ck_assert_uint_ne(gkv_crc32c(0, "123456788", 9), 0xe3069283u);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("size");
    TCase *t = tcase_create("parse");
    tcase_add_loop_test(t, parses_good_sizes, 0, sizeof(good) / sizeof(good[0]));
    tcase_add_loop_test(t, refuses_bad_sizes, 0, sizeof(bad) / sizeof(bad[0]));
    tcase_add_test(t, formats_sizes);
    tcase_add_loop_test(t, parses_good_durations, 0,
                        sizeof(good_durations) / sizeof(good_durations[0]));
    tcase_add_loop_test(t, refuses_bad_durations, 0,
                        sizeof(bad_durations) / sizeof(bad_durations[0]));
    suite_add_tcase(s, t);
    t = tcase_create("hash");
    tcase_add_test(t, siphash_reference_vectors);
    tcase_add_test(t, crc32c_reference_vector_in_any_split);
    suite_add_tcase(s, t);
    return s;
}
