/* values.c: the value commands: set (from a file, a pipe or stdin, spooled when its size is
 * unknown), get (to stdout or a file kept whole until the value is), map (zero-copy, checked
 * on the GPU), with a progress bar for large transfers. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "cli.h"
#include "frame.h"
#include "size.h"

#define SPOOL_MEM (64u << 20)

typedef struct {
    uint8_t *mem; /* the bytes, while they fit in memory */
    int fd;       /* else the file holding them, positioned at 0 */
    uint64_t len;
} spooled_t;

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

/* Moves what is in memory into a temporary file. Returns 0 or an errno. */
static int spill(spooled_t *sp)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    sp->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (sp->fd < 0) { /* a filesystem without O_TMPFILE */
        char path[4096];
        snprintf(path, sizeof(path), "%s/gpukv-set-XXXXXX", dir);
        sp->fd = mkstemp(path);
        if (sp->fd >= 0)
            unlink(path);
    }
    if (sp->fd < 0)
        return errno;
    for (uint64_t done = 0; done < sp->len;) {
        ssize_t w = write(sp->fd, sp->mem + done, (size_t)(sp->len - done));
        if (w < 0 && errno != EINTR)
            return errno;
        done += w > 0 ? (uint64_t)w : 0;
    }
    free(sp->mem);
    sp->mem = NULL;
    return 0;
}

/* Reads in to its end into *sp. Returns 0, or -1 with the reason on stderr. */
static int spool(int in, const char *what, spooled_t *sp)
{
    enum { CHUNK = 1 << 20 };
    size_t cap = CHUNK;
    *sp = (spooled_t){.mem = malloc(cap), .fd = -1};
    uint8_t *buf = sp->mem;
    int err = buf ? 0 : ENOMEM;
    while (!err) {
        if (sp->fd < 0 && sp->len == cap) {
            if (cap < SPOOL_MEM) {
                uint8_t *more = realloc(sp->mem, cap * 2);
                if (!more) {
                    err = ENOMEM;
                    break;
                }
                sp->mem = more;
                cap *= 2;
            } else if ((err = spill(sp)) || !(buf = malloc(CHUNK))) {
                err = err ? err : ENOMEM;
                break;
            }
        }
        uint8_t *at = sp->fd < 0 ? sp->mem + sp->len : buf;
        size_t room = sp->fd < 0 ? cap - (size_t)sp->len : CHUNK;
        ssize_t n = read(in, at, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? errno : 0;
            break;
        }
        for (ssize_t done = 0; sp->fd >= 0 && done < n && !err;) {
            ssize_t w = write(sp->fd, buf + done, (size_t)(n - done));
            if (w < 0 && errno != EINTR)
                err = errno;
            done += w > 0 ? w : 0;
        }
        sp->len += (uint64_t)n;
    }
    if (sp->fd >= 0) {
        free(buf);
        if (!err && lseek(sp->fd, 0, SEEK_SET) != 0)
            err = errno;
    }
    if (err) {
        fprintf(stderr, "gpukv set: cannot read %s: %s%s\n", what, strerror(err),
                sp->fd >= 0 ? " (buffering it in $TMPDIR)" : "");
        free(sp->mem);
        if (sp->fd >= 0)
            close(sp->fd);
        return -1;
    }
    return 0;
}

/* The value's source for set: a regular file is read as it is (fd, len); anything else
 * (stdin, a pipe, /dev/stdin, a process substitution) is a stream, spooled first (sp). Returns
 * 0, or -1 with the reason on stderr. */
static int open_value(const char *path, int *fd_out, spooled_t *sp)
{
    bool std = strcmp(path, "-") == 0;
    int fd = std ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    *sp = (spooled_t){.fd = -1};
    *fd_out = -1;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "gpukv set: cannot read %s: %s\n", std ? "stdin" : path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "gpukv set: %s is a directory\n", path);
        close(fd);
        return -1;
    }
    if (S_ISREG(st.st_mode)) {
        off_t at = lseek(fd, 0, SEEK_CUR); /* stdin redirected from a file may be part-read */
        sp->len = (uint64_t)st.st_size - (uint64_t)(at > 0 ? at : 0);
        *fd_out = fd;
        return 0;
    }
    int rc = spool(fd, std ? "stdin" : path, sp);
    close(fd);
    return rc;
}

int gkv_cli_set(gkv_client_t *c, const gkv_cli_args_t *a)
{
    gkv_set_opts_t opts = a->set, *so = &opts;
    const char *key = a->operands[0], *file = a->file;
    const char *value = a->noperands == 2 ? a->operands[1] : NULL;
    int rc;
    if (a->gpu) {
        int gpu = gkv_cli_gpu_ordinal(c, "set", a->gpu);
        if (gpu < 0)
            return EXIT_USAGE;
        opts.gpu = GKV_GPU(gpu);
    }
    if (file || strcmp(value, "-") == 0) {
        int fd;
        spooled_t sp;
        if (open_value(file ? file : "-", &fd, &sp))
            return EXIT_USAGE;
        progress(c, sp.len);
        if (sp.mem)
            rc = gkv_set(c, key, strlen(key), sp.mem, (size_t)sp.len, so);
        else
            rc = gkv_set_from_fd(c, key, strlen(key), fd >= 0 ? fd : sp.fd, sp.len, so);
        free(sp.mem);
        if (fd >= 0)
            close(fd);
        if (sp.fd >= 0)
            close(sp.fd);
    } else {
        rc = gkv_set(c, key, strlen(key), value, strlen(value), so);
    }
    if (rc)
        return gkv_cli_fail(c, "set", rc);
    if (isatty(1))
        puts("OK");
    return EXIT_OKAY;
}

