/* raw_frame.h: requests written and replies read frame by frame on a bare socket, for what
 * libgpukv never sends (hostile input, protocol misuse, fields of other protocol versions). */
#ifndef GKV_TESTS_RAW_FRAME_H
#define GKV_TESTS_RAW_FRAME_H

#include <check.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fdpass.h"
#include "frame.h"
#include "message.h"

/* A connected Unix socket to sock, or the test fails. */
static inline int raw_connect(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(sock), sizeof(sa.sun_path));
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Reads one response frame into hdr (cap bytes) and decodes it into *r; returns its status. A
 * descriptor passed with it is dropped by recv. */
static inline int64_t raw_read_response(int fd, gkv_response_t *r, uint8_t *hdr, size_t cap)
{
    uint8_t pre[4];
    ck_assert_int_eq(recv(fd, pre, 4, MSG_WAITALL), 4);
    uint32_t len = gkv_frame_get_len(pre);
    ck_assert_uint_le(len, cap);
    ck_assert_int_eq(recv(fd, hdr, len, MSG_WAITALL), (ssize_t)len);
    ck_assert_int_eq(gkv_resp_decode(hdr, len, r), 0);
    return r->status;
}

/* Sends the frames built in w (then resets it) and reads one response. */
static inline int64_t raw_call(int fd, gkv_wr_t *w, gkv_response_t *r, uint8_t *hdr, size_t cap)
{
    ck_assert_int_eq(write(fd, w->sb.data, w->sb.size), (ssize_t)w->sb.size);
    gkv_wr_reset(w);
    return raw_read_response(fd, r, hdr, cap);
}

/* Sends HELLO asking for zero-copy (zero_copy = zc) and reads the first bytes of its response
 * with the descriptors passed with them: up to cap into fds, how many in *n (the rest of the
 * response is left unread). */
static inline void raw_hello_fds(int fd, unsigned zc, int *fds, unsigned cap, unsigned *n)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, 1); /* HELLO */
    gkv_wr_uint(&w, GKV_F_ID, 1);
    gkv_wr_uint(&w, GKV_F_ZC, zc);
    gkv_wr_end(&w);
    ck_assert_int_eq(write(fd, w.sb.data, w.sb.size), (ssize_t)w.sb.size);
    gkv_wr_fini(&w);
    uint8_t resp[4096];
    *n = 0;
    ck_assert_int_gt(gkv_fds_recv(fd, resp, sizeof(resp), fds, cap, n), 0);
}

/* The fields of a raw request (0 or NULL: left out). HELLO asks for zero-copy. */
typedef struct {
    const char *key, *meta;
    uint64_t size, lease, flags, spare;
    uint64_t version; /* HELLO: the protocol version asked for */
} raw_fields_t;

/* One request of op with fields f (id 7); returns the response's status. */
static inline int64_t raw_request(int fd, unsigned op, raw_fields_t f, gkv_response_t *r,
                                  uint8_t *hdr, size_t cap)
{
    gkv_wr_t w;
    gkv_wr_init(&w);
    gkv_wr_begin(&w);
    gkv_wr_uint(&w, GKV_F_OP, op);
    gkv_wr_uint(&w, GKV_F_ID, 7);
    if (op == 1) /* HELLO */
        gkv_wr_uint(&w, GKV_F_ZC, 1);
    if (f.version)
        gkv_wr_uint(&w, GKV_F_VERSION, f.version);
    if (f.key)
        gkv_wr_bin(&w, GKV_F_KEY, f.key, strlen(f.key));
    if (f.size)
        gkv_wr_uint(&w, GKV_F_SIZE, f.size);
    if (f.lease)
        gkv_wr_uint(&w, GKV_F_LEASE, f.lease);
    if (f.flags)
        gkv_wr_uint(&w, GKV_F_FLAGS, f.flags);
    if (f.meta)
        gkv_wr_bin(&w, GKV_F_META, f.meta, strlen(f.meta));
    if (f.spare)
        gkv_wr_uint(&w, GKV_F_SPARE, f.spare);
    gkv_wr_end(&w);
    int64_t st = raw_call(fd, &w, r, hdr, cap);
    gkv_wr_fini(&w);
    return st;
}

#endif
