/* trace.h: a timeline of steps, for measurements (the data plane's pulls and what answers
 * around them). With GPUKV_TRACE=PATH each process appends a line "microseconds event value
 * part thread" per step to PATH.PID (monotonic clock, comparable between the processes of one
 * machine; thread: the kernel's thread id); bench/nixl_trace.py reads them. Without the
 * variable a call costs a branch. */
#ifndef GKV_TRACE_H
#define GKV_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* ev: a short word ("o_in", "r_send", ...); value: what it is about (a chunk's offset); part:
 * a part's number or 0. Any thread. */
void gkv_trace(const char *ev, uint64_t value, uint64_t part);

/* gkv_trace with a key's first 8 bytes as the value (little-endian; shorter keys padded with
 * zeros), so a timeline names the keys its steps were about ("lin/6" reads back as text).
 * Without the variable, a branch too: the key is packed only when a trace is written. */
void gkv_trace_key(const char *ev, const void *key, size_t len, uint64_t part);

#endif
