/* notify.h: telling systemd how the service is doing (Type=notify): READY once listening,
 * RELOADING/READY around SIGHUP, STOPPING at SIGTERM, STATUS lines, and the watchdog's pings
 * when WatchdogSec= is set. Without libsystemd at build time, or outside systemd
 * (no NOTIFY_SOCKET), every call does nothing. */
#ifndef GKV_SERVER_NOTIFY_H
#define GKV_SERVER_NOTIFY_H

#include <stdint.h>

/* Sends state lines ("READY=1\nSTATUS=..."), formatted like printf. */
void gkv_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The file descriptor store (fdstore.h), written by hand (SCM_RIGHTS on $NOTIFY_SOCKET, as
 * sd_pid_notify_with_fds does) so that it works without libsystemd and a test can play the
 * service manager. gkv_notify_fd stores fd (borrowed) under name; gkv_notify_fd_remove removes
 * every descriptor stored under name. Return 0, or -1 with errno (no $NOTIFY_SOCKET: ENOENT). */
int gkv_notify_fd(const char *name, int fd);
int gkv_notify_fd_remove(const char *name);
/* True when $NOTIFY_SOCKET names a socket. */
int gkv_notify_available(void);
/* The watchdog interval systemd asked for in milliseconds, 0 when none. */
uint64_t gkv_notify_watchdog_ms(void);

#endif
