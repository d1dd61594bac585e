/* node.h: the requests cluster nodes send each other, as NODE frames (op 23) on gpukv's own
 * protocol, over TCP with the cluster's token (proto/PROTOCOL.md, "Between nodes"). Each
 * carries node_op, the sender's name (node) and incarnation; a receiver answers UNAVAILABLE to
 * a sender that is not a current member at that incarnation. Stable numbers: append only. */
#ifndef GKV_PROTO_NODE_H
#define GKV_PROTO_NODE_H

enum {
    /* To a key's home: who owns its value, at which version (reply: owner, owner_inc,
     * vversion, size), NOTFOUND, or BUSY while a write of it is being recorded. */
    GKV_NODE_LOOKUP = 1,
    /* To a key's home: the sender now owns the key's value (size; flags NX/XX decided here).
     * The previous owner's copy is dropped first. Reply: vversion; EXISTS/NOTFOUND (NX/XX);
     * BUSY; UNAVAILABLE when the previous owner does not answer (nothing changed). */
    GKV_NODE_RECORD = 2,
    /* To an owner (from the key's home): drop your copy of key (reply count 0/1). */
    GKV_NODE_DROP = 3,
    /* To an owner: the value of key at vversion, as a GET reply (naming vversion); NOTFOUND
     * when this node does not hold that version (any more). With vversion 0, to the key's
     * home: its current value when the home owns it too (the reply names its vversion), else
     * LOOKUP's reply. */
    GKV_NODE_FETCH = 4,
    /* To a key's home: delete it (the owner's copy first). Reply count 0/1; BUSY;
     * UNAVAILABLE. */
    GKV_NODE_DELETE = 5,
    /* To every home: the keys it records under prefix (after cursor, at most limit), as LIST's
     * entries [key, size]; cursor set when there are more. */
    GKV_NODE_LIST = 6,
    /* To a key's new home after the members changed: the sender owns key at vversion (size).
     * Recorded unless the home has a newer version. Reply count 1 (recorded) or 0. */
    GKV_NODE_REGISTER = 7,
    /* To this node itself: a replica of key at vversion, the payload its bytes (a read on this
     * node fetched it from the owner). */
    GKV_NODE_REPLICA = 8,
    /* To every member, while the sender cannot reach etcd: reply count 0 when this node cannot
     * either (it vouches that the sender is still a member, at that incarnation, in its view),
     * 1 when it can (the sender must renew its lease itself). */
    GKV_NODE_VOUCH = 9,
    /* The data plane (issue 35): the sender's NIXL agent metadata (plane) and transfer arenas
     * (arenas: per arena 32 bytes, little-endian: address, size, slot size, NIXL device id
     * (u32), memory kind (u32: 0 host, 1 GPU)). The receiver loads the agent and writes a
     * probe into the sender's first arena through NIXL: reply count 1 (NIXL works from here to
     * the sender) or 0 with the reason in message. */
    GKV_NODE_PLANE = 10,
    /* To an owner, after PLANE: write bytes [offset, offset + length) of key's value at
     * vversion into the sender's arena number gpu at arena_offset, through NIXL. Reply: size
     * (and the value's meta with offset 0) once written; NOTFOUND when this node does not hold
     * that version (any more); BUSY; UNAVAILABLE or IO when the transfer failed (the sender
     * then reads over TCP). */
    GKV_NODE_STAGE = 11,
    /* To an owner, after PLANE: write key's value at vversion into the sender's arena number
     * gpu, chunk by chunk (length bytes each; chunk i into the slot at offset slots[i % n]),
     * each write notifying the sender through NIXL ("GKVN", 1, xfer, i); a slot is reused once
     * the sender notified that it copied the chunk before out ("GKVN", 2, xfer, i). Reply:
     * size (and meta) once every chunk is written; NOTFOUND, BUSY, RANGE, INVAL, NOTSUP,
     * UNAVAILABLE, IO as STAGE. */
    GKV_NODE_PUSH = 12,
    /* From a key's home to a node whose LOOKUP (or FETCH at the home) carried wait and found
     * no record: key was recorded since (at vversion); the receiver's requests waiting for it
     * ask again. Reply count 0. One notification per LOOKUP: a node that still waits asks
     * again (docs/handoff.md, "Waits across a cluster"). */
    GKV_NODE_NOTIFY = 13,
};

/* DROP's flags field: the copy is dropped because the key was written on another node (its
 * new owner reports that write to watchers; the drop is no event). */
#define GKV_DROP_SUPERSEDED 8u

/* The size of one arena's record in PLANE's arenas. */
#define GKV_PLANE_ARENA_REC 32

#endif
