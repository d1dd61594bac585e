/* frame.h: framing and protocol-wide limits (proto/PROTOCOL.md, "Frames" and "Limits"). */
#ifndef GKV_PROTO_FRAME_H
#define GKV_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* The protocol versions this code speaks (proto/PROTOCOL.md, Changelog): a server answers a
 * client that asks for any of them with that version's meaning; libgpukv asks for the newest. */
#define GKV_PROTOCOL_VERSION 2
#define GKV_PROTOCOL_MIN 1
#define GKV_FRAME_PREFIX 4        /* big-endian header length */
#define GKV_MAX_HEADER (1u << 20) /* largest msgpack header, request or response */
#define GKV_MAX_META 4096u        /* largest metadata blob */
#define GKV_MAX_BATCH 4096u       /* most keys in DEL/EXISTS, items in MGET */
#define GKV_MAX_LIST 10000u       /* most entries in one LIST page */
#define GKV_SIZE_WALK 2048u       /* most keys one GETSIZE of a prefix counts */
#define GKV_MAX_DEPTH 8           /* deepest msgpack nesting accepted */
#define GKV_MAX_TTL_MS (100ull * 365 * 86400 * 1000) /* longest TTL: a century */
#define GKV_MAX_EXPORT 64u /* a value's import data in MAP/CREATE replies (field export) */

/* Reads the 4-byte length prefix at p (borrowed, 4 bytes). */
uint32_t gkv_frame_get_len(const uint8_t *p);
/* Writes len as the 4-byte prefix at p. */
void gkv_frame_put_len(uint8_t *p, uint32_t len);
/* Checks a declared header length before anything is allocated for it: 0, or GKV_EPROTO when
 * it is 0 or over max. */
int gkv_frame_check_len(uint32_t len, uint32_t max);

#endif
