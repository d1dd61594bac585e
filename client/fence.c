/* fence.c: asynchronous seals (gkv_seal_async, gkv_seal_deferred; PROTOCOL.md "Asynchronous
 * seal"). The daemon passed a fence page of 64 counters with HELLO. A seal takes a counter whose
 * last target was reached (its work is done) and the next target, has the producer's stream
 * write the target there (cuStreamWriteValue64 through the page's device address, enqueued
 * before the SEAL goes out) or leaves that to the caller, and sends SEAL naming both; the
 * daemon publishes the value once the counter has reached the target. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "import.h"
#include "mapping_impl.h"

/* Maps the fence page (once). 0, or GKV_ENOTSUP (none was passed, or it cannot be mapped). */
static int map_page(gkv_client_t *c)
{
    if (c->fence_map)
        return 0;
    if (c->fence_fd < 0) {
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "the daemon passed no fence page (a Unix socket connection with zero-copy "
                 "to a daemon that is not a cluster node gets one)");
        return GKV_ENOTSUP;
    }
    void *p = mmap(NULL, c->fence_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fence_fd, 0);
    if (p == MAP_FAILED) {
        snprintf(c->errmsg, sizeof(c->errmsg), "the fence page could not be mapped");
        return GKV_ENOTSUP;
    }
    c->fence_map = p;
    return 0;
}

void gkv__fence_close(gkv_client_t *c)
{
    if (c->fence_dev) /* CUDA waits for writes still queued into it */
        gkv__cuda_host_unregister(c->fence_map);
    if (c->fence_map)
        munmap(c->fence_map, c->fence_size);
    if (c->fence_fd >= 0)
        close(c->fence_fd);
    c->fence_dev = NULL;
    c->fence_map = NULL;
    c->fence_fd = -1;
}

/* A counter whose last target was reached, or -1 when every one waits for its stream. */
static int free_counter(gkv_client_t *c)
{
    uint64_t n = c->fence_size / sizeof(uint64_t);
    for (uint64_t i = 0; i < n && i < 64; i++)
        if (__atomic_load_n(&c->fence_map[i], __ATOMIC_ACQUIRE) >= c->fence_last[i])
            return (int)i;
    return -1;
}

/* Sends SEAL with async naming counter i and target t for pub (seal_end reads the reply). */
static int seal_send(gkv_client_t *c, gkv_mapping_t *pub, int i, uint64_t t)
{
    (void)gkv__end_later_now(c);
    gkv__seal_begin(c, pub, GKV_SEAL_KEEP);
    gkv_wr_uint(&c->wr, GKV_F_ASYNC, 1);
    gkv_wr_uint(&c->wr, GKV_F_FENCE, (uint64_t)i * sizeof(uint64_t));
    gkv_wr_uint(&c->wr, GKV_F_TARGET, t);
    return gkv__send(c, NULL, 0);
}

/* Reads the reply of seal_send's SEAL (rc: what seal_send returned). On success pub becomes a
 * read mapping in the lease cache; after NOTSUP, INVAL or BUSY it is still the caller's,
 * writable; after anything else it is gone. */
static int seal_end(gkv_client_t *c, gkv_mapping_t *pub, int rc)
{
    mapping_t *m = (mapping_t *)pub;
    if (rc == 0)
        rc = gkv__recv(c);
    if (c->broken || rc == GKV_ENOLEASE) {
        int drc = gkv__mapping_drop(c, pub); /* no lease is held for it */
        return rc ? rc : drc;
    }
    if (rc == GKV_ENOTSUP || rc == GKV_EBUSY || rc == GKV_EINVAL)
        return rc; /* refused before anything changed */
    if (rc) {
        gkv__lease_release(c, &pub, 1);
        return rc;
    }
    /* As a synchronous seal that keeps its lease: a read lease on the value from now on. */
    m->flags = 0;
    m->ttl_ms = 0;
    pub->writable = 0;
    return gkv__lease_cache(c, pub);
}

/* The checks both calls make, and the counter and target of the seal: 0 or a code (m is still
 * the caller's). */
static int prepare(gkv_client_t *c, gkv_mapping_t *pub, int *i, uint64_t *t)
{
    mapping_t *m = (mapping_t *)pub;
    if (!pub || !pub->writable || (m->flags & (GKV_SET_NX | GKV_SET_XX)))
        return GKV_EINVAL;
    if (c->broken) {
        gkv__mapping_drop(c, pub); /* the connection's end ended the lease */
        return GKV_ECLOSED;
    }
    int rc = map_page(c);
    if (rc)
        return rc;
    if ((*i = free_counter(c)) < 0) {
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "every fence counter of this connection waits for its stream");
        return GKV_EBUSY;
    }
    *t = c->fence_last[*i] + 1;
    return 0;
}

int gkv_seal_deferred(gkv_client_t *c, gkv_mapping_t *pub, gkv_fence_t *f)
{
    int i;
    uint64_t t;
    if (!f)
        return GKV_EINVAL;
    int rc = prepare(c, pub, &i, &t);
    if (rc)
        return rc;
    f->counter = c->fence_map + i;
    f->device_counter = c->fence_dev ? (uint8_t *)c->fence_dev + (size_t)i * 8 : NULL;
    f->target = t;
    rc = seal_end(c, pub, seal_send(c, pub, i, t));
    if (rc == 0 || (rc != GKV_ENOTSUP && rc != GKV_EBUSY && rc != GKV_EINVAL))
        c->fence_last[i] = t; /* the caller may write it: never give this target again */
    return rc;
}

int gkv_seal_async(gkv_client_t *c, gkv_mapping_t *pub, void *stream)
{
    int i;
    uint64_t t;
    int rc = prepare(c, pub, &i, &t);
    if (rc)
        return rc;
    if (!pub->on_device) { /* host memory: the caller's writes are done */
        __atomic_store_n(&c->fence_map[i], t, __ATOMIC_RELEASE);
        c->fence_last[i] = t;
        return seal_end(c, pub, seal_send(c, pub, i, t));
    }
    /* The counter must be writable by the stream before the seal goes out. */
    if (!c->fence_dev && gkv__cuda_host_register(c->fence_map, c->fence_size, &c->fence_dev)) {
        snprintf(c->errmsg, sizeof(c->errmsg), "the fence page could not be registered with CUDA");
        return GKV_ENOTSUP;
    }
    /* The SEAL goes out first and the counter's write is enqueued while it travels: the daemon
     * watches the counter from the SEAL on, whenever the stream gets there. */
    rc = seal_send(c, pub, i, t);
    c->fence_last[i] = t; /* written or on its way: the counter reaches t whatever comes back */
    bool lost = false;
    if (gkv__cuda_write_value(stream, (uint8_t *)c->fence_dev + (size_t)i * 8, t)) {
        /* The stream cannot write it: wait for the stream here instead. */
        if (gkv__cuda_stream_sync(stream) == 0)
            __atomic_store_n(&c->fence_map[i], t, __ATOMIC_RELEASE);
        else
            lost = true; /* never written: the daemon discards the value at close */
    }
    rc = seal_end(c, pub, rc);
    return rc == 0 && lost ? GKV_EIO : rc;
}
