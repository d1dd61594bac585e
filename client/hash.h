/* hash.h: uthash as libgpukv uses it. uthash's default answer to a failed allocation is
 * exit(), which a library must never do: here a failed HASH_ADD leaves the item out of the
 * table and sets gkv__hash_oom (per thread), which the caller clears before and checks after. */
#ifndef GKV_CLIENT_HASH_H
#define GKV_CLIENT_HASH_H

#define HASH_NONFATAL_OOM 1
extern _Thread_local int gkv__hash_oom;
#define uthash_nonfatal_oom(obj) ((void)(obj), gkv__hash_oom = 1)
#include <uthash.h>

#endif
