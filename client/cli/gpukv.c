/* gpukv.c: the command-line client: parses the whole command line (parse.c), connects, runs
 * one command: the key commands here, values in values.c, the server's in server.c. Exit
 * codes: 0 ok, 1 key not found or server error, 2 usage error, 3 cannot connect. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "cli.h"
#include "frame.h"
#include "size.h"

/* A value read from a stream of unknown length (a pipe, a terminal, a FIFO, /dev/stdin): the
 * protocol announces a payload's length up front. Up to SPOOL_MEM bytes are kept in memory; a
 * longer stream goes on into an unlinked temporary file in $TMPDIR (or /tmp), so that the CLI's
 * memory stays bounded whatever the value's size (issue 32: 1 GiB from stdin took 1 GiB). */

static int keys_count(gkv_client_t *c, const gkv_cli_args_t *a, bool del)
{
    size_t n = (size_t)a->noperands;
    const void **keys = calloc(n, sizeof(*keys));
    size_t *lens = calloc(n, sizeof(*lens));
    if (!keys || !lens) {
        free(keys);
        free(lens);
        return EXIT_SERVER;
    }
    for (size_t i = 0; i < n; i++) {
        keys[i] = a->operands[i];
        lens[i] = strlen(a->operands[i]);
    }
    /* A request takes at most GKV_MAX_BATCH keys: more go in several. */
    int64_t count = 0;
    for (size_t at = 0; at < n && count >= 0; at += GKV_MAX_BATCH) {
        size_t m = n - at < GKV_MAX_BATCH ? n - at : GKV_MAX_BATCH;
        int64_t got =
            del ? gkv_del(c, keys + at, lens + at, m) : gkv_exists(c, keys + at, lens + at, m);
        count = got < 0 ? got : count + got;
    }
    free(keys);
    free(lens);
    if (count < 0)
        return gkv_cli_fail(c, a->cmd->name, (int)count);
    printf("%lld\n", (long long)count);
    /* exists of one missing key is "not found" for scripts. */
    return (!del && n == 1 && count == 0) ? EXIT_SERVER : EXIT_OKAY;
}

int gkv_cli_del(gkv_client_t *c, const gkv_cli_args_t *a)
{
    if (!a->prefix)
        return keys_count(c, a, true);
    uint64_t count;
    int rc = gkv_del_prefix(c, a->prefix, strlen(a->prefix), &count);
    if (rc)
        return gkv_cli_fail(c, "del", rc);
    printf("%llu\n", (unsigned long long)count);
    return EXIT_OKAY;
}

int gkv_cli_exists(gkv_client_t *c, const gkv_cli_args_t *a)
{
    return keys_count(c, a, false);
}

int gkv_cli_ls(gkv_client_t *c, const gkv_cli_args_t *a)
{
    bool longfmt = a->longfmt, dir = a->dir;
    const char *prefix = a->noperands ? a->operands[0] : "";
    gkv_list_t *it;
    int rc = gkv_list_open(c, prefix, strlen(prefix), dir ? '/' : 0, 0, &it);
    if (rc)
        return gkv_cli_fail(c, "ls", rc);
    gkv_list_entry_t e;
    while ((rc = gkv_list_next(it, &e)) == 1) {
        uint64_t ttl = GKV_NO_TTL;
        char ttl_text[32] = "-";
        if (longfmt && !e.is_dir && gkv_ttl(c, e.key, e.klen, &ttl) == 0 && ttl != GKV_NO_TTL)
            snprintf(ttl_text, sizeof(ttl_text), "%llums", (unsigned long long)ttl);
        char where[16]; /* a tier's name in the GPU's column */
        int tier = gkv_list_tier(it);
        if (tier == GKV_TIER_GPU)
            snprintf(where, sizeof(where), "gpu%-2d", e.gpu);
        else
            snprintf(where, sizeof(where), "%s", tier == GKV_TIER_HOST ? "host " : "disk ");
        if (longfmt && !e.is_dir)
            printf("%12llu  %10s  %s  %.*s\n", (unsigned long long)e.size, ttl_text, where,
                   (int)e.klen, (const char *)e.key);
        else if (longfmt)
            printf("%12s  %10s  %5s  %.*s\n", "DIR", "", "", (int)e.klen, (const char *)e.key);
        else
            printf("%.*s\n", (int)e.klen, (const char *)e.key);
    }
    gkv_list_close(it);
    return rc < 0 ? gkv_cli_fail(c, "ls", rc) : EXIT_OKAY;
}

