/* plane.c: the data plane between nodes through NIXL (plane.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "log.h"
#include "plane.h"
#include "trace.h"

/* Behind each arena's slots: a small area that other nodes' probes write into. */
#define PROBE_BYTES 4096u

uint64_t gkv_plane_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int open_arenas(gkv_plane_t *p, const gkv_plane_cfg_t *cfg)
{
    for (unsigned i = 0; i < cfg->nbes && i < GKV_MAX_DEVICES; i++) {
        gkv_backend_t *be = cfg->bes[i];
        gkv_plane_arena_t *a = &p->arena[i];
        bool gpu = be->device >= 0;
        if (!be->ops->arena_alloc) {
            snprintf(p->why, sizeof(p->why), "the %s backend has no transfer arenas", be->name);
            return GKV_ENOTSUP;
        }
        uint64_t size = cfg->arena_size ? cfg->arena_size : gpu ? (1ull << 30) : (64ull << 20);
        uint64_t slot = size / 16;
        const char *chunk = getenv("GPUKV_NIXL_CHUNK"); /* for measurements */
        if (chunk && strtoull(chunk, NULL, 10))
            slot = strtoull(chunk, NULL, 10);
        slot = slot < GKV_PLANE_SLOT_MIN ? GKV_PLANE_SLOT_MIN
               : slot > GKV_PLANE_SLOT_MAX ? GKV_PLANE_SLOT_MAX : slot & ~(uint64_t)4095;
        if (size < 2 * slot)
            size = 2 * slot;
        size -= size % slot;
        a->be = be;
        a->mem = gpu ? GKV_NIXL_VRAM : GKV_NIXL_DRAM;
        a->dev = gpu ? (uint64_t)be->device : 0;
        if (be->ops->arena_alloc(be, size + PROBE_BYTES, &a->addr)) {
            snprintf(p->why, sizeof(p->why), "no memory for a %" PRIu64 "-byte transfer arena on %s",
                     size, be->gpu_name);
            return GKV_EOOM;
        }
        a->size = size;
        p->narenas = i + 1;
        if (gkv_slots_init(&a->slots, a->addr, size, slot))
            return GKV_ENOMEM;
        char why[192];
        if (gkv_nixl_agent_register(&p->agent, a->addr, size + PROBE_BYTES, a->mem, a->dev, why,
                                    sizeof(why))) {
            snprintf(p->why, sizeof(p->why), "%s", why);
            return GKV_EIO;
        }
    }
    return 0;
}

static void close_arenas(gkv_plane_t *p)
{
    for (unsigned i = 0; i < p->narenas; i++) {
        gkv_plane_arena_t *a = &p->arena[i];
        gkv_slots_fini(&a->slots);
        if (a->addr)
            a->be->ops->arena_free(a->be, a->addr, a->size + PROBE_BYTES);
        a->addr = NULL;
    }
    p->narenas = 0;
}

