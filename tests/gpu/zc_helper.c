/* zc_helper.c: a second process for the zero-copy GPU tests (started with fork+exec, since
 * CUDA does not survive fork).
 *   zc_helper write URL KEY SIZE SEED [GPU]  CREATE (on the daemon's GPU GPU), fill with a
 *                                            kernel, SEAL
 *   zc_helper check URL KEY SIZE SEED   MAP, checksum with a kernel, compare, unmap
 *   zc_helper hold URL KEY N            MAP N times, print "ready", wait to be killed
 * Exit 0 on success, 3 when MAP was NOTSUP (a value on a GPU this process cannot see). */
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checksum.h"
#include "zc_kernels.h"

static int die(const char *what, gkv_client_t *c, int rc)
{
    fprintf(stderr, "zc_helper: %s: %s %s\n", what, gkv_err_name(rc), c ? gkv_client_errmsg(c) : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    const char *mode = argv[1], *url = argv[2], *key = argv[3];
    uint64_t n = strtoull(argv[4], NULL, 10);
    gkv_client_t *c;
    int rc = gkv_client_connect(url, &c);
    if (rc)
        return die("connect", NULL, rc);
    gkv_mapping_t *m;
    if (strcmp(mode, "write") == 0 && (argc == 6 || argc == 7)) {
        gkv_set_opts_t o = {.gpu = argc == 7 ? GKV_GPU(atoi(argv[6])) : 0};
        if ((rc = gkv_create(c, key, strlen(key), n, &o, &m)))
            return die("create", c, rc);
        if (!m->on_device || zc_use_device(m->device) ||
            zc_fill_device(m->ptr, n, strtoull(argv[5], NULL, 10)))
            return die("fill kernel", c, GKV_EIO);
        if ((rc = gkv_seal(c, m)))
            return die("seal", c, rc);
    } else if (strcmp(mode, "check") == 0 && argc == 6) {
        void *expect = malloc(n);
        zc_fill_host(expect, n, strtoull(argv[5], NULL, 10));
        uint64_t want = gkv_checksum_host(expect, n), got = 0;
        free(expect);
        char why[256];
        if ((rc = gkv_map(c, key, strlen(key), NULL, &m)))
            return die("map", c, rc) + (rc == GKV_ENOTSUP ? 2 : 0);
        if (!m->on_device || m->length != n || zc_use_device(m->device) ||
            gkv_checksum_device(m->ptr, m->length, &got, why, sizeof(why)))
            return die("checksum kernel", c, GKV_EIO);
        if ((rc = gkv_unmap(c, m)))
            return die("unmap", c, rc);
        if (got != want) {
            fprintf(stderr, "zc_helper: checksum %016llx, expected %016llx\n",
                    (unsigned long long)got, (unsigned long long)want);
            return 1;
        }
    } else if (strcmp(mode, "hold") == 0) {
        for (uint64_t i = 0; i < n; i++)
            if ((rc = gkv_map(c, key, strlen(key), NULL, &m)))
                return die("map", c, rc);
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    } else {
        return 2;
    }
    gkv_client_close(c);
    return 0;
}
