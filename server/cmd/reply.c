/* reply.c: building replies (reply.h). */
#include "reply.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

void gkv_reply_init(gkv_reply_t *rep, gkv_wr_t *wr, gkv_leases_t *leases)
{
    memset(rep, 0, sizeof(*rep));
    rep->wr = wr;
    rep->leases = leases;
    rep->in.version = GKV_PROTOCOL_VERSION;
    rep->in.peer_uid = rep->in.peer_pid = -1;
}

int gkv_reply_fail(gkv_reply_t *rep, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->msgbuf, sizeof(rep->msgbuf), fmt, ap);
    va_end(ap);
    rep->msg = rep->msgbuf;
    return code;
}

void gkv_reply_error(gkv_wr_t *wr, uint64_t id, int code, const char *msg)
{
    gkv_wr_error(wr, id, code, msg);
}

void gkv_reply_ok(gkv_wr_t *wr, uint64_t id)
{
    gkv_wr_ok(wr, id);
}

void gkv_reply_release(gkv_store_t *st, gkv_reply_t *rep)
{
    for (uint32_t i = 0; i < rep->nsegs; i++)
        gkv_store_unref(st, rep->segs[i].entry);
    if (rep->segs != &rep->one)
        free(rep->segs);
    rep->segs = NULL;
    rep->nsegs = 0;
    if (rep->recv)
        gkv_store_unref(st, rep->recv);
    rep->recv = NULL;
    if (rep->copied_from) {
        gkv_store_unref(st, rep->copied_from);
        gkv_store_unref(st, rep->copied_to);
    }
    rep->copied_from = rep->copied_to = NULL;
    if (rep->fence_hold)
        gkv_store_unref(st, rep->fence_hold);
    rep->fence_hold = NULL;
    rep->fence = rep->fence_batches = false;
    rep->fence_dev = 0;
}

int gkv_reply_count(gkv_reply_t *rep, uint64_t id, uint64_t count)
{
    gkv_reply_ok(rep->wr, id);
    gkv_wr_uint(rep->wr, GKV_F_COUNT, count);
    return gkv_wr_end(rep->wr);
}

void gkv_reply_add_segment(gkv_reply_t *rep, gkv_entry_t *e, uint64_t off, uint64_t len)
{
    gkv_store_ref(e);
    rep->segs[rep->nsegs++] = (gkv_segment_t){e, off, len};
}