int gkv_plane_open(gkv_plane_t *p, const gkv_plane_cfg_t *cfg)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    p->opened = true;
    p->depth = GKV_PLANE_DEPTH;
    pthread_mutex_init(&p->box_lock, NULL);
    p->id_salt = (gkv_plane_now_us() ^ (uint64_t)(uintptr_t)p) << 32;
    const char *mode = getenv("GPUKV_NIXL_MODE"); /* "push": PUSH (measured alike, newer) */
    p->push = mode && !strcmp(mode, "push");
    const char *head = getenv("GPUKV_NIXL_HEAD"); /* for measurements */
    p->head_start = !head || strcmp(head, "0");
    const char *guess = getenv("GPUKV_NIXL_GUESS"); /* for measurements */
    p->guess = !guess || strcmp(guess, "0");
    const char *ahead = getenv("GPUKV_NIXL_AHEAD"); /* for measurements */
    p->ahead = !ahead || strcmp(ahead, "0");
    const char *lead = getenv("GPUKV_NIXL_GUESS_LEAD_MS"); /* for tests */
    int lead_ms = lead ? atoi(lead) : 0;
    p->guess_lead_ms = lead_ms <= 0 ? 0 : lead_ms > 5000 ? 5000 : (unsigned)lead_ms;
    p->own = 2;
    const char *own = getenv("GPUKV_NIXL_OWN"); /* for measurements */
    if (own && atoi(own) > 0)
        p->own = atoi(own) > 8 ? 8 : (unsigned)atoi(own);
    /* One part: with other chunks in flight (a pull's depth, other pulls) their writes hide a
     * chunk's copy, and each part is one more NIXL post, which contend with each other and with
     * the waits for the link (2x H200, session 46: a 1 GiB pull alone 0.83-0.86x the peer copy
     * against 0.75-0.76x with two parts; 16 reader processes 0.76x by the median of seven runs
     * against 0.73x of thirteen, inside the runs' spread). */
    p->parts = 1;
    const char *parts = getenv("GPUKV_NIXL_PARTS"); /* for measurements */
    if (parts && atoi(parts) > 0)
        p->parts = atoi(parts) > GKV_PLANE_PARTS_MAX ? GKV_PLANE_PARTS_MAX : (unsigned)atoi(parts);
    const char *depth = getenv("GPUKV_NIXL_DEPTH"); /* for measurements */
    if (depth && atoi(depth) > 0)
        p->depth = atoi(depth) > GKV_PLANE_DEPTH_MAX ? GKV_PLANE_DEPTH_MAX : (unsigned)atoi(depth);
    if (!cfg->nixl || !strcmp(cfg->nixl, "off")) {
        snprintf(p->why, sizeof(p->why), "NIXL is off (--nixl off)");
        return 0;
    }
    char why[256];
    if (gkv_nixl_load(cfg->nixl, &p->api, why, sizeof(why))) {
        snprintf(p->why, sizeof(p->why), "%s", why);
        return 0;
    }
    bool gpu = cfg->nbes > 0 && cfg->bes[0]->device >= 0;
    if (gkv_nixl_agent_open(&p->agent, &p->api, cfg->agent, gpu, why, sizeof(why))) {
        snprintf(p->why, sizeof(p->why), "%s", why);
        gkv_nixl_unload(&p->api);
        return 0;
    }
    if (open_arenas(p, cfg)) {
        gkv_nixl_agent_close(&p->agent);
        close_arenas(p);
        gkv_nixl_unload(&p->api);
        return 0;
    }
    p->on = true;
    GKV_INFO("data plane: NIXL %s from %s, %u arena(s) of %" PRIu64 " MiB in %" PRIu64
             " MiB chunks (%s memory)",
             p->api.version[0] ? p->api.version : "(version unknown)", p->api.lib, p->narenas,
             p->arena[0].size >> 20, p->arena[0].slots.slot_size >> 20,
             p->arena[0].mem == GKV_NIXL_VRAM ? "GPU" : "host");
    return 0;
}

void gkv_plane_close(gkv_plane_t *p)
{
    if (!p->opened)
        return;
    p->opened = false;
    if (p->on) {
        gkv_nixl_agent_close(&p->agent);
        close_arenas(p);
        gkv_nixl_unload(&p->api);
        p->on = false;
    }
    free(p->peers);
    p->peers = NULL;
    p->npeers = p->cap = 0;
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->box_lock);
}

int gkv_plane_hello(gkv_plane_t *p, void **md, size_t *md_len, uint8_t *arenas, size_t *alen)
{
    if (!p->on || gkv_nixl_agent_md(&p->agent, md, md_len))
        return GKV_EIO;
    *alen = 0;
    for (unsigned i = 0; i < p->narenas; i++) {
        const gkv_plane_arena_t *a = &p->arena[i];
        uint8_t *r = arenas + *alen;
        gkv_le64_put(r, (uint64_t)(uintptr_t)a->addr);
        gkv_le64_put(r + 8, a->size);
        gkv_le64_put(r + 16, a->slots.slot_size);
        gkv_le64_put(r + 24, (a->dev & 0xffffffffu) | ((uint64_t)a->mem << 32));
        *alen += GKV_PLANE_ARENA_REC;
    }
    return 0;
}

