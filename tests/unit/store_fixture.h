/* store_fixture.h: what the store's unit suites share: a store of STORE_LIMIT bytes over a host
 * backend, made before each test and checked empty after it. Define STORE_LIMIT first. */
#ifndef GKV_TESTS_STORE_FIXTURE_H
#define GKV_TESTS_STORE_FIXTURE_H

#include <check.h>
#include <gpukv/gpukv.h>

#include "store.h"

static gkv_backend_t *be;
static gkv_store_t st;

static void setup(void)
{
    gkv_backend_config_t bc = {GKV_BACKEND_HOST, 0, STORE_LIMIT};
    char why[256];
    ck_assert_int_eq(gkv_backend_open(&bc, &be, why, sizeof(why)), 0);
    ck_assert_int_eq(gkv_store_init(&st, be, STORE_LIMIT), 0);
}

static void teardown(void)
{
    gkv_store_fini(&st);
    ck_assert_uint_eq(st.used, 0);       /* every test lets go of what it made */
    ck_assert_uint_eq(st.host_bytes, 0); /* and its keys, metadata and deadlines */
    be->ops->close(be);
}

#endif
