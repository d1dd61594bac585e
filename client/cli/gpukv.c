/* gpukv.c: the command-line client. Exit codes: 0 ok, 1 key not found or server error,
 * 2 usage error, 3 cannot connect. */
#include <errno.h>
#include <fcntl.h>
#include <gpukv/gpukv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "commands.h"
#include "size.h"
#include "version.h"

enum { EXIT_OKAY = 0, EXIT_SERVER = 1, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

static void usage(FILE *f)
{
    fprintf(f, "usage: gpukv [-u URL | -s SOCKET] [--token-file FILE] COMMAND [ARGS]\n"
               "  URL is unix:/path or tcp:host:port (default: $GPUKV_URL, else the default "
               "socket)\n"
               "  FILE holds the token of a gpukvd started with --auth-token-file (default:\n"
               "  $GPUKV_TOKEN, else the file $GPUKV_TOKEN_FILE names)\n\ncommands:\n"
               "  ping\n"
               "  set KEY VALUE | set KEY -f FILE | set KEY -     (- reads stdin)\n"
               "      [--nx | --xx] [--meta TEXT]\n"
               "  get KEY [-o FILE] [--offset N] [--length N] [--suffix N]\n"
               "  del KEY...\n"
               "  exists KEY...\n"
               "  ls [PREFIX] [-l] [--dir]\n"
               "  size KEY | size --prefix PREFIX\n"
               "  map KEY [--offset N] [--length N] [--suffix N]   (zero-copy, local only)\n"
               "  info\n"
               "  flush --yes\n\nprotocol commands (proto/PROTOCOL.md):\n");
#define GKV_HELP_ROW(NAME, name, num, flags, help) fprintf(f, "  %-8s %s\n", #name, help);
    GKV_COMMAND_LIST(GKV_HELP_ROW)
#undef GKV_HELP_ROW
}

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

static int parse_u64(const char *s, uint64_t *v)
{
    return gkv_size_parse(s, v) == 0 ? 0 : -1;
}

static int cmd_set(gkv_client_t *c, int argc, char **argv)
{
    gkv_set_opts_t so = {0};
    const char *file = NULL, *key = NULL, *value = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--nx") == 0) {
            so.flags |= GKV_SET_NX;
        } else if (strcmp(a, "--xx") == 0) {
            so.flags |= GKV_SET_XX;
        } else if ((strcmp(a, "--meta") == 0 || strcmp(a, "-f") == 0) && i + 1 < argc) {
            if (a[1] == 'f') {
                file = argv[++i];
            } else {
                so.meta = argv[++i];
                so.meta_len = strlen(so.meta);
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "gpukv: set: unknown option %s\n", a);
            return EXIT_USAGE;
        } else if (!key) {
            key = a;
        } else if (!value) {
            value = a;
        } else {
            fprintf(stderr, "gpukv: set: too many arguments\n");
            return EXIT_USAGE;
        }
    }
    if (!key || (!value && !file) || (value && file)) {
        fprintf(stderr, "gpukv: set needs KEY and one of VALUE, -f FILE or - (stdin)\n");
        return EXIT_USAGE;
    }
    int rc;
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
        rc = gkv_set_from_fd(c, key, strlen(key), fd, (uint64_t)st.st_size, &so);
        close(fd);
    } else if (strcmp(value, "-") == 0) {
        uint8_t *buf;
        size_t len;
        if (read_stdin(&buf, &len)) {
            fprintf(stderr, "gpukv: cannot read stdin\n");
            return EXIT_USAGE;
        }
        rc = gkv_set(c, key, strlen(key), buf, len, &so);
        free(buf);
    } else {
        rc = gkv_set(c, key, strlen(key), value, strlen(value), &so);
    }
    if (rc)
        return fail(c, "set", rc);
    if (isatty(1))
        puts("OK");
    return EXIT_OKAY;
}

