/* hostport.h: "host:port" as the daemon's --listen, the tcp: URLs of libgpukv and the
 * benchmarks write it (an IPv6 host in brackets: "[::1]:6380"). */
#ifndef GKV_COMMON_HOSTPORT_H
#define GKV_COMMON_HOSTPORT_H

#include <stddef.h>

/* Splits s into *host and *port, both pointing into buf (cap bytes, the caller's), brackets
 * removed from the host. The port is 0..65535 in decimal. Returns 0, or GKV_EINVAL when s has no
 * ':', a bad port or does not fit in buf. */
int gkv_hostport_split(const char *s, char *buf, size_t cap, const char **host,
                       const char **port);

#endif
