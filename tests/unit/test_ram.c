/* test_ram.c: the host memory limit the daemon's defaults start from (common/ram.h): cgroup v2
 * and v1 hierarchies laid out under a temporary root, the lowest limit on the way up wins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "ram.h"

static char root[64];

static void put(const char *rel, const char *text)
{
    char path[256], dir[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(dir, sizeof(dir), "mkdir -p \"$(dirname '%s')\"", path);
    ck_assert_int_eq(system(dir), 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(root, sizeof(root), "/tmp/gkv-ram-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(v2_the_lowest_limit_on_the_way_up)
{
    put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
    put("sys/fs/cgroup/memory.max", "max\n");
    put("sys/fs/cgroup/kubepods/memory.max", "17179869184\n");
    put("sys/fs/cgroup/kubepods/pod1/memory.max", "8589934592\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
    ck_assert_uint_eq(gkv_ram_cgroup_limit(root), 8ull << 30);
}
END_TEST

START_TEST(v2_a_container_sees_its_own_limit_at_the_root)
{
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/memory.max", "8589934592\n");
    ck_assert_uint_eq(gkv_ram_cgroup_limit(root), 8ull << 30);
}
END_TEST

START_TEST(v1_memory_controller)
{
    put("proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "4294967296\n");
    put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
    ck_assert_uint_eq(gkv_ram_cgroup_limit(root), 4ull << 30);
}
END_TEST

START_TEST(no_limit_anywhere_is_zero)
{
    ck_assert_uint_eq(gkv_ram_cgroup_limit(root), 0); /* no proc/self/cgroup */
    put("proc/self/cgroup", "0::/a/b\n");
    ck_assert_uint_eq(gkv_ram_cgroup_limit(root), 0); /* no limit files */
    put("sys/fs/cgroup/a/memory.max", "max\n");
    put("sys/fs/cgroup/a/b/memory.max", "garbage\n");
    ck_assert_uint_eq(gkv_ram_cgroup_limit(root), 0);
}
END_TEST

START_TEST(usable_ram_is_at_most_the_machine_s)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t usable = gkv_ram_usable();
    ck_assert_uint_gt(usable, 0);
    ck_assert_uint_le(usable, (uint64_t)pages * (uint64_t)page);
    uint64_t cg = gkv_ram_cgroup_limit("");
    if (cg)
        ck_assert_uint_le(usable, cg);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("ram");
    TCase *t = tcase_create("cgroups");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, v2_the_lowest_limit_on_the_way_up);
    tcase_add_test(t, v2_a_container_sees_its_own_limit_at_the_root);
    tcase_add_test(t, v1_memory_controller);
    tcase_add_test(t, no_limit_anywhere_is_zero);
    tcase_add_test(t, usable_ram_is_at_most_the_machine_s);
    suite_add_tcase(s, t);
    return s;
}
