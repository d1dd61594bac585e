/* procstat.h: what Prometheus client libraries export about their process (process_* series:
 * CPU time, resident and virtual memory, descriptors, start time), read from /proc/self, so that
 * gpukvd's /metrics carries them as exporters' do. */
#ifndef GKV_SERVER_PROCSTAT_H
#define GKV_SERVER_PROCSTAT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    double cpu_seconds; /* user + system */
    uint64_t resident_bytes, virtual_bytes;
    uint64_t open_fds, max_fds;
    double start_time_seconds; /* since the Unix epoch */
} gkv_procstat_t;

/* Reads this process's figures into *out. False when /proc could not be read (fields not read
 * stay 0). */
bool gkv_procstat_read(gkv_procstat_t *out);

#endif
