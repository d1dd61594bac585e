/* fence.h: asynchronous seals (SEAL with async; PROTOCOL.md "Asynchronous seal", guarantees in
 * docs/handoff.md). A local zero-copy connection that asks at HELLO (fences) gets a fence page:
 * GKV_FENCE_SLOTS 64-bit counters in a memfd of its own, passed with HELLO's descriptors, which
 * both processes map (the client registers it with CUDA, so that its streams can write it).
 *
 * The client picks the counters: an asynchronous SEAL of a created value names one (fence) and
 * its target, the counter's next generation, above every target given for it before; the
 * client's stream writes the target into the counter once the producer's writes are done
 * (cuStreamWriteValue64, enqueued before the SEAL is sent), or the client stores it (host
 * memory). A counter only grows, and the client reuses one only once it holds its last target
 * (that work is done), so a counter at or past a seal's target means that seal's writes are
 * done. The value meanwhile stays unpublished: the daemon looks at the counter at the SEAL,
 * then polls the counters of the seals that wait (on the loop: spinning for 5 ms after each
 * seal or publication, then every 50 us until a second after it, then once a millisecond:
 * fence.c) and publishes a connection's seals in the
 * order they were sent, each once its counter has reached its target, so readers only ever see
 * complete values.
 * The connection's lease on the value becomes a read lease at once (on the value, which stays
 * the same memory when published), so the client's import stays covered.
 *
 * A connection that closes first discards the seals that wait (never published); its page goes
 * with it. A synchronous SEAL of a connection whose asynchronous seals wait, waits for them.
 * At most GKV_FENCE_SLOTS seals wait per connection (one more: BUSY). */
#ifndef GKV_NET_FENCE_H
#define GKV_NET_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "lease.h"
#include "message.h"

typedef struct gkv_conn gkv_conn_t;
typedef struct gkv_net gkv_net_t;
typedef struct gkv_fences gkv_fences_t;

#define GKV_FENCE_SLOTS 64
#define GKV_FENCE_PAGE 4096u

/* Sets up net's polling of fences (handles on net->loop). 0 or GKV_ENOMEM. */
int gkv_fences_init(gkv_net_t *net);
/* Starts closing the handles (no connection has a seal waiting any more). */
void gkv_fences_close(gkv_net_t *net);
void gkv_fences_free(gkv_net_t *net);
/* HELLO gave c a fence page: creates it, and *fd (owned by the caller, for the reply's
 * descriptors) is the client's. 0, or GKV_ESYS / GKV_ENOMEM. */
int gkv_fence_open(gkv_conn_t *c, int *fd);
/* SEAL with async of lease l (writable, held by c), naming req->fence and req->target: writes
 * the reply (status 0; or NOTSUP without a fence page, INVAL for a counter outside the page or
 * a target not above the counter's last, BUSY with GKV_FENCE_SLOTS seals waiting). Returns 0 or
 * the error code written. */
int gkv_fence_seal(gkv_conn_t *c, const gkv_request_t *req, gkv_lease_t *l);
/* An asynchronous seal of key (klen bytes) that waits for its fence (the newest of a
 * connection's, when several do; any connection's), or NULL. *linked is its flag to set when
 * an early MAP was given its value (keywait.h): it is then published by linking. */
gkv_entry_t *gkv_fence_pending(gkv_net_t *net, const uint8_t *key, size_t klen, bool **linked);
/* True while c has asynchronous seals waiting. */
bool gkv_fence_waiting(const gkv_conn_t *c);
/* c closes: its waiting seals are discarded, its page unmapped. */
void gkv_fence_cancel(gkv_conn_t *c);
/* Seals waiting now; published and discarded in all; the microseconds publications took after
 * their seal, summed, and the longest. */
void gkv_fences_stats(const gkv_net_t *net, uint64_t *waiting, uint64_t *published,
                      uint64_t *discarded, uint64_t *wait_us, uint64_t *max_us);

#endif
