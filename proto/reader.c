/* reader.c: bounded msgpack reading (the format: github.com/msgpack/msgpack/blob/master/spec.md). */
#include "reader.h"

#include <gpukv/gpukv.h>

#include "frame.h"

void gkv_read_init(gkv_reader_t *r, const void *buf, size_t len)
{
    r->p = buf;
    r->end = r->p + len;
}

size_t gkv_read_left(const gkv_reader_t *r)
{
    return (size_t)(r->end - r->p);
}

/* Reads an n-byte big-endian number after the type byte, if the bytes are there. */
static int be(const gkv_reader_t *r, size_t at, int n, uint64_t *v)
{
    if (gkv_read_left(r) < at + (size_t)n)
        return GKV_EPROTO;
    uint64_t x = 0;
    for (int i = 0; i < n; i++)
        x = (x << 8) | r->p[at + i];
    *v = x;
    return 0;
}

/* Container header: count and header size; each element needs at least one byte. */
static int container(gkv_reader_t *r, int is_map, uint32_t *n)
{
    if (r->p >= r->end)
        return GKV_EPROTO;
    uint8_t t = r->p[0];
    uint64_t count;
    size_t hdr;
    if (is_map && (t & 0xf0) == 0x80) {
        count = t & 0x0f;
        hdr = 1;
    } else if (!is_map && (t & 0xf0) == 0x90) {
        count = t & 0x0f;
        hdr = 1;
    } else if (t == (is_map ? 0xde : 0xdc)) {
        if (be(r, 1, 2, &count))
            return GKV_EPROTO;
        hdr = 3;
    } else if (t == (is_map ? 0xdf : 0xdd)) {
        if (be(r, 1, 4, &count))
            return GKV_EPROTO;
        hdr = 5;
    } else {
        return GKV_EPROTO;
    }
    if (count * (is_map ? 2 : 1) > gkv_read_left(r) - hdr)
        return GKV_EPROTO;
    r->p += hdr;
    *n = (uint32_t)count;
    return 0;
}

int gkv_read_map(gkv_reader_t *r, uint32_t *n)
{
    return container(r, 1, n);
}

int gkv_read_array(gkv_reader_t *r, uint32_t *n)
{
    return container(r, 0, n);
}

int gkv_read_int(gkv_reader_t *r, int64_t *v)
{
    if (r->p >= r->end)
        return GKV_EPROTO;
    uint8_t t = r->p[0];
    uint64_t x;
    if (t <= 0x7f) {
        *v = t;
        r->p++;
        return 0;
    }
    if (t >= 0xe0) {
        *v = (int8_t)t;
        r->p++;
        return 0;
    }
    int n;
    switch (t) {
    case 0xcc: case 0xd0: n = 1; break;
    case 0xcd: case 0xd1: n = 2; break;
    case 0xce: case 0xd2: n = 4; break;
    case 0xcf: case 0xd3: n = 8; break;
    default: return GKV_EPROTO;
    }
    if (be(r, 1, n, &x))
        return GKV_EPROTO;
    if (t >= 0xd0) { /* signed: sign-extend from n bytes */
        unsigned shift = 64 - 8 * (unsigned)n;
        *v = (int64_t)(x << shift) >> shift;
    } else {
        if (x > INT64_MAX)
            return GKV_EPROTO;
        *v = (int64_t)x;
    }
    r->p += 1 + n;
    return 0;
}

int gkv_read_uint(gkv_reader_t *r, uint64_t *v)
{
    if (r->p < r->end && r->p[0] == 0xcf) {
        uint64_t x;
        if (be(r, 1, 8, &x))
            return GKV_EPROTO;
        *v = x;
        r->p += 9;
        return 0;
    }
    const uint8_t *save = r->p;
    int64_t s;
    if (gkv_read_int(r, &s))
        return GKV_EPROTO;
    if (s < 0) {
        r->p = save;
        return GKV_EPROTO;
    }
    *v = (uint64_t)s;
    return 0;
}

int gkv_read_bin(gkv_reader_t *r, gkv_slice_t *s)
{
    if (r->p >= r->end)
        return GKV_EPROTO;
    uint8_t t = r->p[0];
    uint64_t len;
    size_t hdr;
    if ((t & 0xe0) == 0xa0) {
        len = t & 0x1f;
        hdr = 1;
    } else if (t == 0xc4 || t == 0xd9) {
        if (be(r, 1, 1, &len))
            return GKV_EPROTO;
        hdr = 2;
    } else if (t == 0xc5 || t == 0xda) {
        if (be(r, 1, 2, &len))
            return GKV_EPROTO;
        hdr = 3;
    } else if (t == 0xc6 || t == 0xdb) {
        if (be(r, 1, 4, &len))
            return GKV_EPROTO;
        hdr = 5;
    } else {
        return GKV_EPROTO;
    }
    if (len > gkv_read_left(r) - hdr)
        return GKV_EPROTO;
    s->p = r->p + hdr;
    s->len = (uint32_t)len;
    r->p += hdr + len;
    return 0;
}

int gkv_read_nil(gkv_reader_t *r)
{
    if (r->p >= r->end || r->p[0] != 0xc0)
        return GKV_EPROTO;
    r->p++;
    return 0;
}

static int skip(gkv_reader_t *r, int depth)
{
    if (depth > GKV_MAX_DEPTH || r->p >= r->end)
        return GKV_EPROTO;
    uint8_t t = r->p[0];
    gkv_slice_t s;
    int64_t i;
    uint32_t n;
    if (t <= 0x7f || t >= 0xe0 || (t >= 0xcc && t <= 0xd3))
        return t == 0xcf ? gkv_read_uint(r, &(uint64_t){0}) : gkv_read_int(r, &i);
    if (t == 0xc0 || t == 0xc2 || t == 0xc3) {
        r->p++;
        return 0;
    }
    if ((t & 0xe0) == 0xa0 || t == 0xc4 || t == 0xc5 || t == 0xc6 || t == 0xd9 || t == 0xda ||
        t == 0xdb)
        return gkv_read_bin(r, &s);
    if (t == 0xca || t == 0xcb) { /* float32/64 */
        size_t n2 = t == 0xca ? 5 : 9;
        if (gkv_read_left(r) < n2)
            return GKV_EPROTO;
        r->p += n2;
        return 0;
    }
    const uint8_t *save = r->p;
    int is_map = (t & 0xf0) == 0x80 || t == 0xde || t == 0xdf;
    if (container(r, is_map, &n))
        return GKV_EPROTO; /* ext types and the reserved byte are refused too */
    for (uint64_t k = 0; k < (uint64_t)n * (is_map ? 2 : 1); k++) {
        if (skip(r, depth + 1)) {
            r->p = save;
            return GKV_EPROTO;
        }
    }
    return 0;
}

int gkv_read_skip(gkv_reader_t *r)
{
    const uint8_t *save = r->p;
    int rc = skip(r, 0);
    if (rc)
        r->p = save;
    return rc;
}
