/* gpu_uuid.c: GPU UUID text (gpu_uuid.h). */
#include "gpu_uuid.h"

#include <stdio.h>

void gkv_gpu_uuid_format(const unsigned char *u, char *buf, size_t cap)
{
    snprintf(buf, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}
