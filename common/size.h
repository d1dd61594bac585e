/* size.h: byte sizes written by people ("512M", "4G") to numbers and back. */
#ifndef GKV_COMMON_SIZE_H
#define GKV_COMMON_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parses a decimal integer with an optional binary suffix K, M, G or T (also KB, KiB, ...,
 * any case). s is borrowed. Returns 0 and *out, or GKV_EINVAL for anything else, including
 * overflow, signs, spaces and empty strings. */
int gkv_size_parse(const char *s, uint64_t *out);
/* Reads the decimal digits at *s (at least one) into *n and moves *s past them. Returns 0, or
 * GKV_EINVAL when there is no digit or the number overflows. Shared by sizes and durations. */
int gkv_parse_digits(const char **s, uint64_t *n);
/* Writes n in the largest unit that keeps one decimal ("1.5G", "512M", "37B") into buf. */
void gkv_size_format(uint64_t n, char *buf, size_t cap);

#endif
