/* recv.c: a SET's payload into its value. Values up to GKV_BATCH_VALUE_MAX join a copy batch
 * whole from the input buffer; larger ones arrive chunk by chunk in a staging buffer (read
 * straight into it when nothing is buffered before them), each chunk a backend copy while the
 * next arrives, except the last, which joins a copy batch. */
#include <stdlib.h>
#include <string.h>

#include "conn_impl.h"
#include "error.h"
#include "log.h"

/* Bytes of the payload not yet read into stage (or sent on in the flight). */
static uint64_t payload_pending(const gkv_conn_t *c)
{
    return c->rcv.entry->size - c->rcv.got - c->rcv.flight_len - c->stage_fill;
}

void gkv_conn_flight_landed(gkv_conn_t *c)
{
    c->rcv.got += c->rcv.flight_len;
    c->rcv.flight_len = 0;
    if (c->stage || c->closing || c->phase != CONN_PAYLOAD) {
        gkv_conn_put_stage(c, &c->rcv.flight);
        return;
    }
    if (c->wait.stage) { /* this one will do */
        gkv_staging_cancel(c->net->staging, &c->waiter);
        c->wait.stage = false;
    }
    c->stage = c->rcv.flight;
    c->rcv.flight = NULL;
}

/* Starts copying stage's bytes into the value as the flight. With overlap, reading goes on into
 * a second buffer meanwhile when one is free; otherwise c waits for the copy (copy_busy). */
void gkv_conn_start_flight(gkv_conn_t *c, bool overlap)
{
    gkv_net_t *net = c->net;
    c->rcv.flight = c->stage;
    c->rcv.flight_len = c->stage_fill;
    c->stage = NULL;
    c->stage_fill = 0;
    if (overlap && payload_pending(c))
        c->stage = gkv_staging_try(net->staging);
    c->wait.copy = !c->stage;
    gkv_device_t *d = gkv_devices_of(net->devs, c->rcv.entry);
    int rc = !gkv_conn_copy_begin(c)
                 ? GKV_ECLOSED
                 : d->be->ops->copy_in(d->be, c->rcv.entry->mem, c->rcv.got, c->rcv.flight,
                                       c->rcv.flight_len, c->lane, &c->copy);
    if (rc) { /* nothing is in flight after all */
        c->rcv.flight_len = 0;
        gkv_conn_put_stage(c, &c->rcv.flight);
    }
    gkv_conn_copy_started(c, d, rc);
}

/* The payload's command has answered (rc): c drops the entry and reads the next header. */
static void recv_end(gkv_conn_t *c, int rc)
{
    gkv_conn_op_done(c, rc);
    gkv_store_unref(c->net->store, c->rcv.entry);
    c->rcv.entry = NULL;
    c->phase = CONN_HEADER;
    c->frame_since = 0;
}

/* The payload is in (or on its way in a copy batch): its command finishes. A SET the cluster
 * deferred (c->route.defer) is published by the cluster instead, at once or once the key's home
 * recorded it (then c waits, wait.cluster). *holder: the entry holding the value (NULL: none). */
static int payload_done(gkv_conn_t *c, gkv_entry_t *e, gkv_entry_t **holder)
{
    gkv_net_t *net = c->net;
    if (!c->route.defer)
        return c->rcv.cmd->on_payload(net->cmd, c->rcv.req_id, e, c->rcv.flags, &c->out, holder);
    int rc;
    gkv_entry_t *h = e;
    if (gkv_cluster_commit(net->cluster, &c->route, c->rcv.req_id, e, c->rcv.flags, &c->out,
                           &rc, &h) == GKV_ROUTE_PARK)
        c->wait.cluster = true;
    if (holder)
        *holder = h; /* the batch copies into h's memory, published now or later */
    return rc;
}

static void recv_commit(gkv_conn_t *c)
{
    recv_end(c, payload_done(c, c->rcv.entry, NULL));
    gkv_conn_release_stage(c);
}

/* A small SET: once the whole payload is in, its bytes go into the copy batch and the value is
 * published and answered at once; the batch copies it before anything else can read it
 * (batch.h). Returns like gkv_conn_recv_step. */
