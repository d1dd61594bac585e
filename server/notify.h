/* notify.h: telling systemd how the service is doing (Type=notify): READY once listening,
 * RELOADING/READY around SIGHUP, STOPPING at SIGTERM, STATUS lines, and the watchdog's pings
 * when WatchdogSec= is set. Without libsystemd at build time, or outside systemd
 * (no NOTIFY_SOCKET), every call does nothing. */
#ifndef GKV_SERVER_NOTIFY_H
#define GKV_SERVER_NOTIFY_H

#include <stdint.h>

/* Sends state lines ("READY=1\nSTATUS=..."), formatted like printf. */
void gkv_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The watchdog interval systemd asked for in milliseconds, 0 when none. */
uint64_t gkv_notify_watchdog_ms(void);

#endif
