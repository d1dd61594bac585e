/* version.h: the release version shared by gpukvd, libgpukv and the CLI. */
#ifndef GKV_COMMON_VERSION_H
#define GKV_COMMON_VERSION_H

#define GKV_VERSION_STRING "0.1.0"

#endif
