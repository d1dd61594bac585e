/* commands.h: the one list of commands. Server table, client names and CLI help derive from it.
 * Opcodes travel on the wire: never renumber, append new ones. */
#ifndef GKV_PROTO_COMMANDS_H
#define GKV_PROTO_COMMANDS_H

/* Flags checked generically before a handler runs. */
#define GKV_CMD_KEY 1u     /* needs a key field */
#define GKV_CMD_PAYLOAD 2u /* may carry a payload */
#define GKV_CMD_WRITE 4u   /* changes the keyspace */
#define GKV_CMD_LOCAL 8u   /* zero-copy: needs a connection that was granted zero-copy */

/* X(NAME, opcode, "name", flags, "summary") */
#define GKV_COMMAND_LIST(X)                                                                        \
    X(HELLO, 1, "hello", 0, "exchange versions, limits and backend")                              \
    X(PING, 2, "ping", 0, "check that the server answers")                                         \
    X(SET, 3, "set", GKV_CMD_KEY | GKV_CMD_PAYLOAD | GKV_CMD_WRITE, "store a value")              \
    X(GET, 4, "get", GKV_CMD_KEY, "read a value or a byte range of it")                            \
    X(MGET, 5, "mget", 0, "read many key+range pairs at once")                                     \
    X(EXISTS, 6, "exists", 0, "count how many of some keys exist")                                 \
    X(DEL, 7, "del", GKV_CMD_WRITE, "delete keys")                                                 \
    X(LIST, 8, "list", 0, "list keys under a prefix, page by page")                                \
    X(GETSIZE, 9, "getsize", 0, "size of a value, or total under a prefix")                        \
    X(FLUSH, 10, "flush", GKV_CMD_WRITE, "delete every key")                                       \
    X(INFO, 11, "info", 0, "server, memory, clients and keyspace statistics")                     \
    X(MAP, 12, "map", GKV_CMD_KEY | GKV_CMD_LOCAL, "lease a value for zero-copy reading")         \
    X(RELEASE, 13, "release", GKV_CMD_LOCAL, "end leases")                                         \
    X(CREATE, 14, "create", GKV_CMD_KEY | GKV_CMD_LOCAL, "lease a new, invisible value to write")  \
    X(SEAL, 15, "seal", GKV_CMD_LOCAL | GKV_CMD_WRITE, "publish a created value")                  \
    X(ABORT, 16, "abort", GKV_CMD_LOCAL, "discard a created value")

typedef enum {
#define GKV_OP_ENUM(name, num, str, flags, help) GKV_OP_##name = num,
    GKV_COMMAND_LIST(GKV_OP_ENUM)
#undef GKV_OP_ENUM
        GKV_OP_MAX
} gkv_op_t;

/* The command's lower-case name, or NULL for an unknown opcode. */
const char *gkv_op_name(unsigned op);

#endif
