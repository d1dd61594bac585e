/* nixl_api.c: NIXL's C library found and loaded at run time (nixl_api.h). The only file that
 * names NIXL's functions. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "log.h"
#include "nixl_api.h"

/* Where the wheel puts the C library, relative to site-packages. */
#define WHEEL_LIBS ".nixl_cu13.mesonpy.libs"
#define CAPI "libnixl_capi.so"

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The library under path (a file, its folder, site-packages or the package folder): 0 and
 * out, or -1. */
static int resolve(const char *path, char *out, size_t cap)
{
    if (is_file(path)) {
        snprintf(out, cap, "%s", path);
        return 0;
    }
    if (!is_dir(path))
        return -1;
    static const char *const tries[] = {"/" CAPI, "/" WHEEL_LIBS "/" CAPI, "/../" WHEEL_LIBS "/" CAPI};
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        char p[PATH_MAX];
        if ((size_t)snprintf(p, sizeof(p), "%s%s", path, tries[i]) < sizeof(p) && is_file(p)) {
            if (!realpath(p, out))
                snprintf(out, cap, "%s", p);
            return 0;
        }
    }
    return -1;
}

/* Asks python3 where the nixl_cu13 package lies (its folder), bounded by a timeout. */
static int ask_python(char *out, size_t cap)
{
    const char *py = getenv("GPUKV_PYTHON");
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof(cmd),
             "timeout 10 %s -c 'import importlib.util as u; s = u.find_spec(\"nixl_cu13\"); "
             "print(list(s.submodule_search_locations)[0] if s else \"\")' 2>/dev/null",
             py && *py ? py : "python3");
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[PATH_MAX] = "";
    char *got = fgets(line, sizeof(line), f);
    pclose(f);
    if (!got)
        return -1;
    line[strcspn(line, "\n")] = 0;
    return line[0] ? resolve(line, out, cap) : -1;
}

/* The wheel's version from its dist-info folder beside the library's folder. */
static void wheel_version(const char *lib, char *out, size_t cap)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", lib);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return;
    *slash = 0;
    snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/..");
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    const char *pre = "nixl_cu13-";
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (!strncmp(e->d_name, pre, strlen(pre)) && n > 10 &&
            !strcmp(e->d_name + n - 10, ".dist-info")) {
            snprintf(out, cap, "%.*s", (int)(n - 10 - strlen(pre)), e->d_name + strlen(pre));
            break;
        }
    }
    closedir(d);
}

int gkv_nixl_load(const char *where, gkv_nixl_api_t *api, char *why, size_t cap)
{
    memset(api, 0, sizeof(*api));
    char lib[PATH_MAX] = "";
    int found = -1;
    if (where && strcmp(where, "auto")) {
        found = resolve(where, lib, sizeof(lib));
        if (found) {
            snprintf(why, cap, "no %s at %s", CAPI, where);
            return GKV_ENOTSUP;
        }
    } else {
        const char *env = getenv("GPUKV_NIXL");
        if (env && *env)
            found = resolve(env, lib, sizeof(lib));
        if (found)
            found = ask_python(lib, sizeof(lib));
        if (found) {
            snprintf(why, cap, "NIXL is not installed (pip install nixl-cu13, or --nixl PATH)");
            return GKV_ENOTSUP;
        }
    }
    wheel_version(lib, api->version, sizeof(api->version));
    const char *any = getenv("GPUKV_NIXL_ANY_VERSION");
    if (api->version[0] && strncmp(api->version, "1.5.", 4) && !(any && !strcmp(any, "1"))) {
        snprintf(why, cap,
                 "nixl-cu13 %s is installed; gpukvd declares the C API of 1.5 (set "
                 "GPUKV_NIXL_ANY_VERSION=1 to try it anyway)",
                 api->version);
        return GKV_ENOTSUP;
    }
    /* Before the library (and UCX, which it loads) reads them. */
    char plugins[PATH_MAX + 16];
    snprintf(plugins, sizeof(plugins), "%s", lib);
    char *slash = strrchr(plugins, '/');
    if (slash)
        snprintf(slash, sizeof(plugins) - (size_t)(slash - plugins), "/plugins");
    setenv("NIXL_PLUGIN_DIR", plugins, 0);
    setenv("UCX_PROTO_EMULATION_ENABLE", "n", 0);
    setenv("UCX_CUDA_IPC_ENABLE_GET_ZCOPY", "y", 0);
    setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0); /* no CUDA transport on a machine without GPU */
    /* UCX takes SIGHUP by default (its "debug signal": it then logs at trace level), so a
     * node with NIXL never reloaded its configuration (session 44's reload test). */
    setenv("UCX_DEBUG_SIGNO", "0", 0);
    api->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!api->dl) {
        snprintf(why, cap, "%s cannot be loaded: %s", lib, dlerror());
        return GKV_ENOTSUP;
    }
    snprintf(api->lib, sizeof(api->lib), "%s", lib);
    struct {
        const char *name;
        void **fn;
    } syms[] = {
#define SYM(f) {"nixl_capi_" #f, (void **)&api->f}
        SYM(is_stub),           SYM(create_agent),       SYM(destroy_agent),
        SYM(create_configured_agent),
        SYM(get_local_md),      SYM(load_remote_md),     SYM(invalidate_remote_md),
        SYM(get_plugin_params), SYM(destroy_mem_list),   SYM(destroy_params),
        SYM(create_backend),    SYM(destroy_backend),    SYM(create_reg_dlist),
        SYM(destroy_reg_dlist), SYM(reg_dlist_add_desc), SYM(register_mem),
        SYM(deregister_mem),    SYM(create_xfer_dlist),  SYM(destroy_xfer_dlist),
        SYM(xfer_dlist_add_desc), SYM(create_xfer_req),  SYM(post_xfer_req),
        SYM(get_xfer_status),   SYM(release_xfer_req),   SYM(destroy_xfer_req),
        SYM(create_opt_args),   SYM(destroy_opt_args),   SYM(opt_args_set_notif_msg),
        SYM(opt_args_set_has_notif), SYM(gen_notif),     SYM(create_notif_map),
        SYM(destroy_notif_map), SYM(get_notifs),         SYM(notif_map_size),
        SYM(notif_map_get_agent_at), SYM(notif_map_get_notifs_size), SYM(notif_map_get_notif),
        SYM(notif_map_clear),
#undef SYM
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].fn = dlsym(api->dl, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(why, cap, "%s lacks %s: not the C API gpukvd declares (nixl-cu13 1.5)", lib,
                     syms[i].name);
            gkv_nixl_unload(api);
            return GKV_ENOTSUP;
        }
    }
    if (api->is_stub()) {
        snprintf(why, cap, "%s is a stub build of NIXL", lib);
        gkv_nixl_unload(api);
        return GKV_ENOTSUP;
    }
    return 0;
}

void gkv_nixl_unload(gkv_nixl_api_t *api)
{
    if (api->dl)
        dlclose(api->dl);
    memset(api, 0, sizeof(*api));
}
