/* takeover.h: an upgrade that loses no value and no acknowledged write (gpukvd --takeover).
 *
 * The successor, started with --takeover and the same --socket, connects to the running daemon
 * as the same user and sends TAKEOVER (flags 0). The running daemon stops accepting (its
 * listening sockets stay open, so new connections wait in their backlog for the successor),
 * closes its metrics listener, lets every other connection finish the request in flight and
 * closes it (clients reconnect, once; --shutdown-grace bounds the wait), and waits for its copy
 * batches. The successor repeats TAKEOVER with flags 1 until the answer is no longer BUSY: then
 * the reply's payload names, and the message carries, the listening sockets
 * (gpukv-listen-unix, gpukv-listen-tcp), each device's memory and a journal of the index
 * (fdstore.h's names). The successor adopts the values as after a crash (copied into memory of
 * its own), listens on the passed sockets, and sends TAKEOVER flags 2: the old daemon exits at
 * once without freeing its memory, which lives on while anything still imports it (zero-copy
 * clients' mappings stay valid until they unmap; their leases ended with their connections).
 * If the successor's connection closes before flags 2, the old daemon listens again and serves
 * on: a failed upgrade leaves the old version running. */
#ifndef GKV_SERVER_TAKEOVER_H
#define GKV_SERVER_TAKEOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "fdstore.h"

typedef struct gkv_server gkv_server_t;
typedef struct gkv_conn gkv_conn_t;

#define GKV_TAKEOVER_FDS 16 /* listeners, one memory per device, the journal, the disk tier */

enum { GKV_TAKEOVER_BEGIN = 0, GKV_TAKEOVER_FETCH = 1, GKV_TAKEOVER_DONE = 2 };

typedef struct {
    /* The running daemon's side. */
    uint64_t conn_id;    /* the successor's connection (its id), while it takes over; 0: none */
    bool draining;       /* no new connections; the others close after their request */
    int unix_fd, tcp_fd; /* the listening sockets, kept to listen again if the successor fails */
    uv_timer_t grace;    /* --shutdown-grace: then the other connections close at once */
    /* How the daemon leaves once the successor serves (TAKEOVER flags 2): _exit, without
     * freeing memory that zero-copy clients still map. The whole-daemon fuzzer replaces it with
     * one that returns (the request is then answered SHUTDOWN). */
    void (*exit_now)(int status);
    bool exiting; /* TAKEOVER flags 2 was handled: exit once its request has ended */
    /* The successor's side (--takeover). */
    int sock;                                 /* the connection to the predecessor, or -1 */
    int listen_unix, listen_tcp;              /* passed listening sockets, or -1 */
    int disk_fd;                              /* the predecessor's disk tier's file, or -1 */
    gkv_stored_fd_t passed[GKV_TAKEOVER_FDS]; /* memory and journal, for gkv_fdstore_open */
    unsigned npassed;
} gkv_takeover_t;

/* Sets the state up (gkv_server_init, before anything can use it). */
void gkv_takeover_init(gkv_server_t *s);
/* True when c must stop taking requests: the daemon stops, or hands over to another process. */
bool gkv_takeover_refusing(const gkv_server_t *s, const gkv_conn_t *c);
/* A request ended (the net's request_done): after TAKEOVER flags 2, the daemon exits here,
 * outside the handler, without answering (the successor takes the connection's end closing as
 * the answer). */
void gkv_takeover_request_done(gkv_server_t *s);
/* The running daemon: a connection closed (before it is freed). The successor's, before it said
 * DONE: the daemon listens again. */
void gkv_takeover_conn_closed(gkv_server_t *s, gkv_conn_t *c);

/* The successor (--takeover), at start once the devices are open: takes the running daemon's
 * sockets, memory and journal on cfg.socket_path into s->takeover (listen_*, passed). Returns 0,
 * or GKV_EINVAL / GKV_ESYS / GKV_EBUSY with err: nothing runs there, it refused, it did not hand
 * over within 60 s. */
int gkv_takeover_fetch(gkv_server_t *s, char *err, size_t cap);
/* The successor listens: tells the predecessor, which exits, and closes the connection. */
void gkv_takeover_done(gkv_server_t *s);
/* Closes whatever the successor's side still holds (a failed start). */
void gkv_takeover_fini(gkv_server_t *s);

#endif
