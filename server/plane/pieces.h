/* pieces.h: how a pull cuts a value into the pieces it asks an owner for (docs/cluster.md,
 * "Tapered pieces"). Uniform: chunks of the slot's size, the last one shorter. Tapered: a
 * short first piece, so that the owner's first copy into its slot (the pull's first write
 * waits for it) is short; a short last piece, so that the reader's copy out of its slot after
 * the link went quiet is short; and between them pieces of at most a chunk, at least two of
 * them, in multiples of the end pieces' size. Pure arithmetic, no state beyond the plan. */
#ifndef GKV_PLANE_PIECES_H
#define GKV_PLANE_PIECES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t size;  /* the value's bytes */
    uint64_t chunk; /* a piece's most bytes (a slot) */
    uint64_t end;   /* tapered: the first and last pieces' bytes; 0: uniform */
    uint64_t mid;   /* tapered: a middle piece's bytes (the last middle one may be shorter) */
    uint64_t n;     /* pieces */
} gkv_pieces_t;

/* The plan for a size-byte value in chunks of chunk bytes (> 0), tapered with end pieces of
 * chunk / taper bytes where taper > 1 and the value is at least four end pieces long, else
 * uniform. */
void gkv_pieces_plan(gkv_pieces_t *pc, uint64_t size, uint64_t chunk, unsigned taper);
/* The plan made uniform (a pull that could not keep the tapered plan's pieces in flight). */
void gkv_pieces_uniform(gkv_pieces_t *pc);
/* Piece i (< pc->n): its offset in the value and its length (> 0, <= chunk). */
void gkv_pieces_at(const gkv_pieces_t *pc, uint64_t i, uint64_t *off, uint64_t *len);

#endif