static int cmd_get(gkv_client_t *c, int argc, char **argv)
{
    gkv_range_t range = {0};
    const char *out = NULL, *key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t *num = strcmp(a, "--offset") == 0   ? &range.offset
                        : strcmp(a, "--length") == 0 ? &range.length
                        : strcmp(a, "--suffix") == 0 ? &range.suffix
                                                     : NULL;
        if (num || strcmp(a, "-o") == 0) {
            if (i + 1 >= argc || (num && parse_u64(argv[i + 1], num))) {
                fprintf(stderr, "gpukv: get: %s needs %s\n", a, num ? "a number" : "a file");
                return EXIT_USAGE;
            }
            if (!num)
                out = argv[i + 1];
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "gpukv: get: unknown option %s\n", a);
            return EXIT_USAGE;
        } else if (!key) {
            key = a;
        } else {
            fprintf(stderr, "gpukv: get takes one KEY\n");
            return EXIT_USAGE;
        }
    }
    if (!key) {
        fprintf(stderr, "gpukv: get needs a KEY\n");
        return EXIT_USAGE;
    }
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

static int cmd_map(gkv_client_t *c, int argc, char **argv)
{
    gkv_range_t range = {0};
    const char *key = NULL;
    for (int i = 1; i < argc; i++) {
        uint64_t *num = strcmp(argv[i], "--offset") == 0   ? &range.offset
                        : strcmp(argv[i], "--length") == 0 ? &range.length
                        : strcmp(argv[i], "--suffix") == 0 ? &range.suffix
                                                           : NULL;
        if (num && i + 1 < argc && parse_u64(argv[i + 1], num) == 0) {
            i++;
        } else if (!num && argv[i][0] != '-' && !key) {
            key = argv[i];
        } else {
            fprintf(stderr, "gpukv: map KEY [--offset N] [--length N] [--suffix N]\n");
            return EXIT_USAGE;
        }
    }
    if (!key) {
        fprintf(stderr, "gpukv: map needs a KEY\n");
        return EXIT_USAGE;
    }
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

static int cmd_keys(gkv_client_t *c, int argc, char **argv, int del)
{
    if (argc < 2) {
        fprintf(stderr, "gpukv: %s needs at least one KEY\n", argv[0]);
        return EXIT_USAGE;
    }
    size_t n = (size_t)argc - 1;
    const void **keys = calloc(n, sizeof(*keys));
    size_t *lens = calloc(n, sizeof(*lens));
    if (!keys || !lens)
        return EXIT_SERVER;
    for (size_t i = 0; i < n; i++) {
        keys[i] = argv[i + 1];
        lens[i] = strlen(argv[i + 1]);
    }
    int64_t count = del ? gkv_del(c, keys, lens, n) : gkv_exists(c, keys, lens, n);
    free(keys);
    free(lens);
    if (count < 0)
        return fail(c, argv[0], (int)count);
    printf("%lld\n", (long long)count);
    /* exists of one missing key is "not found" for scripts. */
    return (!del && n == 1 && count == 0) ? EXIT_SERVER : EXIT_OKAY;
}

static int cmd_ls(gkv_client_t *c, int argc, char **argv)
{
    int longfmt = 0, dir = 0;
    const char *prefix = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-l") == 0)
            longfmt = 1;
        else if (strcmp(argv[i], "--dir") == 0)
            dir = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "gpukv: ls: unknown option %s\n", argv[i]);
            return EXIT_USAGE;
        } else
            prefix = argv[i];
    }
    gkv_list_t *it;
    int rc = gkv_list_open(c, prefix, strlen(prefix), dir ? '/' : 0, 0, &it);
    if (rc)
        return fail(c, "ls", rc);
    gkv_list_entry_t e;
    while ((rc = gkv_list_next(it, &e)) == 1) {
        if (longfmt && !e.is_dir)
            printf("%12llu  %.*s\n", (unsigned long long)e.size, (int)e.klen,
                   (const char *)e.key);
        else if (longfmt)
            printf("%12s  %.*s\n", "DIR", (int)e.klen, (const char *)e.key);
        else
            printf("%.*s\n", (int)e.klen, (const char *)e.key);
    }
    gkv_list_close(it);
    return rc < 0 ? fail(c, "ls", rc) : EXIT_OKAY;
}