/* The peer named node (lock held), or NULL; create: added when missing (NULL: no memory). */
static gkv_plane_peer_t *peer_of(gkv_plane_t *p, const char *node, int64_t inc, bool create)
{
    for (size_t i = 0; i < p->npeers; i++)
        if (!strcmp(p->peers[i].node, node)) {
            gkv_plane_peer_t *q = &p->peers[i];
            if (q->inc != inc) {
                if (!create)
                    return NULL;
                if (q->agent[0])
                    gkv_nixl_agent_forget(&p->agent, q->agent);
                memset(q, 0, sizeof(*q));
                snprintf(q->node, sizeof(q->node), "%s", node);
                q->inc = inc;
            }
            return q;
        }
    if (!create)
        return NULL;
    if (p->npeers == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        gkv_plane_peer_t *n = realloc(p->peers, cap * sizeof(*n));
        if (!n)
            return NULL;
        p->peers = n;
        p->cap = cap;
    }
    gkv_plane_peer_t *q = &p->peers[p->npeers++];
    memset(q, 0, sizeof(*q));
    snprintf(q->node, sizeof(q->node), "%s", node);
    q->inc = inc;
    return q;
}

int gkv_plane_take_hello(gkv_plane_t *p, const char *node, int64_t inc, const void *md,
                         size_t md_len, const uint8_t *arenas, size_t alen, char *why,
                         size_t cap)
{
    if (!p->on) {
        snprintf(why, cap, "%s", p->why);
        return GKV_ENOTSUP;
    }
    if (!md_len || !alen || alen % GKV_PLANE_ARENA_REC || alen / GKV_PLANE_ARENA_REC > GKV_MAX_DEVICES) {
        snprintf(why, cap, "a PLANE needs the agent's metadata and 1 to %d arenas", GKV_MAX_DEVICES);
        return GKV_EINVAL;
    }
    gkv_plane_remote_t r[GKV_MAX_DEVICES];
    unsigned n = (unsigned)(alen / GKV_PLANE_ARENA_REC);
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *b = arenas + i * GKV_PLANE_ARENA_REC;
        uint64_t kind = gkv_le64_get(b + 24);
        r[i] = (gkv_plane_remote_t){.addr = gkv_le64_get(b), .size = gkv_le64_get(b + 8),
                                    .slot_size = gkv_le64_get(b + 16), .dev = kind & 0xffffffffu,
                                    .mem = (int)(kind >> 32)};
        if ((r[i].mem != GKV_NIXL_DRAM && r[i].mem != GKV_NIXL_VRAM) || !r[i].slot_size ||
            r[i].slot_size > GKV_PLANE_SLOT_MAX || r[i].size < r[i].slot_size ||
            r[i].addr + r[i].size + PROBE_BYTES < r[i].addr) {
            snprintf(why, cap, "a PLANE arena record is malformed");
            return GKV_EINVAL;
        }
    }
    char agent[128];
    if (gkv_nixl_agent_load(&p->agent, md, md_len, agent, sizeof(agent))) {
        snprintf(why, cap, "NIXL could not load the agent's metadata of %s", node);
        return GKV_EIO;
    }
    pthread_mutex_lock(&p->lock);
    gkv_plane_peer_t *q = peer_of(p, node, inc, true);
    if (q) {
        if (q->agent[0] && strcmp(q->agent, agent))
            gkv_nixl_agent_forget(&p->agent, q->agent);
        snprintf(q->agent, sizeof(q->agent), "%s", agent);
        memcpy(q->arenas, r, n * sizeof(r[0]));
        q->narenas = n;
    }
    pthread_mutex_unlock(&p->lock);
    if (!q) {
        snprintf(why, cap, "no memory for another node's plane");
        return GKV_ENOMEM;
    }
    /* The probe: from our first arena's probe area into theirs, emulation off. */
    const gkv_plane_arena_t *a = &p->arena[0];
    bool stuck;
    int rc = gkv_nixl_agent_xfer(&p->agent, GKV_NIXL_WRITE, agent, (uint8_t *)a->addr + a->size,
                                 PROBE_BYTES, a->mem, a->dev, r[0].addr + r[0].size, r[0].mem,
                                 r[0].dev, 2000, &stuck, why, cap);
    if (rc)
        p->probes_failed++;
    return rc;
}

