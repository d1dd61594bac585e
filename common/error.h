/* error.h: helpers around the error list of <gpukv/gpukv.h> shared by daemon, library and CLI. */
#ifndef GKV_COMMON_ERROR_H
#define GKV_COMMON_ERROR_H

#include <gpukv/gpukv.h>

/* Translates an errno value into the closest GKV_E* code. */
int gkv_err_from_errno(int e);

#endif
