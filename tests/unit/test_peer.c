/* test_peer.c: connections between nodes (server/cluster/peer.h), against a toy node on
 * loopback that answers every request OK: idle ones reused, spares asked for when fewer than
 * GKV_PEER_SPARE stay idle and dialed by the fill, a fill that cannot dial ends (and may be
 * asked for again), closed peers ask for nothing, and the idle ones capped per address. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_main.h"
#include "commands.h"
#include "error.h"
#include "frame.h"
#include "message.h"
#include "peer.h"

#define TOY_MAX 256

/* The toy node: accepts, answers each request with an OK frame, until stop is written. */
typedef struct {
    int listen_fd, stop[2];
    char addr[64];
    pthread_t thread;
    int accepted;
} toy_t;

/* Added to the id the toy answers under (1: each reply names another request). */
static _Atomic unsigned id_skew;

static void answer(int fd)
{
    uint8_t prefix[GKV_FRAME_PREFIX], hdr[4096];
    if (read(fd, prefix, sizeof(prefix)) != (ssize_t)sizeof(prefix))
        return;
    uint32_t len = gkv_frame_get_len(prefix);
    if (len > sizeof(hdr))
        return;
    for (uint32_t got = 0; got < len;) {
        ssize_t n = read(fd, hdr + got, len - got);
        if (n <= 0)
            return;
        got += (uint32_t)n;
    }
    gkv_request_t req;
    const char *why = NULL;
    if (gkv_req_decode(hdr, len, &req, &why))
        return;
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_ok(&w, req.id + id_skew); /* a node answers each request under its id */
    if (req.has & GKV_HAS_KEY)       /* a slice in the reply: the request's key, as the owner */
        gkv_wr_bin(&w, GKV_F_OWNER, req.key.p, req.key.len);
    gkv_wr_end(&w);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    gkv_wr_fini(&w);
}

static void *toy_main(void *arg)
{
    toy_t *t = arg;
    struct pollfd pf[TOY_MAX + 2];
    int n = 2;
    pf[0] = (struct pollfd){.fd = t->stop[0], .events = POLLIN};
    pf[1] = (struct pollfd){.fd = t->listen_fd, .events = POLLIN};
    for (;;) {
        if (poll(pf, (nfds_t)n, -1) <= 0 || pf[0].revents)
            break;
        if (pf[1].revents && n < TOY_MAX + 2) {
            int fd = accept(t->listen_fd, NULL, NULL);
            if (fd >= 0) {
                pf[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
                __atomic_add_fetch(&t->accepted, 1, __ATOMIC_SEQ_CST);
            }
        }
        for (int i = 2; i < n; i++)
            if (pf[i].revents & POLLIN)
                answer(pf[i].fd);
    }
    for (int i = 2; i < n; i++)
        close(pf[i].fd);
    return NULL;
}

static void toy_start(toy_t *t)
{
    memset(t, 0, sizeof(*t));
    t->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(t->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(t->listen_fd, 128), 0);
    ck_assert_int_eq(getsockname(t->listen_fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(t->addr, sizeof(t->addr), "127.0.0.1:%u", ntohs(sa.sin_port));
    ck_assert_int_eq(pipe(t->stop), 0);
    ck_assert_int_eq(pthread_create(&t->thread, NULL, toy_main, t), 0);
}

static void toy_stop(toy_t *t)
{
    ck_assert_int_eq(write(t->stop[1], "x", 1), 1);
    pthread_join(t->thread, NULL);
    close(t->listen_fd);
    close(t->stop[0]);
    close(t->stop[1]);
}

/* An address where nothing listens: a port bound, then closed. */
static void dead_addr(char *addr, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    snprintf(addr, cap, "127.0.0.1:%u", ntohs(sa.sin_port));
}

/* The owner's side of want: counts, and says yes unless told to refuse. */
static int wants;
static bool refuse;
static char wanted[64];

static bool want(void *arg, const char *addr)
{
    (void)arg;
    wants++;
    snprintf(wanted, sizeof(wanted), "%s", addr);
    return !refuse;
}

static void peers_up(gkv_peers_t *p)
{
    gkv_peers_init(p, NULL, 0, 2000);
    p->want = want;
    wants = 0;
    refuse = false;
    wanted[0] = 0;
}

START_TEST(a_take_that_dials_asks_for_spares_and_the_fill_makes_them)
{
    toy_t t;
    toy_start(&t);
    gkv_peers_t p;
    peers_up(&p);
    gkv_peer_conn_t *c[4];
    ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c[0]), 0);
    ck_assert_uint_eq(p.waited, 1);
    ck_assert_int_eq(wants, 1);
    ck_assert_str_eq(wanted, t.addr);
    /* Asked for once until that fill ends. */
    ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c[1]), 0);
    ck_assert_uint_eq(p.waited, 2);
    ck_assert_int_eq(wants, 1);
    ck_assert_uint_eq(gkv_peer_fill(&p, t.addr), GKV_PEER_SPARE);
    ck_assert_uint_eq(p.nidle, GKV_PEER_SPARE);
    ck_assert_uint_eq(p.ahead, GKV_PEER_SPARE);
    ck_assert_uint_eq(p.opened, 2 + GKV_PEER_SPARE);
    ck_assert_int_eq(__atomic_load_n(&t.accepted, __ATOMIC_SEQ_CST), 2 + GKV_PEER_SPARE);
    /* The spares serve the next takes without a dial; a request still works on them. */
    gkv_peer_give(&p, c[0], true);
    gkv_peer_give(&p, c[1], true);
    ck_assert_uint_eq(p.nidle, GKV_PEER_SPARE + 2);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c[i]), 0);
    ck_assert_uint_eq(p.waited, 2);
    ck_assert_int_eq(wants, 2); /* the third left 7 idle, fewer than the spares: asked again */
    gkv_response_t r;
    gkv_peer_begin(c[2], GKV_OP_PING, 0, NULL, 0);
    ck_assert_int_eq(gkv_peer_call(c[2], NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 0);
    for (int i = 0; i < 3; i++)
        gkv_peer_give(&p, c[i], i != 2); /* one broken: closed, not kept */
    ck_assert_uint_eq(p.nidle, GKV_PEER_SPARE + 1);
    gkv_peers_fini(&p);
    toy_stop(&t);
}
END_TEST

