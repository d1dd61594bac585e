/* paths.h: file-system paths the daemon and the CLI share (the default socket is in gpukv.h). */
#ifndef GKV_COMMON_PATHS_H
#define GKV_COMMON_PATHS_H

#include <stddef.h>

/* The directory part of path into dir (cap bytes): "." for a bare name, "/" for "/name". */
void gkv_path_dir(const char *path, char *dir, size_t cap);

#endif
