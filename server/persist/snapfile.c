/* snapfile.c: the snapshot file's parts and its I/O; see snapfile.h. */
#include "snapfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "crc32c.h"
#include "frame.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format is little-endian");

#define MAGIC "GKVSNAP1"
#define TRAILER "GKVEND01"
#define VERSION 1u

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

void gkv_snap_header_encode(uint8_t *out, const gkv_snap_header_t *h)
{
    memset(out, 0, GKV_SNAP_HEADER_LEN);
    memcpy(out, MAGIC, 8);
    put32(out + 8, VERSION);
    put32(out + 12, h->ndev);
    put64(out + 16, h->unix_ms);
    put64(out + 24, h->keys);
    put64(out + 32, h->bytes);
    put32(out + 60, gkv_crc32c(0, out, 60));
}

const char *gkv_snap_header_decode(const uint8_t *in, gkv_snap_header_t *h)
{
    if (memcmp(in, MAGIC, 8) != 0 || get32(in + 60) != gkv_crc32c(0, in, 60))
        return "the header's magic or checksum is wrong";
    if (get32(in + 8) != VERSION)
        return "its format version is not 1";
    h->ndev = get32(in + 12);
    h->unix_ms = get64(in + 16);
    h->keys = get64(in + 24);
    h->bytes = get64(in + 32);
    if (h->ndev < 1 || h->ndev > GKV_MAX_DEVICES)
        return "it names no devices, or more than a daemon serves";
    return NULL;
}

void gkv_snap_table_encode(uint8_t *out, const char *const *uuids, uint32_t ndev)
{
    memset(out, 0, gkv_snap_table_len(ndev));
    for (uint32_t i = 0; i < ndev; i++)
        snprintf((char *)out + (size_t)i * GKV_SNAP_UUID_LEN, GKV_SNAP_UUID_LEN, "%s", uuids[i]);
    size_t n = (size_t)ndev * GKV_SNAP_UUID_LEN;
    put32(out + n, gkv_crc32c(0, out, n));
}

bool gkv_snap_table_check(const uint8_t *in, uint32_t ndev)
{
    size_t n = (size_t)ndev * GKV_SNAP_UUID_LEN;
    return get32(in + n) == gkv_crc32c(0, in, n);
}

void gkv_snap_record_encode(uint8_t *out, const gkv_jrec_t *r)
{
    put32(out, r->klen);
    put32(out + 4, r->meta_len);
    put64(out + 8, r->size);
    put64(out + 16, r->expire_unix_ms);
    put32(out + 24, r->dev);
    put32(out + 28, gkv_crc32c(0, out, 28));
}

const char *gkv_snap_record_decode(const uint8_t *in, uint32_t ndev, gkv_jrec_t *r)
{
    if (get32(in + 28) != gkv_crc32c(0, in, 28))
        return "'s header checksum is wrong";
    memset(r, 0, sizeof(*r));
    r->klen = get32(in);
    r->meta_len = get32(in + 4);
    r->size = get64(in + 8);
    r->expire_unix_ms = get64(in + 16);
    r->dev = get32(in + 24);
    if (r->klen < 1 || r->klen > GKV_SNAP_KEY_MAX || r->meta_len > GKV_MAX_META || r->dev >= ndev)
        return " has impossible lengths";
    return NULL;
}

void gkv_snap_trailer_encode(uint8_t *out, uint64_t keys, uint64_t bytes)
{
    memset(out, 0, GKV_SNAP_TRAILER_LEN);
    memcpy(out, TRAILER, 8);
    put64(out + 8, keys);
    put64(out + 16, bytes);
    put32(out + 28, gkv_crc32c(0, out, 28));
}

bool gkv_snap_trailer_check(const uint8_t *in, uint64_t keys)
{
    return memcmp(in, TRAILER, 8) == 0 && get32(in + 28) == gkv_crc32c(0, in, 28) &&
           get64(in + 8) == keys;
}

static bool digits(const char *p, const char *end)
{
    if (p == end)
        return false;
    for (; p < end; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

bool gkv_snap_name(const char *name)
{
    size_t n = strlen(name);
    return n >= 12 && strncmp(name, "gpukv-", 6) == 0 && strcmp(name + n - 5, ".snap") == 0 &&
           digits(name + 6, name + n - 5);
}

bool gkv_snap_tmp_name(const char *name)
{
    size_t n = strlen(name);
    return n >= 16 && strncmp(name, ".gpukv-", 7) == 0 && strcmp(name + n - 9, ".snap.tmp") == 0;
}

static int by_name_desc(const void *a, const void *b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

int gkv_snap_list(const char *dir, char ***names)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!gkv_snap_name(de->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nv = realloc(v, (size_t)cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(v, (size_t)n, sizeof(*v), by_name_desc);
    *names = v;
    return n;
}

int gkv_snap_open(const char *path, int flags, bool *direct)
{
    int fd = open(path, flags | O_CLOEXEC | O_DIRECT, 0600);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) /* a filesystem without O_DIRECT (tmpfs) */
        fd = open(path, flags | O_CLOEXEC, 0600);
    return fd;
}

bool gkv_snap_drop_direct(int fd, bool *direct)
{
    if (errno != EINVAL || !*direct)
        return false;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0)
        return false;
    *direct = false;
    return true;
}
