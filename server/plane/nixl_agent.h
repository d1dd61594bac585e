/* nixl_agent.h: this node's NIXL agent (one per daemon), over the C API loaded at run time
 * (nixl_api.h): the UCX backend, the memory it registers (the transfer arenas), the metadata
 * exchanged with other nodes' agents, and blocking transfers with a deadline. Thread-safe:
 * every call into NIXL holds the agent's lock, which polling drops between polls. */
#ifndef GKV_PLANE_NIXL_AGENT_H
#define GKV_PLANE_NIXL_AGENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nixl_api.h"

#define GKV_NIXL_REGS 8

/* UCX workers behind an agent unless GPUKV_NIXL_WORKERS says otherwise (nixl_agent.c: why). */
#define GKV_NIXL_WORKERS 4

typedef struct {
    const gkv_nixl_api_t *api; /* borrowed */
    gkv_nixl_h agent, backend;
    gkv_nixl_h regs[GKV_NIXL_REGS]; /* registration lists, deregistered at close */
    unsigned nregs;
    pthread_mutex_t lock;
    char name[128];
    uint64_t stuck; /* transfers that could not be released after their deadline */
    bool unlocked;  /* transfers run without the lock (NIXL's own RW locking) */
    unsigned workers;  /* UCX workers behind the agent (GKV_NIXL_WORKERS or GPUKV_NIXL_WORKERS) */
    gkv_nixl_h notifs; /* the map notifications are collected into */
} gkv_nixl_agent_t;

/* Creates agent name (unique among the cluster's agents: node name and incarnation) with a UCX
 * backend; gpu: it will move GPU memory (its progress thread then sleeps longer between rounds,
 * nixl_agent.c says why). Returns 0 or GKV_EIO with why (cap bytes). */
int gkv_nixl_agent_open(gkv_nixl_agent_t *a, const gkv_nixl_api_t *api, const char *name, bool gpu,
                        char *why, size_t cap);
/* Registers len bytes at addr, of kind mem (GKV_NIXL_DRAM, GKV_NIXL_VRAM with dev the CUDA
 * ordinal), for transfers. Returns 0 or GKV_EIO with why. Before any transfer. */
int gkv_nixl_agent_register(gkv_nixl_agent_t *a, void *addr, size_t len, int mem, uint64_t dev,
                            char *why, size_t cap);
/* This agent's metadata (what another agent loads to reach its memory): *md malloc'd, the
 * caller frees it. Returns 0 or GKV_EIO. */
int gkv_nixl_agent_md(gkv_nixl_agent_t *a, void **md, size_t *len);
/* Loads another agent's metadata; name gets its agent name (cap bytes). Returns 0 or GKV_EIO. */
int gkv_nixl_agent_load(gkv_nixl_agent_t *a, const void *md, size_t len, char *name, size_t cap);
/* Forgets an agent loaded before (its node left). */
void gkv_nixl_agent_forget(gkv_nixl_agent_t *a, const char *name);
/* With op GKV_NIXL_WRITE: writes len bytes at local addr (mem, dev: registered here) into
 * peer's memory at raddr (rmem, rdev: registered there); GKV_NIXL_READ: the other way. Waits
 * until the transfer is done or timeout_ms passed.
 * Returns 0, or GKV_EUNAVAILABLE (not done in time, or the peer went) / GKV_EIO (NIXL refused
 * it: no zero-copy path, bad descriptors) with why. *stuck: a transfer not done in time could
 * not be released either, so the local bytes may still be read: never reuse them. */
int gkv_nixl_agent_xfer(gkv_nixl_agent_t *a, int op, const char *peer, const void *addr,
                        size_t len, int mem, uint64_t dev, uint64_t raddr, int rmem,
                        uint64_t rdev, int timeout_ms, bool *stuck, char *why, size_t cap);
/* The same in two steps, so that a thread can post several before waiting: post returns 0 or
 * GKV_EIO (wait then returns that too, and must still be called); wait ends the transfer
 * (waits until done or timeout_ms, releases it; *stuck as above, set only when true). */
typedef struct {
    gkv_nixl_h req;
    int rc;
} gkv_nixl_xfer_t;
int gkv_nixl_agent_post(gkv_nixl_agent_t *a, int op, const char *peer, const void *addr,
                        size_t len, int mem, uint64_t dev, uint64_t raddr, int rmem,
                        uint64_t rdev, gkv_nixl_xfer_t *x, char *why, size_t cap);
/* post with a notification: peer's agent receives notif (len bytes) once the bytes are there. */
int gkv_nixl_agent_post_notify(gkv_nixl_agent_t *a, int op, const char *peer, const void *addr,
                               size_t len, int mem, uint64_t dev, uint64_t raddr, int rmem,
                               uint64_t rdev, const void *notif, size_t notif_len,
                               gkv_nixl_xfer_t *x, char *why, size_t cap);
/* Sends peer's agent a notification of its own. Returns 0 or GKV_EIO. */
int gkv_nixl_agent_notify(gkv_nixl_agent_t *a, const char *peer, const void *msg, size_t len);
/* Calls fn for each notification that arrived since the last call (from any agent). Returns
 * how many, or -1 when NIXL failed. One thread at a time (the caller serialises). */
int gkv_nixl_agent_notifs(gkv_nixl_agent_t *a, void (*fn)(void *arg, const void *msg, size_t len),
                          void *arg);
int gkv_nixl_agent_wait(gkv_nixl_agent_t *a, gkv_nixl_xfer_t *x, const char *peer,
                        int timeout_ms, bool *stuck, char *why, size_t cap);
/* Deregisters the memory, destroys backend and agent. */
void gkv_nixl_agent_close(gkv_nixl_agent_t *a);

#endif