void gkv_plane_set_state(gkv_plane_t *p, const char *node, int64_t inc, bool ok, const char *why)
{
    pthread_mutex_lock(&p->lock);
    gkv_plane_peer_t *q = peer_of(p, node, inc, true);
    if (q) {
        int was = q->state;
        q->state = ok ? GKV_PLANE_NIXL : GKV_PLANE_TCP;
        snprintf(q->why, sizeof(q->why), "%s", ok ? "" : why);
        if (was != q->state) {
            if (ok)
                GKV_INFO("data plane: reads from %s go through NIXL", node);
            else
                GKV_WARN("data plane: reads from %s go over TCP: %s", node, why);
        }
    }
    pthread_mutex_unlock(&p->lock);
}

bool gkv_plane_ask(gkv_plane_t *p, const char *node, int64_t inc)
{
    bool ask = false;
    if (!p->on)
        return false;
    pthread_mutex_lock(&p->lock);
    gkv_plane_peer_t *q = peer_of(p, node, inc, true);
    if (q && !q->asked)
        ask = q->asked = true;
    pthread_mutex_unlock(&p->lock);
    return ask;
}

bool gkv_plane_reads_nixl(gkv_plane_t *p, const char *node, int64_t inc)
{
    if (!p->on)
        return false;
    pthread_mutex_lock(&p->lock);
    gkv_plane_peer_t *q = peer_of(p, node, inc, false);
    bool yes = q && q->state == GKV_PLANE_NIXL;
    pthread_mutex_unlock(&p->lock);
    return yes;
}

void gkv_plane_keep_only(gkv_plane_t *p, const char *const *names, const int64_t *incs, size_t n)
{
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->npeers;) {
        bool keep = false;
        for (size_t k = 0; k < n && !keep; k++)
            keep = !strcmp(names[k], p->peers[i].node) && incs[k] == p->peers[i].inc;
        if (keep) {
            i++;
            continue;
        }
        if (p->on && p->peers[i].agent[0])
            gkv_nixl_agent_forget(&p->agent, p->peers[i].agent);
        p->peers[i] = p->peers[--p->npeers];
    }
    pthread_mutex_unlock(&p->lock);
}

