/* frame.c: the length prefix, and the opcode names of the command list. */
#include "frame.h"

#include <gpukv/gpukv.h>

#include "commands.h"

uint32_t gkv_frame_get_len(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void gkv_frame_put_len(uint8_t *p, uint32_t len)
{
    p[0] = (uint8_t)(len >> 24);
    p[1] = (uint8_t)(len >> 16);
    p[2] = (uint8_t)(len >> 8);
    p[3] = (uint8_t)len;
}

int gkv_frame_check_len(uint32_t len, uint32_t max)
{
    return (len == 0 || len > max) ? GKV_EPROTO : 0;
}

const char *gkv_op_name(unsigned op)
{
    switch (op) {
#define GKV_OP_NAME(NAME, name, num, flags, help)                                                   \
    case num:                                                                                      \
        return #name;
        GKV_COMMAND_LIST(GKV_OP_NAME)
#undef GKV_OP_NAME
    default:
        return NULL;
    }
}
