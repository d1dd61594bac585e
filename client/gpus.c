/* gpus.c: where values live on a daemon of several GPUs: gkv_locate (GETSIZE's gpu) and
 * gkv_move (MOVE). */
#include "client.h"
#include "commands.h"
#include "error.h"

int gkv_locate(gkv_client_t *c, const void *key, size_t klen, uint64_t *size, int *gpu)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_GETSIZE);
    gkv_wr_bin(&c->wr, GKV_F_KEY, key, klen);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc;
    *size = c->resp.size;
    *gpu = c->resp.gpu > 0 ? (int)c->resp.gpu : 0; /* an older server names none: its first */
    return 0;
}

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