static int cmd_size(gkv_client_t *c, int argc, char **argv)
{
    uint64_t bytes, count;
    int rc;
    if (argc == 3 && strcmp(argv[1], "--prefix") == 0) {
        rc = gkv_getsize_prefix(c, argv[2], strlen(argv[2]), &bytes, &count);
        if (rc)
            return fail(c, "size", rc);
        printf("%llu bytes in %llu keys\n", (unsigned long long)bytes, (unsigned long long)count);
        return EXIT_OKAY;
    }
    if (argc != 2) {
        fprintf(stderr, "gpukv: size KEY | size --prefix PREFIX\n");
        return EXIT_USAGE;
    }
    rc = gkv_getsize(c, argv[1], strlen(argv[1]), &bytes);
    if (rc)
        return fail(c, "size", rc);
    printf("%llu\n", (unsigned long long)bytes);
    return EXIT_OKAY;
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    char sockurl[4200];
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if ((strcmp(argv[i], "-u") == 0 || strcmp(argv[i], "--url") == 0) && i + 1 < argc) {
            url = argv[++i];
        } else if ((strcmp(argv[i], "-s") == 0 || strcmp(argv[i], "--socket") == 0) &&
                   i + 1 < argc) {
            snprintf(sockurl, sizeof(sockurl), "unix:%s", argv[++i]);
            url = sockurl;
        } else if ((strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) ||
                   strncmp(argv[i], "--token-file=", 13) == 0) {
            const char *file = argv[i][12] == '=' ? argv[i] + 13 : argv[++i];
            if (access(file, R_OK) != 0) {
                fprintf(stderr, "gpukv: --token-file %s: %s\n", file, strerror(errno));
                return EXIT_USAGE;
            }
            setenv("GPUKV_TOKEN_FILE", file, 1); /* libgpukv reads it in HELLO; the flag wins */
            unsetenv("GPUKV_TOKEN");
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return EXIT_OKAY;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("gpukv %s\n", GKV_VERSION_STRING);
            return EXIT_OKAY;
        } else {
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[i];
    argc -= i;
    argv += i;
    static const char *const known[] = {"ping", "set",  "get",  "del",   "exists", "ls",
                                        "size", "info", "flush", "map", NULL};
    int ok = 0;
    for (int k = 0; known[k]; k++)
        ok |= strcmp(cmd, known[k]) == 0;
    if (!ok) {
        fprintf(stderr, "gpukv: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "flush") == 0 && !(argc == 2 && strcmp(argv[1], "--yes") == 0)) {
        fprintf(stderr, "gpukv: flush deletes every key; confirm with: gpukv flush --yes\n");
        return EXIT_USAGE;
    }
    gkv_client_t *c;
    errno = 0;
    int rc = gkv_client_connect(url, &c);
    if (rc) {
        int e = errno;
        fprintf(stderr, "gpukv: cannot connect to %s: %s%s%s%s\n",
                url ? url : getenv("GPUKV_URL") ? getenv("GPUKV_URL") : "the default socket",
                gkv_strerror(rc), rc == GKV_ECONNECT && e ? " (" : "",
                rc == GKV_ECONNECT && e ? strerror(e) : "", rc == GKV_ECONNECT && e ? ")" : "");
        if (rc == GKV_EAUTH)
            fprintf(stderr, "gpukv: the server needs its token: --token-file FILE, "
                            "GPUKV_TOKEN or GPUKV_TOKEN_FILE\n");
        return rc == GKV_EINVAL ? EXIT_USAGE : EXIT_CONNECT;
    }
    int ex = EXIT_OKAY;
    if (strcmp(cmd, "ping") == 0) {
        if ((rc = gkv_ping(c)))
            ex = fail(c, "ping", rc);
        else
            puts("PONG");
    } else if (strcmp(cmd, "set") == 0) {
        ex = cmd_set(c, argc, argv);
    } else if (strcmp(cmd, "get") == 0) {
        ex = cmd_get(c, argc, argv);
    } else if (strcmp(cmd, "del") == 0) {
        ex = cmd_keys(c, argc, argv, 1);
    } else if (strcmp(cmd, "exists") == 0) {
        ex = cmd_keys(c, argc, argv, 0);
    } else if (strcmp(cmd, "map") == 0) {
        ex = cmd_map(c, argc, argv);
    } else if (strcmp(cmd, "ls") == 0) {
        ex = cmd_ls(c, argc, argv);
    } else if (strcmp(cmd, "size") == 0) {
        ex = cmd_size(c, argc, argv);
    } else if (strcmp(cmd, "info") == 0) {
        char *text;
        if ((rc = gkv_info(c, &text)))
            ex = fail(c, "info", rc);
        else {
            fputs(text, stdout);
            gkv_free(text);
        }
    } else if (strcmp(cmd, "flush") == 0) {
        if ((rc = gkv_flush(c)))
            ex = fail(c, "flush", rc);
        else
            puts("OK");
    }
    gkv_client_close(c);
    return ex;
}
