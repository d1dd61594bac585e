/* commands.h: the one list of commands. Server table, client names and CLI help derive from it.
 * Opcodes travel on the wire: never renumber, append new ones. */
#ifndef GKV_PROTO_COMMANDS_H
#define GKV_PROTO_COMMANDS_H

/* Flags, each checked by the server's dispatch before a handler runs (4 was "write", never
 * checked, and is retired). */
#define GKV_CMD_KEY 1u     /* needs a key field */
#define GKV_CMD_PAYLOAD 2u /* may carry a payload */
#define GKV_CMD_LOCAL 8u   /* zero-copy: needs a connection that was granted zero-copy */

/* X(NAME, name, opcode, flags, "summary"): the name on the wire's documentation, the CLI's help
 * and the server's handler gkv_cmd_<name> is the lower-case token. */
#define GKV_COMMAND_LIST(X)                                                                        \
    X(HELLO, hello, 1, 0, "exchange versions, limits and backend")                                 \
    X(PING, ping, 2, 0, "check that the server answers")                                           \
    X(SET, set, 3, GKV_CMD_KEY | GKV_CMD_PAYLOAD, "store a value")                                 \
    X(GET, get, 4, GKV_CMD_KEY, "read a value or a byte range of it")                              \
    X(MGET, mget, 5, 0, "read many key+range pairs at once")                                       \
    X(EXISTS, exists, 6, 0, "count how many of some keys exist")                                   \
    X(DEL, del, 7, 0, "delete keys")                                                               \
    X(LIST, list, 8, 0, "list keys under a prefix, page by page")                                  \
    X(GETSIZE, getsize, 9, 0, "size of a value, or total under a prefix")                          \
    X(FLUSH, flush, 10, 0, "delete every key")                                                     \
    X(INFO, info, 11, 0, "server, memory, clients and keyspace statistics")                        \
    X(MAP, map, 12, GKV_CMD_KEY | GKV_CMD_LOCAL, "lease a value for zero-copy reading")            \
    X(RELEASE, release, 13, GKV_CMD_LOCAL, "end leases")                                           \
    X(CREATE, create, 14, GKV_CMD_KEY | GKV_CMD_LOCAL, "lease a new, invisible value to write")    \
    X(SEAL, seal, 15, GKV_CMD_LOCAL, "publish a created value")                                    \
    X(ABORT, abort, 16, GKV_CMD_LOCAL, "discard a created value")                                  \
    X(EXPIRE, expire, 17, GKV_CMD_KEY, "give a key a deadline (TTL) in milliseconds")              \
    X(PERSIST, persist, 18, GKV_CMD_KEY, "take a key's deadline away")                             \
    X(TTL, ttl, 19, GKV_CMD_KEY, "milliseconds a key has left")                                    \
    X(MOVE, move, 20, GKV_CMD_KEY, "move a value to another GPU of the daemon")                    \
    X(SAVE, save, 21, 0, "write a snapshot of every key to --snapshot-dir")                        \
    X(TAKEOVER, takeover, 22, 0, "hand values and sockets to a successor (gpukvd --takeover)")     \
    X(NODE, node, 23, GKV_CMD_PAYLOAD, "between the nodes of a cluster (internal, node.h)")        \
    X(WATCH, watch, 24, 0, "stream the changes of the keys under a prefix")                        \
    X(UNWATCH, unwatch, 25, 0, "end the connection's watch")                                       \
    X(BUFFER, buffer, 26, GKV_CMD_LOCAL, "register device memory GET writes values into")

typedef enum {
#define GKV_OP_ENUM(NAME, name, num, flags, help) GKV_OP_##NAME = num,
    GKV_COMMAND_LIST(GKV_OP_ENUM)
#undef GKV_OP_ENUM
        GKV_OP_MAX
} gkv_op_t;

/* Each command's flags as a constant, GKV_FLAGS_<NAME>, for tables built elsewhere. */
enum {
#define GKV_OP_FLAGS(NAME, name, num, flags, help) GKV_FLAGS_##NAME = (flags),
    GKV_COMMAND_LIST(GKV_OP_FLAGS)
#undef GKV_OP_FLAGS
};

/* The command's lower-case name, or NULL for an unknown opcode. */
const char *gkv_op_name(unsigned op);

#endif
