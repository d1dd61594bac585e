/* gpus.c: gkv_move (MOVE), a value to another GPU of the daemon (gkv_locate, which says where
 * one is, is GETSIZE's, in requests.c). */
#include "client.h"
#include "commands.h"
#include "error.h"

int gkv_move(gkv_client_t *c, const void *key, size_t klen, int gpu)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    if (gpu < 0)
        return GKV_EINVAL;
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_MOVE);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    gkv_wr_uint(&c->wr, GKV_F_GPU, (uint64_t)gpu);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc;
    return c->resp.count ? 1 : 0;
}
