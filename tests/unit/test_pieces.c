/* test_pieces.c: a pull's pieces (server/plane/pieces.h): they tile the value in order, none
 * empty or over a chunk; tapered plans start and end with the short pieces; small values and
 * taper 0 or 1 stay uniform. */
#include "check_main.h"
#include "pieces.h"

#define MiB (1ull << 20)

/* Every piece of pc in order: contiguous from 0 to size, each 1..chunk bytes. */
static void tiles(const gkv_pieces_t *pc)
{
    uint64_t at = 0;
    for (uint64_t i = 0; i < pc->n; i++) {
        uint64_t off, len;
        gkv_pieces_at(pc, i, &off, &len);
        ck_assert_uint_eq(off, at);
        ck_assert_uint_gt(len, 0);
        ck_assert_uint_le(len, pc->chunk);
        at += len;
    }
    ck_assert_uint_eq(at, pc->size);
}

static void expect(const gkv_pieces_t *pc, const uint64_t *lens, uint64_t n)
{
    ck_assert_uint_eq(pc->n, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off, len;
        gkv_pieces_at(pc, i, &off, &len);
        ck_assert_msg(len == lens[i], "piece %llu: %llu bytes, not %llu", (unsigned long long)i,
                      (unsigned long long)len, (unsigned long long)lens[i]);
    }
}

START_TEST(a_64_mib_value_in_64_mib_chunks_tapers_to_four_pieces)
{
    gkv_pieces_t pc;
    gkv_pieces_plan(&pc, 64 * MiB, 64 * MiB, 8);
    const uint64_t want[] = {8 * MiB, 24 * MiB, 24 * MiB, 8 * MiB};
    expect(&pc, want, 4);
    tiles(&pc);
}
END_TEST

START_TEST(a_gib_keeps_whole_chunks_between_its_short_ends)
{
    gkv_pieces_t pc;
    gkv_pieces_plan(&pc, 1024 * MiB, 64 * MiB, 8);
    uint64_t want[18];
    want[0] = want[17] = 8 * MiB;
    for (int i = 1; i <= 15; i++)
        want[i] = 64 * MiB;
    want[16] = 48 * MiB;
    expect(&pc, want, 18);
    tiles(&pc);
}
END_TEST

START_TEST(small_values_and_no_taper_stay_uniform)
{
    gkv_pieces_t pc;
    gkv_pieces_plan(&pc, 31 * MiB, 64 * MiB, 8); /* under four end pieces */
    ck_assert_uint_eq(pc.n, 1);
    tiles(&pc);
    gkv_pieces_plan(&pc, 1024 * MiB + 5, 64 * MiB, 0);
    ck_assert_uint_eq(pc.n, 17);
    tiles(&pc);
    gkv_pieces_plan(&pc, 1024 * MiB, 64 * MiB, 1);
    ck_assert_uint_eq(pc.n, 16);
    /* A tapered plan made uniform again. */
    gkv_pieces_plan(&pc, 64 * MiB, 64 * MiB, 8);
    gkv_pieces_uniform(&pc);
    ck_assert_uint_eq(pc.n, 1);
    tiles(&pc);
}
END_TEST

START_TEST(any_size_tiles_in_order)
{
    const uint64_t chunks[] = {4096, 1 * MiB, 4 * MiB, 64 * MiB};
    const unsigned tapers[] = {0, 2, 3, 8, 16};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(*chunks); c++)
        for (size_t t = 0; t < sizeof(tapers) / sizeof(*tapers); t++)
            for (uint64_t size = 1; size < 40 * chunks[c]; size += size / 3 + 4093) {
                gkv_pieces_t pc;
                gkv_pieces_plan(&pc, size, chunks[c], tapers[t]);
                tiles(&pc);
                if (pc.end) {
                    uint64_t off, len;
                    gkv_pieces_at(&pc, 0, &off, &len);
                    ck_assert_uint_eq(len, pc.end);
                    gkv_pieces_at(&pc, pc.n - 1, &off, &len);
                    ck_assert_uint_eq(len, pc.end);
                    ck_assert_uint_ge(pc.n, 4);
                }
            }
}
END_TEST

Suite *make_suite(void);

Suite *make_suite(void)
{
    Suite *s = suite_create("pieces");
    TCase *tc = tcase_create("pieces");
    tcase_add_test(tc, a_64_mib_value_in_64_mib_chunks_tapers_to_four_pieces);
    tcase_add_test(tc, a_gib_keeps_whole_chunks_between_its_short_ends);
    tcase_add_test(tc, small_values_and_no_taper_stay_uniform);
    tcase_add_test(tc, any_size_tiles_in_order);
    suite_add_tcase(s, tc);
    return s;
}