int gkv_plane_dest(gkv_plane_t *p, const char *node, int64_t inc, unsigned idx, uint64_t off,
                   uint64_t len, gkv_plane_remote_t *dst, char *agent, size_t cap)
{
    int rc = GKV_EUNAVAILABLE;
    pthread_mutex_lock(&p->lock);
    gkv_plane_peer_t *q = peer_of(p, node, inc, false);
    if (q && q->agent[0]) {
        rc = GKV_EINVAL;
        if (idx < q->narenas && len && len <= q->arenas[idx].slot_size &&
            off <= q->arenas[idx].size && len <= q->arenas[idx].size - off) {
            *dst = q->arenas[idx];
            snprintf(agent, cap, "%s", q->agent);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

uint64_t gkv_plane_chunk(gkv_plane_t *p, const char *node, unsigned dev)
{
    uint64_t ours = dev < p->narenas ? p->arena[dev].slots.slot_size : 0;
    uint64_t theirs = 0;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->npeers; i++)
        if (!strcmp(p->peers[i].node, node))
            for (unsigned k = 0; k < p->peers[i].narenas; k++)
                if (!theirs || p->peers[i].arenas[k].slot_size < theirs)
                    theirs = p->peers[i].arenas[k].slot_size;
    pthread_mutex_unlock(&p->lock);
    /* The owner stages a chunk in one of its slots: a chunk fits the smallest of theirs. */
    return !theirs || ours < theirs ? ours : theirs;
}

/* An owner's sending ends: waits for the writes still posted (xs[i] where posted[i], of n),
 * counts its time (since t0, copy_us of it copying), and returns rc or, when rc is 0, the
 * first write's failure (its reason in why). *stuck as gkv_nixl_agent_wait says. */
static int writes_end(gkv_plane_t *p, gkv_nixl_xfer_t *xs, const bool *posted, unsigned n,
                      const char *agent, int timeout_ms, uint64_t t0, uint64_t copy_us,
                      bool *stuck, int rc, char *why, size_t cap)
{
    for (unsigned i = 0; i < n; i++) {
        if (!posted[i])
            continue;
        char w[160];
        int r = gkv_nixl_agent_wait(&p->agent, &xs[i], agent, timeout_ms, stuck, w, sizeof(w));
        if (r && !rc) {
            rc = r;
            snprintf(why, cap, "%s", w);
        }
    }
    p->send_copy_us += copy_us;
    p->send_write_us += gkv_plane_now_us() - t0 - copy_us;
    return rc;
}

int gkv_plane_send(gkv_plane_t *p, unsigned dev, gkv_devptr_t v, uint64_t off, uint64_t len,
                   const char *agent, const gkv_plane_remote_t *dst, uint64_t doff,
                   int timeout_ms, char *why, size_t cap)
{
    if (dev >= p->narenas) {
        snprintf(why, cap, "no transfer arena on that device");
        return GKV_EIO;
    }
    gkv_plane_arena_t *a = &p->arena[dev];
    if (len > a->slots.slot_size) {
        snprintf(why, cap, "a chunk larger than this node's arena slots");
        return GKV_EINVAL;
    }
    uint32_t slot;
    if (!gkv_slots_take(&a->slots, 1, &slot, timeout_ms)) {
        snprintf(why, cap, "no room in this node's transfer arena in time");
        return GKV_EUNAVAILABLE;
    }
    /* The chunk goes in parts: each part's copy into the slot overlaps the write of the part
     * before it. */
    uint8_t *buf = gkv_slot_addr(&a->slots, slot);
    uint64_t plen = (len + p->parts - 1) / p->parts;
    gkv_nixl_xfer_t xs[GKV_PLANE_PARTS_MAX];
    bool posted[GKV_PLANE_PARTS_MAX] = {false};
    unsigned parts = 0;
    int rc = 0;
    bool stuck = false;
    uint64_t copy_us = 0, t0 = gkv_plane_now_us();
    for (uint64_t o = 0; o < len && !rc; o += plen) {
        uint64_t n = len - o < plen ? len - o : plen;
        uint64_t c0 = gkv_plane_now_us();
        if (a->be->ops->arena_copy(a->be, v, off + o, buf + o, (size_t)n, 0, NULL)) {
            snprintf(why, cap, "copying a chunk into the transfer arena failed");
            rc = GKV_EIO;
            break;
        }
        copy_us += gkv_plane_now_us() - c0;
        gkv_trace("o_copied", off, parts);
        rc = gkv_nixl_agent_post(&p->agent, GKV_NIXL_WRITE, agent, buf + o, (size_t)n, a->mem,
                                 a->dev, dst->addr + doff + o, dst->mem, dst->dev, &xs[parts],
                                 why, cap);
        gkv_trace("o_posted", off, parts);
        posted[parts++] = true;
    }
    rc = writes_end(p, xs, posted, parts, agent, timeout_ms, t0, copy_us, &stuck, rc, why, cap);
    gkv_trace("o_sent", off, 0);
    gkv_slots_give(&a->slots, &slot, 1, stuck);
    if (!rc) {
        p->chunks_sent++;
        p->bytes_sent += len;
    }
    return rc;
}

int gkv_plane_info(gkv_plane_t *p, char *buf, size_t cap)
{
    uint32_t taken = 0, retired = 0, slots = 0;
    for (unsigned i = 0; i < p->narenas; i++) {
        taken += p->arena[i].slots.taken;
        retired += p->arena[i].slots.retired;
        slots += p->arena[i].slots.nslots;
    }
    int n = snprintf(
        buf, cap,
        "data_plane:%s\r\ndata_plane_why:%s\r\nnixl_version:%s\r\n"
        "nixl_arenas:%u\r\nnixl_arena_bytes:%" PRIu64 "\r\nnixl_chunk_bytes:%" PRIu64
        "\r\nnixl_workers:%u\r\nnixl_slots:%u\r\nnixl_slots_in_use:%u\r\nnixl_slots_retired:%u\r\n"
        "nixl_reads:%" PRIu64 "\r\nnixl_read_bytes:%" PRIu64 "\r\nnixl_fallbacks:%" PRIu64
        "\r\nnixl_head_starts:%" PRIu64 "\r\nnixl_heads_dropped:%" PRIu64
        "\r\nnixl_head_guesses:%" PRIu64 "\r\nnixl_guesses_missed:%" PRIu64
        "\r\nnixl_heads_ahead:%" PRIu64 "\r\nnixl_tees:%" PRIu64 "\r\nnixl_chunks_sent:%" PRIu64
        "\r\nnixl_bytes_sent:%" PRIu64 "\r\nnixl_probes_failed:%" PRIu64
        "\r\nnixl_send_copy_us:%" PRIu64 "\r\nnixl_send_write_us:%" PRIu64
        "\r\nnixl_pull_wait_us:%" PRIu64 "\r\nnixl_pull_copy_us:%" PRIu64
        "\r\nnixl_pull_us:%" PRIu64 "\r\nnixl_stage_queue_us:%" PRIu64
        "\r\nnixl_stage_reply_us:%" PRIu64 "\r\nnixl_read_us:%" PRIu64
        "\r\nnixl_pull_queue_us:%" PRIu64 "\r\n",
        p->on ? "nixl" : "tcp", p->on ? "" : p->why,
        p->on && p->api.version[0] ? p->api.version : "", p->narenas,
        p->narenas ? p->arena[0].size : 0, p->narenas ? p->arena[0].slots.slot_size : 0,
        p->on ? p->agent.workers : 0, slots, taken, retired, (uint64_t)p->reads,
        (uint64_t)p->read_bytes, (uint64_t)p->fallbacks, (uint64_t)p->head_starts,
        (uint64_t)p->heads_dropped, (uint64_t)p->head_guesses, (uint64_t)p->guesses_missed,
        (uint64_t)p->heads_ahead, (uint64_t)p->tees, (uint64_t)p->chunks_sent,
        (uint64_t)p->bytes_sent, (uint64_t)p->probes_failed, (uint64_t)p->send_copy_us,
        (uint64_t)p->send_write_us, (uint64_t)p->pull_wait_us, (uint64_t)p->pull_copy_us,
        (uint64_t)p->pull_us, (uint64_t)p->stage_queue_us, (uint64_t)p->stage_reply_us,
        (uint64_t)p->read_us, (uint64_t)p->pull_queue_us);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

const char *gkv_plane_word(gkv_plane_t *p, const char *node, int64_t inc)
{
    const char *w = p->on ? "unknown" : "tcp";
    pthread_mutex_lock(&p->lock);
    gkv_plane_peer_t *q = p->on ? peer_of(p, node, inc, false) : NULL;
    if (q && q->state)
        w = q->state == GKV_PLANE_NIXL ? "nixl" : "tcp";
    pthread_mutex_unlock(&p->lock);
    return w;
}

void gkv_plane_counts(gkv_plane_t *p, uint64_t *nixl, uint64_t *tcp, uint64_t *in_use,
                      uint64_t *retired)
{
    *nixl = *tcp = *in_use = *retired = 0;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->npeers; i++) {
        if (p->peers[i].state == GKV_PLANE_NIXL)
            ++*nixl;
        else if (p->peers[i].state == GKV_PLANE_TCP)
            ++*tcp;
    }
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->narenas; i++) {
        *in_use += p->arena[i].slots.taken;
        *retired += p->arena[i].slots.retired;
    }
}

/* ---- PUSH ------------------------------------------------------------------------------ */

/* A notification between the two sides of a PUSH: "GKVN", kind, transfer id, chunk. */
enum { NOTE_LANDED = 1, NOTE_FREED = 2 };
#define NOTE_LEN 24

static void note_put(uint8_t *m, uint32_t kind, uint64_t id, uint64_t i)
{
    memcpy(m, "GKVN", 4);
    for (int k = 0; k < 4; k++)
        m[4 + k] = (uint8_t)(kind >> (8 * k));
    gkv_le64_put(m + 8, id);
    gkv_le64_put(m + 16, i);
}

uint64_t gkv_plane_new_id(gkv_plane_t *p)
{
    return p->id_salt | (++p->next_id & 0xffffffffu);
}

gkv_plane_box_t *gkv_plane_box_open(gkv_plane_t *p, uint64_t id, uint64_t n)
{
    gkv_plane_box_t *b = calloc(1, sizeof(*b));
    if (!b || (n && !(b->landed = calloc(n, 1)))) {
        free(b);
        return NULL;
    }
    b->id = id;
    b->n = n;
    pthread_mutex_lock(&p->box_lock);
    b->next = p->boxes;
    p->boxes = b;
    pthread_mutex_unlock(&p->box_lock);
    return b;
}

void gkv_plane_box_close(gkv_plane_t *p, gkv_plane_box_t *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&p->box_lock);
    for (gkv_plane_box_t **q = &p->boxes; *q; q = &(*q)->next)
        if (*q == b) {
            *q = b->next;
            break;
        }
    pthread_mutex_unlock(&p->box_lock);
    free(b->landed);
    free(b);
}

