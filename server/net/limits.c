/* limits.c: a connection's deadlines, checked by the net's sweep every 250 ms. A frame
 * that started must arrive within --frame-timeout (a header whole; a payload at least
 * PROGRESS_MIN bytes per period), output the client does not take for --write-timeout ends the
 * connection, and a connection with nothing in flight closes after --idle-timeout. Closing
 * drops whatever the connection held: a SET's reservation, references to values being sent,
 * its staging buffer, its leases. */
#include "conn_impl.h"

#include "log.h"

#define PROGRESS_MIN (64u << 10) /* bytes a payload must bring per --frame-timeout */
#define STAGE_STALL_MS 500       /* a client this long silent gives its buffer to waiters */

static bool frame_stalled(gkv_conn_t *c, uint64_t now, uint64_t limit)
{
    if (!c->frame_since || !limit)
        return false;
    if (!c->reading) {
        /* The server is not asking for input (it waits for a copy, a buffer, or for the
         * client to read): the client is not late. */
        c->frame_since = now;
        c->frame_bytes = 0;
        return false;
    }
    if (now - c->frame_since < limit)
        return false;
    if (c->phase != CONN_HEADER && c->frame_bytes >= PROGRESS_MIN) {
        c->frame_since = now; /* a payload that keeps moving gets another period */
        c->frame_bytes = 0;
        return false;
    }
    return true;
}

static bool idle(const gkv_conn_t *c, uint64_t now, uint64_t limit)
{
    return limit && c->phase == CONN_HEADER && c->in_pos == c->in_len && !c->wait.copy &&
           !gkv_conn_held(c) && !c->snd.pending && !c->out.sb.size && !c->leases.count &&
           !c->watch && now - c->active_at >= limit; /* a watcher waits for events */
}

void gkv_conn_sweep(gkv_conn_t *c, uint64_t now)
{
    gkv_net_t *net = c->net;
    const gkv_net_settings_t *cfg = &net->set;
    const char *why = NULL;
    if (uv_is_closing(&c->h.handle))
        return;
    if (c->auth_hold_until && now >= c->auth_hold_until) {
        c->auth_hold_until = 0;
        c->hold.auth = false;
        gkv_conn_resume(c); /* the failed HELLO's reply goes out; c closes */
        return;
    }
    if (c->stage && gkv_waitq_busy(&net->staging->waiters) &&
        now - c->active_at >= STAGE_STALL_MS && gkv_conn_yield_stage(c))
        net->stats.staging_yields++;
    if (c->snd.pending && cfg->write_timeout_ms &&
        now - c->snd.write_since >= cfg->write_timeout_ms) {
        net->stats.write_timeouts++;
        why = "it took no output for --write-timeout";
    } else if (c->closing) {
        return;
    } else if (frame_stalled(c, now, cfg->frame_timeout_ms)) {
        net->stats.frame_timeouts++;
        why = "a frame it began did not arrive within --frame-timeout";
    } else if (idle(c, now, cfg->idle_timeout_ms)) {
        net->stats.idle_timeouts++;
        GKV_DEBUG("conn %llu: idle for --idle-timeout; closing", (unsigned long long)c->id);
        gkv_conn_close(c, true);
        return;
    } else {
        return;
    }
    GKV_INFO("conn %llu: closing: %s", (unsigned long long)c->id, why);
    gkv_conn_abort(c);
}
