/* checksum_none.c: no device checksum in builds without CUDA. */
#include <stdio.h>

#include "checksum.h"

int gkv_checksum_device(const void *dptr, size_t len, uint64_t *out, char *why, size_t cap)
{
    (void)dptr;
    (void)len;
    (void)out;
    snprintf(why, cap, "this gpukv was built without CUDA");
    return -1;
}
