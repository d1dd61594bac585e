/* cmd_node.c: NODE, the requests between cluster nodes. The cluster answers them before
 * dispatch (server/cluster/node.c); what reaches this handler is a REPLICA, whose payload is
 * received like a SET's (the cluster then publishes it, gkv_cluster_commit), or a NODE request
 * to a daemon that is not in a cluster. */
#include "handlers.h"

#include "checks.h"
#include "error.h"
#include "node.h"

int gkv_cmd_node(gkv_cmd_ctx_t *ctx, const gkv_request_t *req, gkv_reply_t *rep)
{
    if (req->node_op == GKV_NODE_REPLICA && (req->has & GKV_HAS_KEY) && ctx->clustered) {
        int rc = gkv_check_key(ctx, req->key, rep);
        return rc ? rc : gkv_cmd_set(ctx, req, rep);
    }
    return gkv_reply_fail(rep, GKV_ENOTSUP, "NODE requests are for the nodes of a cluster");
}
