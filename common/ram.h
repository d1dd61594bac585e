/* ram.h: the host memory this process may use: the machine's RAM, or less where a cgroup (a
 * container's memory limit, a systemd unit's MemoryMax=) caps it. The daemon's host-memory
 * defaults (the host backend's arena, --maxmemory-keys) are fractions of it, so that a pod with an
 * 8 GiB limit refuses writes before the kernel's OOM killer ends it. */
#ifndef GKV_COMMON_RAM_H
#define GKV_COMMON_RAM_H

#include <stdint.h>

/* The lowest memory limit of the cgroups (v2, or v1's memory controller) that contain this
 * process, read under root ("/" on a real system; a test passes a directory holding proc/ and
 * sys/fs/cgroup/ files). 0 when none is set ("max", absent files, no cgroup). */
uint64_t gkv_ram_cgroup_limit(const char *root);

/* min(physical RAM, gkv_ram_cgroup_limit("/")); 0 only when RAM cannot be read. */
uint64_t gkv_ram_usable(void);

#endif
