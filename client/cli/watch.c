/* watch.c: gpukv watch: the changes of the keys under a prefix, a line each, as they happen. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static const char *kind_name(gkv_event_kind_t k)
{
    static const char *const names[] = {"?", "set", "delete", "expire", "evict", "flush"};
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

int gkv_cli_watch(gkv_client_t *c, const gkv_cli_args_t *a)
{
    const char *prefix = a->noperands ? a->operands[0] : "";
    int rc = a->local ? gkv_watch_local(c, prefix, strlen(prefix), NULL)
                      : gkv_watch(c, prefix, strlen(prefix), NULL);
    if (rc)
        return gkv_cli_fail(c, "watch", rc);
    uint64_t until = a->for_ms ? now_ms() + a->for_ms : 0;
    for (uint64_t n = 0; !a->count || n < a->count; n++) {
        int wait = -1;
        if (until) {
            uint64_t now = now_ms();
            if (now >= until)
                break;
            wait = (int)(until - now > 3600000 ? 3600000 : until - now);
        }
        gkv_event_t ev;
        rc = gkv_watch_next(c, &ev, wait);
        if (rc == GKV_ETIMEDOUT && until)
            break;
        if (rc)
            return gkv_cli_fail(c, "watch", rc);
        const char *node = gkv_watch_node(c);
        uint64_t version = gkv_watch_version(c);
        char vs[24] = "";
        if (version)
            snprintf(vs, sizeof(vs), "#%llu", (unsigned long long)version);
        printf("%llu%s%s%s %s %llu %.*s\n", (unsigned long long)ev.seq, *node ? "@" : "", node,
               vs, kind_name(ev.kind), (unsigned long long)ev.size, (int)ev.klen,
               (const char *)ev.key);
        fflush(stdout); /* a pipe sees each event as it comes */
    }
    rc = gkv_unwatch(c);
    return rc ? gkv_cli_fail(c, "unwatch", rc) : EXIT_OKAY;
}