int gkv_cli_size(gkv_client_t *c, const gkv_cli_args_t *a)
{
    uint64_t bytes, count;
    int rc;
    if (a->prefix) {
        rc = gkv_getsize_prefix(c, a->prefix, strlen(a->prefix), &bytes, &count);
        if (rc)
            return gkv_cli_fail(c, "size", rc);
        printf("%llu bytes in %llu keys\n", (unsigned long long)bytes, (unsigned long long)count);
        return EXIT_OKAY;
    }
    const char *key = a->operands[0];
    rc = gkv_getsize(c, key, strlen(key), &bytes);
    if (rc)
        return gkv_cli_fail(c, "size", rc);
    printf("%llu\n", (unsigned long long)bytes);
    return EXIT_OKAY;
}

int gkv_cli_locate(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    char node[256];
    uint64_t size;
    int gpu, tier;
    int rc = gkv_locate_node(c, key, strlen(key), node, sizeof(node), &size);
    if (!rc)
        rc = gkv_locate_tier(c, key, strlen(key), &size, &gpu, &tier);
    if (rc)
        return gkv_cli_fail(c, "locate", rc);
    printf("%s%s\n", node[0] ? node : "this daemon (it is in no cluster)",
           tier == GKV_TIER_HOST ? ", in its host tier"
           : tier == GKV_TIER_DISK ? ", in its disk tier"
                                   : "");
    return EXIT_OKAY;
}

int gkv_cli_move(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    int gpu = gkv_cli_gpu_ordinal(c, "move", a->operands[1]);
    if (gpu < 0)
        return EXIT_USAGE;
    int rc = gkv_move(c, key, strlen(key), gpu);
    if (rc < 0)
        return gkv_cli_fail(c, "move", rc);
    printf("%s gpu%d\n", rc ? "moved to" : "already on", gpu);
    return EXIT_OKAY;
}

int gkv_cli_expire(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    int rc = gkv_expire(c, key, strlen(key), a->ttl_ms);
    if (rc < 0)
        return gkv_cli_fail(c, "expire", rc);
    if (rc == 0) { /* scripts read the exit status; people read why */
        fprintf(stderr, "gpukv expire: no key '%s'\n", key);
        return EXIT_SERVER;
    }
    printf("%d\n", rc);
    return EXIT_OKAY;
}

int gkv_cli_ttl(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    uint64_t left;
    int rc = gkv_ttl(c, key, strlen(key), &left);
    if (rc)
        return gkv_cli_fail(c, "ttl", rc);
    if (left == GKV_NO_TTL)
        puts("none");
    else
        printf("%llu\n", (unsigned long long)left);
    return EXIT_OKAY;
}

int gkv_cli_persist(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    int rc = gkv_persist(c, key, strlen(key));
    if (rc < 0)
        return gkv_cli_fail(c, "persist", rc);
    printf("%d\n", rc);
    return EXIT_OKAY;
}

int main(int argc, char **argv)
{
    gkv_cli_args_t a;
    int rc = gkv_cli_parse(argc, argv, &a);
    if (rc == GKV_CLI_DONE)
        return EXIT_OKAY;
    if (rc != GKV_CLI_RUN)
        return rc;
    if (a.token_file) {
        setenv("GPUKV_TOKEN_FILE", a.token_file, 1); /* libgpukv reads it in HELLO; it wins */
        unsetenv("GPUKV_TOKEN");
    }
    gkv_client_t *c;
    errno = 0;
    rc = gkv_client_connect(a.url, &c);
    if (rc) {
        int e = errno;
        const char *url = a.url ? a.url : getenv("GPUKV_URL");
        char where[4200];
        if (url && *url) {
            snprintf(where, sizeof(where), "%s", url);
        } else {
            char sock[4096];
            if (gkv_default_socket(sock, sizeof(sock)) < 0)
                snprintf(sock, sizeof(sock), "?");
            snprintf(where, sizeof(where), "unix:%s (the default socket)", sock);
        }
        fprintf(stderr, "gpukv: cannot connect to %s: %s%s%s%s\n", where, gkv_strerror(rc),
                rc == GKV_ECONNECT && e ? " (" : "", rc == GKV_ECONNECT && e ? strerror(e) : "",
                rc == GKV_ECONNECT && e ? ")" : "");
        if (!url || !*url)
            fprintf(stderr, "gpukv: is gpukvd running? Name its socket with -s PATH, -u URL or "
                            "GPUKV_URL\n");
        if (rc == GKV_EAUTH)
            fprintf(stderr, "gpukv: the server needs its token: --token-file FILE, "
                            "GPUKV_TOKEN or GPUKV_TOKEN_FILE\n");
        return rc == GKV_EINVAL ? EXIT_USAGE : EXIT_CONNECT;
    }
    int ex = a.cmd->run(c, &a);
    gkv_client_close(c);
    return ex;
}
