/* gpukv.c: the command-line client: parses the whole command line (parse.c), connects, runs
 * one command. Exit codes: 0 ok, 1 key not found or server error, 2 usage error, 3 cannot
 * connect. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "cli.h"
#include "frame.h"
#include "size.h"

static int fail(gkv_client_t *c, const char *what, int rc)
{
    const char *msg = c ? gkv_client_errmsg(c) : "";
    if (strcmp(msg, gkv_strerror(rc)) == 0)
        msg = "";
    fprintf(stderr, "gpukv: %s: %s (%s)%s%s\n", what, gkv_strerror(rc), gkv_err_name(rc),
            *msg ? ": " : "", msg);
    if (rc == GKV_ECONNECT)
        return EXIT_CONNECT;
    return EXIT_SERVER;
}

/* A progress bar on stderr for transfers over 64 MiB, only when a person is watching. */
static void draw_bar(void *arg, uint64_t done, uint64_t total)
{
    (void)arg;
    char d[32], t[32], bar[41];
    int filled = total ? (int)(done * 40 / total) : 40;
    memset(bar, '#', (size_t)filled);
    memset(bar + filled, ' ', (size_t)(40 - filled));
    bar[40] = 0;
    gkv_size_format(done, d, sizeof(d));
    gkv_size_format(total, t, sizeof(t));
    fprintf(stderr, "\r[%s] %3d%% %s/%s", bar, total ? (int)(done * 100 / total) : 100, d, t);
    if (done == total)
        fputc('\n', stderr);
}

static void progress(gkv_client_t *c, uint64_t total)
{
    if (total > (64u << 20) && isatty(2))
        gkv_client_set_progress(c, draw_bar, NULL);
}

static int read_stdin(uint8_t **out, size_t *len)
{
    size_t cap = 65536, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return -1;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return -1;
            }
            buf = b;
            cap *= 2;
        }
        ssize_t r = read(0, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* The daemon's ordinal of the GPU name gives (an ordinal, or a UUID of gkv_client_info's
 * list), or -1 with the reason on stderr. */
static int gpu_ordinal(gkv_client_t *c, const char *cmd, const char *name)
{
    const gkv_server_info_t *in = gkv_client_info(c);
    char *end;
    unsigned long n = strtoul(name, &end, 10);
    if (*name >= '0' && *name <= '9' && !*end && n < in->gpus)
        return (int)n;
    for (uint32_t i = 0; i < in->gpus; i++)
        if (strcmp(in->gpu_uuids[i], name) == 0)
            return (int)i;
    fprintf(stderr, "gpukv %s: the server has no GPU '%s' (it has %u: gpukv info lists them)\n",
            cmd, name, in->gpus);
    return -1;
}

int gkv_cli_set(gkv_client_t *c, const gkv_cli_args_t *a)
{
    gkv_set_opts_t opts = a->set, *so = &opts;
    const char *key = a->operands[0], *file = a->file;
    const char *value = a->noperands == 2 ? a->operands[1] : NULL;
    int rc;
    if (a->gpu) {
        int gpu = gpu_ordinal(c, "set", a->gpu);
        if (gpu < 0)
            return EXIT_USAGE;
        opts.gpu = GKV_GPU(gpu);
    }
    if (file) {
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            fprintf(stderr, "gpukv: cannot read regular file %s: %s\n", file, strerror(errno));
            if (fd >= 0)
                close(fd);
            return EXIT_USAGE;
        }
        progress(c, (uint64_t)st.st_size);
        rc = gkv_set_from_fd(c, key, strlen(key), fd, (uint64_t)st.st_size, so);
        close(fd);
    } else if (strcmp(value, "-") == 0) {
        uint8_t *buf;
        size_t len;
        if (read_stdin(&buf, &len)) {
            fprintf(stderr, "gpukv: cannot read stdin\n");
            return EXIT_USAGE;
        }
        rc = gkv_set(c, key, strlen(key), buf, len, so);
        free(buf);
    } else {
        rc = gkv_set(c, key, strlen(key), value, strlen(value), so);
    }
    if (rc)
        return fail(c, "set", rc);
    if (isatty(1))
        puts("OK");
    return EXIT_OKAY;
}

/* get --meta: the metadata stored with the value, as it was given. */
static int print_meta(gkv_client_t *c, const char *key)
{
    gkv_range_t one = {.offset = 0, .length = 1}; /* the metadata comes with any read */
    void *bytes;
    gkv_value_info_t info;
    int rc = gkv_get_alloc(c, key, strlen(key), &one, &bytes, &info);
    if (rc)
        return fail(c, "get", rc);
    fwrite(info.meta, 1, info.meta_len, stdout);
    gkv_free(bytes);
    if (isatty(1))
        putchar('\n');
    return EXIT_OKAY;
}

