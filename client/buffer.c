/* buffer.c: registered buffers (BUFFER, GET with into; PROTOCOL.md "Reading into a registered
 * buffer"): this process's device memory, which the daemon writes values into itself. */
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "error.h"
#include "import.h"

/* A refusal of the library's own, with its reason in c->errmsg (gkv_client_errmsg). */
static int refuse(gkv_client_t *c, int code, const char *why)
{
    snprintf(c->errmsg, sizeof(c->errmsg), "%s", why);
    return code;
}

int gkv_buffer_register(gkv_client_t *c, void *dptr, size_t len, uint64_t *id)
{
    if (!dptr || !len || !id)
        return refuse(c, GKV_EINVAL, "a buffer needs memory and a length of 1 or more bytes");
    if (!c->nshared)
        return refuse(c, GKV_ENOTSUP,
                      "registered buffers need zero-copy (a local connection to the daemon)");
    uint8_t handle[GKV_IPC_HANDLE_LEN];
    uint64_t off, size;
    char uuid[48];
    int rc = gkv__cuda_ipc_handle(dptr, handle, &off, &size, uuid, sizeof(uuid));
    if (rc == GKV_ENOTSUP)
        return refuse(c, rc, "the buffer is not CUDA device memory");
    if (rc == GKV_EINVAL)
        return refuse(c, rc,
                      "the buffer's memory has no CUDA IPC handle (it must come from cudaMalloc, "
                      "not a memory pool, cudaMallocAsync or the VMM API)");
    if (rc)
        return refuse(c, rc, "the buffer's CUDA IPC handle could not be made");
    if (len > size - off)
        return refuse(c, GKV_EINVAL, "the buffer runs past the end of its allocation");
    int gpu = -1;
    for (uint32_t i = 0; i < c->info.gpus; i++)
        if (c->info.gpu_uuids[i] && strcmp(c->info.gpu_uuids[i], uuid) == 0)
            gpu = (int)i;
    if (gpu < 0)
        return refuse(c, GKV_EINVAL, "the buffer is on a GPU the daemon does not serve");
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_BUFFER);
    gkv_wr_bin(&c->wr, GKV_F_EXPORT, handle, sizeof(handle));
    gkv_wr_uint(&c->wr, GKV_F_OFFSET, off);
    gkv_wr_uint(&c->wr, GKV_F_LENGTH, len);
    gkv_wr_uint(&c->wr, GKV_F_GPU, (uint64_t)gpu);
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc == GKV_EUNKNOWNCMD ? GKV_ENOTSUP : rc;
    *id = c->resp.into;
    return 0;
}

int gkv_buffer_drop(gkv_client_t *c, uint64_t id)
{
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_BUFFER);
    gkv_wr_uint(&c->wr, GKV_F_INTO, id);
    int rc;
    if ((rc = gkv__send(c, NULL, 0)) || (rc = gkv__recv(c)))
        return rc == GKV_EUNKNOWNCMD ? GKV_ENOTSUP : rc;
    return c->resp.count ? 1 : 0;
}

int gkv_get_into(gkv_client_t *c, const void *key, size_t klen, const gkv_range_t *range,
                 uint64_t id, uint64_t at, gkv_value_info_t *info)
{
    int rc = gkv__check_key(c, key, klen);
    if (rc)
        return rc;
    gkv__cache_flush(c);
    gkv__begin(c, GKV_OP_GET);
    gkv__put_key_range(c, key, klen, range);
    gkv_wr_uint(&c->wr, GKV_F_INTO, id);
    if (at)
        gkv_wr_uint(&c->wr, GKV_F_INTO_AT, at);
    if ((rc = gkv__send_waiting(c)))
        return rc;
    if (c->resp.payload_len) /* a daemon that ignored into sent the bytes: drop them */
        return (rc = gkv__drain(c, c->resp.payload_len)) ? rc : GKV_ENOTSUP;
    /* The bytes are in the buffer: the reply's length says how many. */
    return info ? gkv__read_info(c, c->resp.length, info) : 0;
}