static bool recv_batched(gkv_conn_t *c)
{
    gkv_net_t *net = c->net;
    gkv_entry_t *e = c->rcv.entry, *holder = NULL;
    uint32_t size = (uint32_t)e->size;
    if (c->in_len - c->in_pos < size)
        return false; /* the input buffer (64 KiB at least) holds a whole small payload */
    gkv_batcher_t *b = &gkv_devices_of(net->devs, e)->batcher; /* holder's too: e's value moves */
    void *dst = gkv_batch_in_reserve(b, size, &c->bwaiter);
    if (!dst) {
        c->wait.batch = true;
        return false;
    }
    memcpy(dst, c->in + c->in_pos, size);
    c->in_pos += size;
    bool deferred = c->route.defer;
    int rc = payload_done(c, e, &holder);
    if (rc == 0 || deferred) {
        /* A deferred value is copied in whatever the cluster said: the batch holds its own
         * reference, and its bytes are reserved already. Its host copy only once published
         * (at once: its home is this node). */
        gkv_batch_in_commit(b, holder ? holder : e);
        if (rc == 0 && !c->wait.cluster)
            gkv_hostcopy_put(&net->store->hc, holder, dst, size);
    }
    recv_end(c, rc);
    return true;
}

/* A larger SET's last chunk, in stage, every chunk before it copied: like a small SET, the
 * value is published and answered at once and the chunk joins the copy batch (batch.h) as a
 * bulk copy that takes the buffer over. The value was allocated in the batches' order when it
 * is one chunk (conn.c); earlier chunks' copies have finished. Returns like gkv_conn_recv_step. */
static bool recv_bulk(gkv_conn_t *c)
{
    gkv_net_t *net = c->net;
    gkv_batcher_t *b =
        &gkv_devices_of(net->devs, c->rcv.entry)->batcher; /* holder's too: the value moves */
    if (!gkv_batch_bulk_room(b, &c->bwaiter)) {
        c->wait.batch = true;
        return false;
    }
    gkv_entry_t *e = c->rcv.entry, *holder = NULL;
    void *stage = c->stage;
    uint64_t off = c->rcv.got, len = c->stage_fill;
    c->stage = NULL;
    c->stage_fill = 0;
    bool deferred = c->route.defer;
    int rc = payload_done(c, e, &holder);
    /* No host copy here: copying 64 KiB cost a SET more (3-6 us on the H100) than the first
     * GET's read-through costs; small values' copies (recv_batched) cost well under 1 us. */
    if (rc == 0 || deferred) /* holder holds the memory the chunks before went to (store.h) */
        gkv_batch_in_bulk(b, holder ? holder : e, off, stage, len);
    else
        gkv_staging_put(net->staging, stage);
    recv_end(c, rc);
    return true;
}

uint8_t *gkv_conn_read_target(gkv_conn_t *c, size_t *len)
{
    c->rcv.to_stage = false;
    gkv_entry_t *e = c->rcv.entry;
    if (c->phase != CONN_PAYLOAD || !e || e->size <= GKV_BATCH_VALUE_MAX || c->wait.copy ||
        c->in_pos != c->in_len)
        return NULL;
    uint64_t pending = payload_pending(c);
    if (!pending || c->stage_fill == GKV_STAGING_CHUNK)
        return NULL;
    if (!c->stage && !(c->stage = gkv_staging_try(c->net->staging)))
        return NULL; /* the input buffer takes it; a buffer is waited for in line later */
    size_t room = GKV_STAGING_CHUNK - c->stage_fill;
    *len = pending < room ? (size_t)pending : room;
    c->rcv.to_stage = true;
    return (uint8_t *)c->stage + c->stage_fill;
}

bool gkv_conn_recv_step(gkv_conn_t *c)
{
    gkv_entry_t *e = c->rcv.entry;
    if (e->size <= GKV_BATCH_VALUE_MAX)
        return recv_batched(c);
    uint64_t pending = payload_pending(c);
    size_t avail = c->in_len - c->in_pos;
    if (pending && avail && c->stage_fill < GKV_STAGING_CHUNK) {
        if (!c->stage && !gkv_conn_take_stage(c))
            return false;
        size_t n = avail < pending ? avail : (size_t)pending;
        size_t room = GKV_STAGING_CHUNK - c->stage_fill;
        if (n > room)
            n = room;
        memcpy((uint8_t *)c->stage + c->stage_fill, c->in + c->in_pos, n);
        c->stage_fill += n;
        c->in_pos += n;
        pending -= n;
    }
    if (c->stage_fill == GKV_STAGING_CHUNK || (!pending && c->stage_fill)) {
        if (c->rcv.flight) { /* one copy at a time, in order: wait for the one before */
            c->wait.copy = true;
            return false;
        }
        if (!pending)
            return recv_bulk(c);
        gkv_conn_start_flight(c, true);
        return !c->wait.copy && !c->closing;
    }
    if (!pending) {
        if (c->rcv.flight) {
            c->wait.copy = true;
            return false;
        }
        recv_commit(c);
        return true;
    }
    return false; /* all the input went into stage, which has room: wait for more */
}
