/* checks.h: the checks and lookups the data handlers share: a key's length, a request's range,
 * metadata and deadline, a new value's flags, size and NX/XX, the device a request names, and
 * the entry for a new value (with OOM explained). Each returns 0 or the error code, its message
 * in rep. */
#ifndef GKV_CMD_CHECKS_H
#define GKV_CMD_CHECKS_H

#include "cmd.h"

/* 0 when key is 1..max-key-size bytes, else the error (message in rep). */
int gkv_check_key(const gkv_cmd_ctx_t *ctx, gkv_slice_t key, gkv_reply_t *rep);
/* Turns a requested range into (off, len) within a value of size bytes. A suffix takes the last
 * bytes; otherwise length 0 means "to the end" and a length past the end is clamped. Returns 0
 * or GKV_ERANGE (offset past the end). */
int gkv_range_resolve(uint64_t size, uint64_t offset, uint64_t length, uint64_t suffix,
                      uint64_t *off, uint64_t *len);
/* The entry under the request's key (*e borrowed) and the byte range it asks for (GET, MAP).
 * A value in a tier is brought up to a GPU first (gkv_store_get_here), or for a read to the
 * socket (to_socket: GET) as far as gkv_store_get_readable brings it. Returns 0, GKV_ENOTFOUND,
 * GKV_ERANGE, GKV_EOOM (in a tier, and no GPU could make room), GKV_ENOMEM or GKV_EIO. */
int gkv_lookup_range(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, bool to_socket,
                     gkv_reply_t *rep, gkv_entry_t **e, uint64_t *off, uint64_t *len);
/* The reply's `vversion` field (GET, MAP, GETSIZE): known when not 0 (the version the net
 * layer or the cluster chose: a cluster node's cluster version, a FETCH's), else, with
 * --key-versions, e's version; none otherwise. */
void gkv_wr_value_version(gkv_wr_t *w, const gkv_store_t *st, const gkv_entry_t *e,
                          uint64_t known);
/* The request's metadata within GKV_MAX_META (SET, CREATE, SEAL). */
int gkv_check_meta(const gkv_request_t *req, gkv_reply_t *rep);
/* A ttl field, if the request has one, is 1..GKV_MAX_TTL_MS: 0 or an INVALID error. */
int gkv_check_ttl(const gkv_request_t *req, gkv_reply_t *rep);
/* Checks a new value of `size` bytes for SET or CREATE: flags, size and metadata limits, and
 * NX/XX against the key's current state (checked again when the value is published: another
 * client may change the key meanwhile). */
int gkv_check_new_value(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, uint64_t size,
                        gkv_reply_t *rep);
/* An OOM for a value of size bytes that does not fit on device dev: its figures, and with
 * several devices its ordinal and UUID, in the message. Returns GKV_EOOM. */
int gkv_reply_oom(gkv_reply_t *rep, const gkv_store_t *st, unsigned dev, uint64_t size);
/* The device a request names with gpu (the daemon's ordinal, or a UUID: the first device with
 * it) in *dev; *dev = -1 when it names none. Returns 0 or GKV_EINVAL (the message names it). */
int gkv_check_device(const gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep,
                     int *dev);
/* Makes the entry for a new value of the request's key (lane GKV_LANE_SHARED for CREATE), with
 * OOM explained, on the device the request names (gpu) or else the one the store's placement
 * picks (gkv_store_place). A CREATE on a connection whose zero-copy reaches device 0 only goes
 * there (naming another is NOTSUP). *out holds the caller's reference. */
int gkv_new_entry(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, uint64_t size, int lane,
                  gkv_reply_t *rep, gkv_entry_t **out);

#endif
