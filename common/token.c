/* token.c: loading and comparing the authentication token. */
#include "token.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int gkv_token_load(const char *path, char *buf, size_t *len, char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, cap, "cannot read the token file %s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = 0;
    ssize_t got;
    char tmp[GKV_TOKEN_MAX + 2];
    while (n < sizeof(tmp) && (got = read(fd, tmp + n, sizeof(tmp) - n)) > 0)
        n += (size_t)got;
    close(fd);
    while (n &&
           (tmp[n - 1] == '\n' || tmp[n - 1] == '\r' || tmp[n - 1] == ' ' || tmp[n - 1] == '\t'))
        n--;
    if (n > GKV_TOKEN_MAX) {
        snprintf(err, cap, "the token in %s is longer than %d bytes", path, GKV_TOKEN_MAX);
        return -1;
    }
    if (n < GKV_TOKEN_MIN) {
        snprintf(err, cap, "the token in %s is %s (at least %d bytes are needed)", path,
                 n ? "too short" : "empty", GKV_TOKEN_MIN);
        return -1;
    }
    memcpy(buf, tmp, n);
    buf[n] = 0;
    *len = n;
    return 0;
}

bool gkv_token_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t diff = alen != blen;
    for (size_t i = 0; i < blen; i++)
        diff |= (uint8_t)((i < alen ? x[i] : 0) ^ y[i]);
    return diff == 0;
}