/* A notification into its box (box_lock held); one for a box closed already is dropped. */
static void deliver(void *arg, const void *msg, size_t len)
{
    gkv_plane_t *p = arg;
    const uint8_t *m = msg;
    if (len != NOTE_LEN || memcmp(m, "GKVN", 4))
        return;
    uint32_t kind = (uint32_t)m[4] | (uint32_t)m[5] << 8 | (uint32_t)m[6] << 16 |
                    (uint32_t)m[7] << 24;
    uint64_t id = gkv_le64_get(m + 8), i = gkv_le64_get(m + 16);
    for (gkv_plane_box_t *b = p->boxes; b; b = b->next) {
        if (b->id != id)
            continue;
        if (kind == NOTE_LANDED && i < b->n)
            b->landed[i] = 1;
        else if (kind == NOTE_FREED && i + 1 > b->freed)
            b->freed = i + 1;
        return;
    }
}

/* Waits (polling NIXL's notifications) until done(b, i) or timeout_ms, or stop(arg). */
static int box_wait(gkv_plane_t *p, gkv_plane_box_t *b, uint64_t i, bool landed,
                    int timeout_ms, bool (*stop)(void *arg), void *arg)
{
    uint64_t until = gkv_plane_now_us() + (uint64_t)timeout_ms * 1000;
    for (unsigned polls = 0;; polls++) {
        pthread_mutex_lock(&p->box_lock);
        bool done = landed ? b->landed[i] : b->freed > i;
        if (!done) {
            gkv_nixl_agent_notifs(&p->agent, deliver, p);
            done = landed ? b->landed[i] : b->freed > i;
        }
        pthread_mutex_unlock(&p->box_lock);
        if (done)
            return 0;
        if ((stop && stop(arg)) || gkv_plane_now_us() > until)
            return GKV_EUNAVAILABLE;
        if (polls > 64)
            sched_yield();
    }
}