/* get -o FILE: the value goes into a temporary file beside FILE (into tmp, cap bytes), renamed
 * over FILE only once the whole value is there, so that a missing key or a bad range leaves an
 * existing FILE as it was. What is not a regular file (a device, a FIFO) is written directly.
 * Returns the fd to write, or -1 with the reason on stderr. */
static int open_output(const char *out, char *tmp, size_t cap)
{
    struct stat st;
    bool exists = stat(out, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        tmp[0] = 0;
        int fd = open(out, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            fprintf(stderr, "gpukv get: cannot write %s: %s\n", out, strerror(errno));
        return fd;
    }
    snprintf(tmp, cap, "%s.gpukv-XXXXXX", out);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "gpukv get: cannot write beside %s: %s\n", out, strerror(errno));
        return -1;
    }
    /* The mode a new file would get (0666 less the umask), or the existing file's. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, exists ? (st.st_mode & 07777) : (0666 & ~mask));
    return fd;
}

/* Closes fd; with tmp set, renames it over out when ok, else removes it. Returns 0, or -1 with
 * the reason on stderr (the value was read but could not be put in place). */
static int finish_output(int fd, const char *out, const char *tmp, bool ok)
{
    int rc = close(fd);
    if (!tmp[0])
        return rc == 0 || !ok ? 0 : -1;
    if (ok && rc == 0 && rename(tmp, out) == 0)
        return 0;
    if (ok)
        fprintf(stderr, "gpukv get: cannot write %s: %s\n", out, strerror(errno));
    unlink(tmp);
    return ok ? -1 : 0;
}

/* get --meta: the metadata stored with the value, as it was given. */
static int print_meta(gkv_client_t *c, const char *key)
{
    gkv_range_t one = {.offset = 0, .length = 1}; /* the metadata comes with any read */
    void *bytes;
    gkv_value_info_t info;
    int rc = gkv_get_alloc(c, key, strlen(key), &one, &bytes, &info);
    if (rc)
        return gkv_cli_fail(c, "get", rc);
    fwrite(info.meta, 1, info.meta_len, stdout);
    gkv_free(bytes);
    if (isatty(1))
        putchar('\n');
    return EXIT_OKAY;
}

/* --wait MS [--after V] for the next GET or MAP (checked: MS 0 .. 3,600,000, V with MS). */
static void arm_wait(gkv_client_t *c, const gkv_cli_args_t *a)
{
    if (a->has_after)
        gkv_wait_newer(c, (uint32_t)a->wait_ms, a->after);
    else
        gkv_wait_next(c, (uint32_t)a->wait_ms);
}

int gkv_cli_get(gkv_client_t *c, const gkv_cli_args_t *a)
{
    gkv_range_t range = a->range;
    const char *out = a->output, *key = a->operands[0];
    arm_wait(c, a); /* the GET takes it */
    if (a->meta)
        return print_meta(c, key);
    if (range.length == 0)
        range.length = GKV_TO_END;
    int fd = 1;
    char tmp[4200] = "";
    if (out && strcmp(out, "-") != 0 && (fd = open_output(out, tmp, sizeof(tmp))) < 0)
        return EXIT_USAGE;
    uint64_t size = 0;
    if (!a->wait_ms && isatty(2) && gkv_getsize(c, key, strlen(key), &size) == 0)
        progress(c, size);
    gkv_value_info_t info;
    int rc = gkv_get_to_fd(c, key, strlen(key), &range, fd, &info);
    if (fd != 1 && finish_output(fd, out, tmp, rc == 0) && rc == 0)
        return EXIT_SERVER;
    if (rc)
        return gkv_cli_fail(c, "get", rc);
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
    arm_wait(c, a);
    int rc = gkv_map(c, key, strlen(key), &range, &m);
    if (rc)
        return gkv_cli_fail(c, "map", rc);
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
    printf("bytes:    %llu at offset %llu of a %llu-byte value\n", (unsigned long long)m->length,
           (unsigned long long)m->offset, (unsigned long long)m->value_size);
    if (m->version)
        printf("version:  %llu\n", (unsigned long long)m->version);
    if (ok)
        printf("checksum: %016llx (gkv-sum64, computed on the %s through the mapping)\n",
               (unsigned long long)sum, m->on_device ? "GPU" : "CPU");
    else
        fprintf(stderr, "gpukv: map: %s\n", why);
    rc = gkv_unmap(c, m);
    if (rc)
        return gkv_cli_fail(c, "unmap", rc);
    return ok ? EXIT_OKAY : EXIT_SERVER;
}
