/* fdreserve.h: the process's file descriptor table, grown once at start. Linux grows a
 * process's table when a new descriptor does not fit, and in a process with threads it then
 * waits for an RCU grace period (expand_fdtable: synchronize_rcu), 10-40 ms on a busy machine,
 * inside whichever accept4, socket or open asked: measured on the GPU machine as the loop stalled
 * in accept4 and a node's dial in socket() (bench/RESULTS.md, session 48). Grown while the
 * process has one thread, the table never grows on a request's path again. */
#ifndef GKV_FDRESERVE_H
#define GKV_FDRESERVE_H

#include <stddef.h>
#include <stdint.h>

#define GKV_FD_SPARE 1024 /* descriptors beyond maxclients: peers, GPUs, NIXL, files */

/* Raises the soft RLIMIT_NOFILE toward want (never past the hard limit) and grows the table to
 * hold min(want, that limit) descriptors. Call before any thread starts. Returns the table's
 * size now (0 when it could not grow it); *limit gets the soft limit. */
uint64_t gkv_fd_reserve(uint64_t want, uint64_t *limit);

#endif