int gkv_plane_wait_landed(gkv_plane_t *p, gkv_plane_box_t *b, uint64_t i, int timeout_ms,
                          bool (*stop)(void *arg), void *arg)
{
    return i < b->n ? box_wait(p, b, i, true, timeout_ms, stop, arg) : GKV_EINVAL;
}

int gkv_plane_freed(gkv_plane_t *p, const char *agent, uint64_t id, uint64_t i)
{
    uint8_t m[NOTE_LEN];
    note_put(m, NOTE_FREED, id, i);
    return gkv_nixl_agent_notify(&p->agent, agent, m, sizeof(m));
}

int gkv_plane_push(gkv_plane_t *p, unsigned dev, gkv_devptr_t v, uint64_t len, uint64_t chunk,
                   const char *agent, const gkv_plane_remote_t *dst, const uint64_t *slot_offs,
                   uint32_t nslots, uint64_t id, int timeout_ms, char *why, size_t cap)
{
    if (dev >= p->narenas || !nslots || !chunk) {
        snprintf(why, cap, "no transfer arena on that device");
        return GKV_EIO;
    }
    gkv_plane_arena_t *a = &p->arena[dev];
    if (chunk > a->slots.slot_size) {
        snprintf(why, cap, "a chunk larger than this node's arena slots");
        return GKV_EINVAL;
    }
    uint32_t own[8];
    uint32_t nown = gkv_slots_take(&a->slots, p->own < nslots ? p->own : nslots, own, timeout_ms);
    if (!nown) {
        snprintf(why, cap, "no room in this node's transfer arena in time");
        return GKV_EUNAVAILABLE;
    }
    gkv_plane_box_t *b = gkv_plane_box_open(p, id, 0);
    gkv_nixl_xfer_t xs[8];
    bool posted[8] = {false}, stuck = false;
    int rc = b ? 0 : GKV_ENOMEM;
    uint64_t n = (len + chunk - 1) / chunk, copy_us = 0, t0 = gkv_plane_now_us();
    for (uint64_t i = 0; i < n && !rc; i++) {
        /* Our slot first: free once the write from it (nown chunks ago) is done. NIXL sends a
         * write's notification when its initiator sees it done, so this also lets the reader
         * learn of that chunk; with nown <= nslots the chunk whose copy-out the next wait
         * needs was seen done here already (else the two would wait for each other). */
        uint32_t o = (uint32_t)(i % nown);
        if (posted[o]) {
            posted[o] = false;
            if ((rc = gkv_nixl_agent_wait(&p->agent, &xs[o], agent, timeout_ms, &stuck, why, cap)))
                break;
        }
        /* The reader's slot: free once it copied out the chunk that used it before. */
        if (i >= nslots && (rc = box_wait(p, b, i - nslots, false, timeout_ms, NULL, NULL))) {
            snprintf(why, cap, "the reader did not free its slot in %d ms", timeout_ms);
            break;
        }
        uint64_t off = i * chunk, clen = len - off < chunk ? len - off : chunk;
        uint8_t *buf = gkv_slot_addr(&a->slots, own[o]);
        uint64_t c0 = gkv_plane_now_us();
        if (a->be->ops->arena_copy(a->be, v, off, buf, (size_t)clen, 0, NULL)) {
            snprintf(why, cap, "copying a chunk into the transfer arena failed");
            rc = GKV_EIO;
            break;
        }
        copy_us += gkv_plane_now_us() - c0;
        uint8_t m[NOTE_LEN];
        note_put(m, NOTE_LANDED, id, i);
        rc = gkv_nixl_agent_post_notify(&p->agent, GKV_NIXL_WRITE, agent, buf, (size_t)clen,
                                        a->mem, a->dev, dst->addr + slot_offs[i % nslots],
                                        dst->mem, dst->dev, m, sizeof(m), &xs[o], why, cap);
        posted[o] = true;
        if (!rc) {
            p->chunks_sent++;
            p->bytes_sent += clen;
        }
    }
    rc = writes_end(p, xs, posted, nown, agent, timeout_ms, t0, copy_us, &stuck, rc, why, cap);
    gkv_plane_box_close(p, b);
    gkv_slots_give(&a->slots, own, nown, stuck);
    return rc;
}