START_TEST(a_fill_that_cannot_dial_ends_and_may_be_asked_for_again)
{
    char addr[64];
    dead_addr(addr, sizeof(addr));
    gkv_peers_t p;
    peers_up(&p);
    gkv_peer_want(&p, addr);
    gkv_peer_want(&p, addr);
    ck_assert_int_eq(wants, 1);
    ck_assert_uint_eq(gkv_peer_fill(&p, addr), 0);
    ck_assert_uint_eq(p.nidle, 0);
    gkv_peer_want(&p, addr);
    ck_assert_int_eq(wants, 2);
    gkv_peer_fill(&p, addr);
    /* A take that cannot dial fails as before, and asks for a fill too. */
    gkv_peer_conn_t *c = NULL;
    ck_assert_int_eq(gkv_peer_take(&p, addr, &c), GKV_EUNAVAILABLE);
    ck_assert_int_eq(wants, 3);
    gkv_peer_fill(&p, addr);
    ck_assert_ptr_null(p.addrs); /* nothing kept for an address with nothing idle */
    gkv_peers_fini(&p);
}
END_TEST

START_TEST(a_want_refused_is_asked_for_again)
{
    char addr[64];
    dead_addr(addr, sizeof(addr));
    gkv_peers_t p;
    peers_up(&p);
    refuse = true;
    gkv_peer_want(&p, addr);
    gkv_peer_want(&p, addr);
    ck_assert_int_eq(wants, 2);
    ck_assert_ptr_null(p.addrs);
    gkv_peers_fini(&p);
}
END_TEST

START_TEST(closed_peers_ask_for_nothing_and_fills_end)
{
    toy_t t;
    toy_start(&t);
    gkv_peers_t p;
    peers_up(&p);
    gkv_peer_want(&p, t.addr);
    ck_assert_int_eq(wants, 1);
    gkv_peers_close(&p);
    ck_assert_uint_eq(gkv_peer_fill(&p, t.addr), 0); /* the one asked for before */
    gkv_peer_conn_t *c;
    ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c), 0);
    gkv_peer_want(&p, t.addr);
    ck_assert_int_eq(wants, 1);
    gkv_peer_give(&p, c, true); /* still kept for the owner's last requests */
    ck_assert_uint_eq(p.nidle, 1);
    gkv_peers_fini(&p);
    toy_stop(&t);
}
END_TEST

