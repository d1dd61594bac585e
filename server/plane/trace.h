/* trace.h: a timeline of the data plane's steps, for measurements. With GPUKV_NIXL_TRACE=PATH
 * each process appends a line "microseconds event value part" per step to PATH.PID (monotonic
 * clock, comparable between the processes of one machine); bench/nixl_trace.py reads them.
 * Without the variable a call costs one load and a branch. */
#ifndef GKV_PLANE_TRACE_H
#define GKV_PLANE_TRACE_H

#include <stdint.h>

/* ev: a short word ("o_in", "r_send", ...); value: what it is about (a chunk's offset); part:
 * a part's number or 0. Any thread. */
void gkv_plane_trace(const char *ev, uint64_t value, uint64_t part);

#endif
