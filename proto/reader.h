/* reader.h: a bounded msgpack pull reader. Every declared length and count is checked against
 * the bytes that remain before it is believed, so a hostile header can never make anything
 * allocate (unlike msgpack-c's unpacker, which sizes allocations from declared counts). */
#ifndef GKV_PROTO_READER_H
#define GKV_PROTO_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p, *end; /* borrowed: the reader never copies */
} gkv_reader_t;

/* A byte string inside the buffer being read (borrowed from it). */
typedef struct {
    const uint8_t *p;
    uint32_t len;
} gkv_slice_t;

void gkv_read_init(gkv_reader_t *r, const void *buf, size_t len);
/* Each reads one value of its type and returns 0, or GKV_EPROTO (wrong type, truncated, or a
 * count larger than the bytes left could hold) leaving the reader where it was. */
int gkv_read_map(gkv_reader_t *r, uint32_t *n);
int gkv_read_array(gkv_reader_t *r, uint32_t *n);
int gkv_read_uint(gkv_reader_t *r, uint64_t *v);  /* accepts non-negative ints of any width */
int gkv_read_int(gkv_reader_t *r, int64_t *v);    /* accepts any integer that fits int64 */
int gkv_read_bin(gkv_reader_t *r, gkv_slice_t *s); /* accepts bin or str */
int gkv_read_nil(gkv_reader_t *r);
/* Skips one value of any type, nested at most GKV_MAX_DEPTH deep. */
int gkv_read_skip(gkv_reader_t *r);
/* Bytes not read yet. */
size_t gkv_read_left(const gkv_reader_t *r);

#endif
