/* error.h: helpers around the error list of <gpukv/gpukv.h> shared by daemon, library and CLI. */
#ifndef GKV_COMMON_ERROR_H
#define GKV_COMMON_ERROR_H

#include <gpukv/gpukv.h>

#endif