int gkv_cli_get(gkv_client_t *c, const gkv_cli_args_t *a)
{
    gkv_range_t range = a->range;
    const char *out = a->output, *key = a->operands[0];
    if (a->meta)
        return print_meta(c, key);
    if (range.length == 0)
        range.length = GKV_TO_END;
    int fd = 1;
    if (out && strcmp(out, "-") != 0) {
        fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "gpukv: cannot write %s: %s\n", out, strerror(errno));
            return EXIT_USAGE;
        }
    }
    uint64_t size = 0;
    if (isatty(2) && gkv_getsize(c, key, strlen(key), &size) == 0)
        progress(c, size);
    gkv_value_info_t info;
    int rc = gkv_get_to_fd(c, key, strlen(key), &range, fd, &info);
    if (fd != 1)
        close(fd);
    if (rc)
        return fail(c, "get", rc);
    /* A terminal gets a newline after the value; pipes and files get the exact bytes. */
    if (fd == 1 && isatty(1))
        putchar('\n');
    return EXIT_OKAY;
}

int gkv_cli_map(gkv_client_t *c, const gkv_cli_args_t *a)
{
    gkv_range_t range = a->range;
    const char *key = a->operands[0];
    if (range.length == 0)
        range.length = GKV_TO_END;
    gkv_mapping_t *m;
    int rc = gkv_map(c, key, strlen(key), &range, &m);
    if (rc)
        return fail(c, "map", rc);
    uint64_t sum = 0;
    char why[256] = "";
    int ok = m->on_device ? gkv_checksum_device(m->ptr, m->length, &sum, why, sizeof(why)) == 0
                          : (sum = gkv_checksum_host(m->ptr, m->length), 1);
    printf("key:      %s\nlease:    %llu\n", key, (unsigned long long)m->lease);
    if (m->on_device)
        printf("location: GPU memory, device %d of this process (%s), pointer %p\n", m->device,
               m->gpu_uuid, m->ptr);
    else
        printf("location: host memory (the daemon's shared arena), pointer %p\n", m->ptr);
    printf("bytes:    %llu at offset %llu of a %llu-byte value\n",
           (unsigned long long)m->length, (unsigned long long)m->offset,
           (unsigned long long)m->value_size);
    if (ok)
        printf("checksum: %016llx (gkv-sum64, computed on the %s through the mapping)\n",
               (unsigned long long)sum, m->on_device ? "GPU" : "CPU");
    else
        fprintf(stderr, "gpukv: map: %s\n", why);
    rc = gkv_unmap(c, m);
    if (rc)
        return fail(c, "unmap", rc);
    return ok ? EXIT_OKAY : EXIT_SERVER;
}

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
        return fail(c, a->cmd->name, (int)count);
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
        return fail(c, "del", rc);
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
        return fail(c, "ls", rc);
    gkv_list_entry_t e;
    while ((rc = gkv_list_next(it, &e)) == 1) {
        uint64_t ttl = GKV_NO_TTL;
        char ttl_text[32] = "-";
        if (longfmt && !e.is_dir && gkv_ttl(c, e.key, e.klen, &ttl) == 0 && ttl != GKV_NO_TTL)
            snprintf(ttl_text, sizeof(ttl_text), "%llums", (unsigned long long)ttl);
        if (longfmt && !e.is_dir)
            printf("%12llu  %10s  gpu%-2d  %.*s\n", (unsigned long long)e.size, ttl_text, e.gpu,
                   (int)e.klen, (const char *)e.key);
        else if (longfmt)
            printf("%12s  %10s  %5s  %.*s\n", "DIR", "", "", (int)e.klen, (const char *)e.key);
        else
            printf("%.*s\n", (int)e.klen, (const char *)e.key);
    }
    gkv_list_close(it);
    return rc < 0 ? fail(c, "ls", rc) : EXIT_OKAY;
}

int gkv_cli_size(gkv_client_t *c, const gkv_cli_args_t *a)
{
    uint64_t bytes, count;
    int rc;
    if (a->prefix) {
        rc = gkv_getsize_prefix(c, a->prefix, strlen(a->prefix), &bytes, &count);
        if (rc)
            return fail(c, "size", rc);
        printf("%llu bytes in %llu keys\n", (unsigned long long)bytes, (unsigned long long)count);
        return EXIT_OKAY;
    }
    const char *key = a->operands[0];
    rc = gkv_getsize(c, key, strlen(key), &bytes);
    if (rc)
        return fail(c, "size", rc);
    printf("%llu\n", (unsigned long long)bytes);
    return EXIT_OKAY;
}

