/* table.c: the command table: every opcode's name, flags, handler and payload continuation. */
#include "admin.h"
#include "handlers.h"

#define CMD(NAME, name, payload)                                                                   \
    [GKV_OP_##NAME] = {#name, GKV_FLAGS_##NAME, gkv_cmd_##name, payload}

const gkv_command_t gkv_command_table[GKV_OP_MAX] = {
    CMD(HELLO, hello, NULL),
    CMD(PING, ping, NULL),
    CMD(SET, set, gkv_cmd_set_commit),
    CMD(GET, get, NULL),
    CMD(MGET, mget, NULL),
    CMD(EXISTS, exists, NULL),
    CMD(DEL, del, NULL),
    CMD(LIST, list, NULL),
    CMD(GETSIZE, getsize, NULL),
    CMD(FLUSH, flush, NULL),
    CMD(INFO, info, NULL),
    CMD(MAP, map, NULL),
    CMD(RELEASE, release, NULL),
    CMD(CREATE, create, NULL),
    CMD(SEAL, seal, NULL),
    CMD(ABORT, abort, NULL),
    CMD(EXPIRE, expire, NULL),
    CMD(PERSIST, persist, NULL),
    CMD(TTL, ttl, NULL),
    CMD(MOVE, move, NULL),
    CMD(SAVE, save, NULL),
    CMD(TAKEOVER, takeover, NULL),
    CMD(NODE, node, gkv_cmd_set_commit),
    CMD(WATCH, watch, NULL),
    CMD(UNWATCH, unwatch, NULL),
    CMD(BUFFER, buffer, NULL),
};
