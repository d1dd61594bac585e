/* duration.h: spans of time written by people ("30s", "500ms", "2m") to milliseconds, the wall
 * clock that times leaving the process (snapshots, the journal) are written in, and the
 * monotonic clock the daemon keeps time with. */
#ifndef GKV_COMMON_DURATION_H
#define GKV_COMMON_DURATION_H

#include <stdint.h>

/* Parses a decimal integer with an optional unit: ms, s, m or h (none: seconds). s is
 * borrowed. Returns 0 and *ms, or GKV_EINVAL for anything else: signs, spaces, fractions,
 * overflow, unknown units, empty strings. */
int gkv_duration_parse(const char *s, uint64_t *ms);
/* The wall clock (CLOCK_REALTIME) in Unix milliseconds. */
uint64_t gkv_wall_clock_ms(void);
/* The daemon's clock (the store's access stamps and deadlines, uptime): milliseconds of
 * CLOCK_MONOTONIC, the clock libuv's uv_hrtime and uv_now run on, read now rather than at the
 * start of the loop's iteration, which a busy iteration makes stale by milliseconds (a deadline
 * would then fall early). */
uint64_t gkv_clock_ms(void);
/* The same clock in microseconds, for timing work. */
uint64_t gkv_clock_us(void);

#endif