int gkv_cli_move(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    int gpu = gpu_ordinal(c, "move", a->operands[1]);
    if (gpu < 0)
        return EXIT_USAGE;
    int rc = gkv_move(c, key, strlen(key), gpu);
    if (rc < 0)
        return fail(c, "move", rc);
    printf("%s gpu%d\n", rc ? "moved to" : "already on", gpu);
    return EXIT_OKAY;
}

int gkv_cli_ping(gkv_client_t *c, const gkv_cli_args_t *a)
{
    (void)a;
    int rc = gkv_ping(c);
    if (rc)
        return fail(c, "ping", rc);
    puts("PONG");
    return EXIT_OKAY;
}

int gkv_cli_info(gkv_client_t *c, const gkv_cli_args_t *a)
{
    char *text;
    int rc = a->prometheus ? gkv_metrics(c, &text) : gkv_info(c, &text);
    if (rc)
        return fail(c, "info", rc);
    fputs(text, stdout);
    gkv_free(text);
    return EXIT_OKAY;
}

/* The value of INFO's "name:" line into buf (cap bytes); false when there is none. */
static bool info_field(const char *text, const char *name, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\n%s:", name);
    const char *p = strstr(text, pat);
    if (!p)
        return false;
    p += strlen(pat);
    size_t n = strcspn(p, "\r\n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return true;
}

int gkv_cli_save(gkv_client_t *c, const gkv_cli_args_t *a)
{
    int rc = gkv_save(c);
    if (rc)
        return fail(c, "save", rc);
    if (!a->wait) {
        puts("saving");
        return EXIT_OKAY;
    }
    for (;;) {
        char *text, saving[8] = "", status[8] = "", file[160] = "", keys[32] = "", bytes[32] = "",
                    err[200] = "";
        if ((rc = gkv_info(c, &text)))
            return fail(c, "save", rc);
        bool found = info_field(text, "saving", saving, sizeof(saving));
        info_field(text, "last_save_status", status, sizeof(status));
        info_field(text, "last_save_file", file, sizeof(file));
        info_field(text, "last_save_keys", keys, sizeof(keys));
        info_field(text, "last_save_bytes", bytes, sizeof(bytes));
        info_field(text, "last_save_error", err, sizeof(err));
        gkv_free(text);
        if (!found) {
            fprintf(stderr, "gpukv save: the server's INFO has no # Persistence\n");
            return EXIT_SERVER;
        }
        if (strcmp(saving, "0") == 0) {
            if (strcmp(status, "ok") != 0) {
                fprintf(stderr, "gpukv save: failed: %s\n", err);
                return EXIT_SERVER;
            }
            printf("saved %s: %s keys, %s bytes\n", file, keys, bytes);
            return EXIT_OKAY;
        }
        usleep(100 * 1000);
    }
}

int gkv_cli_flush(gkv_client_t *c, const gkv_cli_args_t *a)
{
    (void)a;
    int rc = gkv_flush(c);
    if (rc)
        return fail(c, "flush", rc);
    puts("OK");
    return EXIT_OKAY;
}

int gkv_cli_expire(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    int rc = gkv_expire(c, key, strlen(key), a->ttl_ms);
    if (rc < 0)
        return fail(c, "expire", rc);
    printf("%d\n", rc);
    return rc ? EXIT_OKAY : EXIT_SERVER;
}

int gkv_cli_ttl(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *key = a->operands[0];
    uint64_t left;
    int rc = gkv_ttl(c, key, strlen(key), &left);
    if (rc)
        return fail(c, "ttl", rc);
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
        return fail(c, "persist", rc);
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
        fprintf(stderr, "gpukv: cannot connect to %s: %s%s%s%s\n", url ? url : "the default socket",
                gkv_strerror(rc), rc == GKV_ECONNECT && e ? " (" : "",
                rc == GKV_ECONNECT && e ? strerror(e) : "", rc == GKV_ECONNECT && e ? ")" : "");
        if (rc == GKV_EAUTH)
            fprintf(stderr, "gpukv: the server needs its token: --token-file FILE, "
                            "GPUKV_TOKEN or GPUKV_TOKEN_FILE\n");
        return rc == GKV_EINVAL ? EXIT_USAGE : EXIT_CONNECT;
    }
    int ex = a.cmd->run(c, &a);
    gkv_client_close(c);
    return ex;
}
