/* token.h: the shared secret of --auth-token-file, read by the daemon and by libgpukv
 * (GPUKV_TOKEN_FILE), and compared without leaking where two tokens differ. */
#ifndef GKV_COMMON_TOKEN_H
#define GKV_COMMON_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#define GKV_TOKEN_MIN 16   /* shortest token accepted */
#define GKV_TOKEN_MAX 1024 /* longest token (HELLO's field) */

/* Reads the token in the file at path (borrowed): its bytes without trailing whitespace, into
 * buf (GKV_TOKEN_MAX + 1 bytes, NUL-terminated), *len its length. Returns 0, or -1 with a
 * sentence in err (cap bytes): unreadable, empty, shorter than GKV_TOKEN_MIN or longer than
 * GKV_TOKEN_MAX. */
int gkv_token_load(const char *path, char *buf, size_t *len, char *err, size_t cap);
/* True when a (alen bytes) equals b (blen bytes); the time taken depends on blen alone, the
 * expected token's length, never on where the two differ. */
bool gkv_token_equal(const void *a, size_t alen, const void *b, size_t blen);

#endif
