/* fdstore_impl.h: between fdstore.c (names, storing, commits) and fdstore_adopt.c (adopting a
 * predecessor's values). Private to server/persist. */
#ifndef GKV_PERSIST_FDSTORE_IMPL_H
#define GKV_PERSIST_FDSTORE_IMPL_H

#include <stdint.h>

#include "fdstore.h"

/* A descriptor the predecessor stored: gpukv-m-<epoch>-<idx> or gpukv-j-<epoch>-<idx>. */
typedef struct {
    int fd;
    char kind; /* 'm' or 'j' */
    uint32_t epoch, idx;
} gkv__stored_t;

/* Replays the journal j (the predecessor's epoch) into f's empty store, copying each value out
 * of the memory of stored (n descriptors) whose epoch is j's. Returns 0 (what could be adopted
 * is published, the rest dropped and logged; f's adopted_* counts set) or a negative code with
 * the store empty. */
int gkv__fdstore_adopt(gkv_fdstore_t *f, const gkv__stored_t *j, const gkv__stored_t *stored,
                       unsigned n);

#endif
