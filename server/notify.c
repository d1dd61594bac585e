/* notify.c: sd_notify from libsystemd, or nothing. */
#include "notify.h"

#include <stdarg.h>
#include <stdio.h>

#ifdef GKV_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

void gkv_notify(const char *fmt, ...)
{
#ifdef GKV_HAVE_SYSTEMD
    char state[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(state, sizeof(state), fmt, ap);
    va_end(ap);
    sd_notify(0, state);
#else
    (void)fmt;
#endif
}

uint64_t gkv_notify_watchdog_ms(void)
{
#ifdef GKV_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec / 1000;
#endif
    return 0;
}
