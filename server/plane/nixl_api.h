/* nixl_api.h: the few functions of NIXL's C API that gpukvd calls, loaded at run time from the
 * libnixl_capi.so that `pip install nixl-cu13` puts in a Python environment, so that gpukvd
 * builds and runs without NIXL. The wheel ships no header: the declarations live here alone
 * (nixl_api.c), as of nixl-cu13 1.5 (upstream src/bindings/rust/wrapper.h; the C API is
 * marked experimental there), and gkv_nixl_load checks what it can of them at load. */
#ifndef GKV_PLANE_NIXL_API_H
#define GKV_PLANE_NIXL_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* NIXL's status codes (nixl_capi_status_t). */
enum { GKV_NIXL_OK = 0, GKV_NIXL_IN_PROG = 1 };
/* Memory kinds (nixl_capi_mem_type_t) and transfer directions (nixl_capi_xfer_op_t). */
enum { GKV_NIXL_DRAM = 0, GKV_NIXL_VRAM = 1 };
enum { GKV_NIXL_READ = 0, GKV_NIXL_WRITE = 1 };

/* Opaque handles of the C API. */
typedef void *gkv_nixl_h;

/* nixl_capi_agent_config_t (its layout checked against 1.5.1's create_configured_agent). */
typedef struct {
    bool enable_prog_thread;
    bool enable_listen_thread;
    uint16_t listen_port;
    int thread_sync; /* 0 none, 1 strict, 2 rw */
    unsigned int num_workers;
    uint64_t pthr_delay_us;
    uint64_t lthr_delay_us;
    bool capture_telemetry;
} gkv_nixl_agent_cfg_t;

typedef struct {
    void *dl;
    char lib[4096];    /* the library loaded */
    char version[32];  /* the wheel's version when its metadata was found, else "" */
    bool (*is_stub)(void);
    int (*create_agent)(const char *name, gkv_nixl_h *agent);
    int (*create_configured_agent)(const char *name, const gkv_nixl_agent_cfg_t *cfg,
                                   gkv_nixl_h *agent);
    int (*destroy_agent)(gkv_nixl_h agent);
    int (*get_local_md)(gkv_nixl_h agent, void **data, size_t *len); /* *data: malloc'd */
    int (*load_remote_md)(gkv_nixl_h agent, const void *data, size_t len, char **name);
    int (*invalidate_remote_md)(gkv_nixl_h agent, const char *name);
    int (*get_plugin_params)(gkv_nixl_h agent, const char *plugin, gkv_nixl_h *mems,
                             gkv_nixl_h *params);
    int (*destroy_mem_list)(gkv_nixl_h mems);
    int (*destroy_params)(gkv_nixl_h params);
    int (*create_backend)(gkv_nixl_h agent, const char *plugin, gkv_nixl_h params,
                          gkv_nixl_h *backend);
    int (*destroy_backend)(gkv_nixl_h backend);
    int (*create_reg_dlist)(int mem, gkv_nixl_h *dlist);
    int (*destroy_reg_dlist)(gkv_nixl_h dlist);
    int (*reg_dlist_add_desc)(gkv_nixl_h dlist, uintptr_t addr, size_t len, uint64_t dev,
                              const void *meta, size_t meta_len);
    int (*register_mem)(gkv_nixl_h agent, gkv_nixl_h dlist, gkv_nixl_h opt);
    int (*deregister_mem)(gkv_nixl_h agent, gkv_nixl_h dlist, gkv_nixl_h opt);
    int (*create_xfer_dlist)(int mem, gkv_nixl_h *dlist);
    int (*destroy_xfer_dlist)(gkv_nixl_h dlist);
    int (*xfer_dlist_add_desc)(gkv_nixl_h dlist, uintptr_t addr, size_t len, uint64_t dev);
    int (*create_xfer_req)(gkv_nixl_h agent, int op, gkv_nixl_h local, gkv_nixl_h remote,
                           const char *remote_agent, gkv_nixl_h *req, gkv_nixl_h opt);
    int (*post_xfer_req)(gkv_nixl_h agent, gkv_nixl_h req, gkv_nixl_h opt);
    int (*get_xfer_status)(gkv_nixl_h agent, gkv_nixl_h req);
    int (*release_xfer_req)(gkv_nixl_h agent, gkv_nixl_h req);
    int (*destroy_xfer_req)(gkv_nixl_h req);
    /* Optional arguments (a transfer's notification) and notifications. */
    int (*create_opt_args)(gkv_nixl_h *args);
    int (*destroy_opt_args)(gkv_nixl_h args);
    int (*opt_args_set_notif_msg)(gkv_nixl_h args, const void *data, size_t len);
    int (*opt_args_set_has_notif)(gkv_nixl_h args, bool has);
    int (*gen_notif)(gkv_nixl_h agent, const char *remote, const void *data, size_t len,
                     gkv_nixl_h opt);
    int (*create_notif_map)(gkv_nixl_h *map);
    int (*destroy_notif_map)(gkv_nixl_h map);
    int (*get_notifs)(gkv_nixl_h agent, gkv_nixl_h map, gkv_nixl_h opt);
    int (*notif_map_size)(gkv_nixl_h map, size_t *n);
    int (*notif_map_get_agent_at)(gkv_nixl_h map, size_t i, const char **name);
    int (*notif_map_get_notifs_size)(gkv_nixl_h map, const char *name, size_t *n);
    int (*notif_map_get_notif)(gkv_nixl_h map, const char *name, size_t i, const void **data,
                               size_t *len);
    int (*notif_map_clear)(gkv_nixl_h map);
} gkv_nixl_api_t;

/* Loads NIXL's C library into *api. where: a path to libnixl_capi.so, to the folder holding
 * it, or to a Python environment's site-packages (or the nixl_cu13 package in it); "auto"
 * looks in $GPUKV_NIXL (a path as above), then asks `python3` ($GPUKV_PYTHON) where nixl_cu13
 * is installed. Sets NIXL_PLUGIN_DIR (unless set) to the library's plugins, and UCX's
 * UCX_PROTO_EMULATION_ENABLE=n (no silent emulated transfers) and
 * UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y unless set. Checks that every function above resolves, that
 * the library is no stub, and the wheel's version (1.5.x, the one declared here; any other is
 * refused unless GPUKV_NIXL_ANY_VERSION=1). Returns 0, or GKV_ENOTSUP with a sentence in why
 * (cap bytes): not found, not loadable, another ABI. */
int gkv_nixl_load(const char *where, gkv_nixl_api_t *api, char *why, size_t cap);
/* Unloads it. */
void gkv_nixl_unload(gkv_nixl_api_t *api);

#endif