START_TEST(idle_connections_are_capped_per_address)
{
    toy_t t;
    toy_start(&t);
    gkv_peers_t p;
    gkv_peers_init(&p, NULL, 0, 2000); /* no want: no spares */
    enum { N = 70 };
    gkv_peer_conn_t *c[N];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c[i]), 0);
    for (int i = 0; i < N; i++)
        gkv_peer_give(&p, c[i], true);
    ck_assert_uint_eq(p.nidle, 64);
    ck_assert_uint_eq(p.ahead, 0);
    gkv_peers_fini(&p);
    toy_stop(&t);
}
END_TEST

START_TEST(a_reply_to_another_request_is_refused)
{
    /* peer.c: one request is outstanding on a connection; a reply under another id (left unread
     * by an earlier user) must not answer this one. */
    toy_t t;
    toy_start(&t);
    gkv_peers_t p;
    gkv_peers_init(&p, NULL, 0, 2000);
    gkv_peer_conn_t *c;
    ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c), 0); /* its HELLO answered rightly */
    gkv_response_t r;
    gkv_peer_begin(c, GKV_OP_PING, 0, NULL, 0);
    ck_assert_int_eq(gkv_peer_call(c, NULL, 0, &r), 0);
    id_skew = 1;
    gkv_peer_begin(c, GKV_OP_PING, 0, NULL, 0);
    ck_assert_int_eq(gkv_peer_call(c, NULL, 0, &r), GKV_EPROTO);
    id_skew = 0;
    ck_assert_uint_eq(p.refused, 0);
    gkv_peer_give(&p, c, true); /* even as "ok": never kept, and counted (INFO) */
    ck_assert_uint_eq(p.nidle, 0);
    ck_assert_uint_eq(p.refused, 1);
    gkv_peers_fini(&p);
    toy_stop(&t);
}
END_TEST

/* Sends a keyed request on c and reads its reply into *r. */
static void ask_keyed(gkv_peer_conn_t *c, const char *key, gkv_response_t *r)
{
    gkv_peer_begin(c, GKV_OP_GET, 0, NULL, 0);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, strlen(key));
    ck_assert_int_eq(gkv_peer_call(c, NULL, 0, r), 0);
    ck_assert_uint_eq(r->owner.len, strlen(key));
}

START_TEST(a_reply_kept_outlives_its_connection_s_next_reply)
{
    /* A connection given back may be another thread's at once: its next reply is read into
     * the same buffer, where the last reply's slices point. gkv_peer_reply_keep's copy does
     * not move; the slices of one not kept do. */
    toy_t t;
    toy_start(&t);
    gkv_peers_t p;
    gkv_peers_init(&p, NULL, 0, 2000);
    gkv_peer_conn_t *c;
    ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c), 0);
    gkv_response_t kept, bare;
    uint8_t *buf = NULL;
    size_t cap = 0;
    ask_keyed(c, "n1", &kept);
    ck_assert_int_eq(gkv_peer_reply_keep(c, &kept, &buf, &cap), 0);
    ask_keyed(c, "n7", &bare); /* as the next user of the connection would */
    ck_assert_int_eq(memcmp(bare.owner.p, "n7", 2), 0);
    gkv_peer_give(&p, c, true);
    ck_assert_int_eq(gkv_peer_take(&p, t.addr, &c), 0); /* the same connection, reused */
    gkv_response_t next;
    ask_keyed(c, "zz", &next);
    ck_assert_int_eq(memcmp(kept.owner.p, "n1", 2), 0);
    ck_assert_int_eq(memcmp(bare.owner.p, "zz", 2), 0); /* overwritten: the hazard */
    gkv_peer_give(&p, c, true);
    free(buf);
    gkv_peers_fini(&p);
    toy_stop(&t);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("peer");
    TCase *tc = tcase_create("spares");
    tcase_add_test(tc, a_take_that_dials_asks_for_spares_and_the_fill_makes_them);
    tcase_add_test(tc, a_fill_that_cannot_dial_ends_and_may_be_asked_for_again);
    tcase_add_test(tc, a_want_refused_is_asked_for_again);
    tcase_add_test(tc, closed_peers_ask_for_nothing_and_fills_end);
    tcase_add_test(tc, idle_connections_are_capped_per_address);
    tcase_add_test(tc, a_reply_to_another_request_is_refused);
    tcase_add_test(tc, a_reply_kept_outlives_its_connection_s_next_reply);
    suite_add_tcase(s, tc);
    return s;
}
