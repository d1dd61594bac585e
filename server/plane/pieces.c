/* pieces.c: a pull's pieces (pieces.h). */
#include "pieces.h"

void gkv_pieces_uniform(gkv_pieces_t *pc)
{
    pc->end = 0;
    pc->mid = 0;
    pc->n = (pc->size + pc->chunk - 1) / pc->chunk;
}

void gkv_pieces_plan(gkv_pieces_t *pc, uint64_t size, uint64_t chunk, unsigned taper)
{
    *pc = (gkv_pieces_t){.size = size, .chunk = chunk};
    uint64_t end = taper > 1 ? chunk / taper : 0;
    if (!end || size < 4 * end) {
        gkv_pieces_uniform(pc);
        return;
    }
    uint64_t mid = size - 2 * end;
    uint64_t half = (mid / 2 + end - 1) / end * end; /* at least two middle pieces */
    pc->end = end;
    pc->mid = half < chunk ? half : chunk;
    pc->n = 2 + (mid + pc->mid - 1) / pc->mid;
}

void gkv_pieces_at(const gkv_pieces_t *pc, uint64_t i, uint64_t *off, uint64_t *len)
{
    if (!pc->end) {
        *off = i * pc->chunk;
        *len = pc->size - *off < pc->chunk ? pc->size - *off : pc->chunk;
    } else if (i == 0) {
        *off = 0;
        *len = pc->end;
    } else if (i == pc->n - 1) {
        *off = pc->size - pc->end;
        *len = pc->end;
    } else {
        *off = pc->end + (i - 1) * pc->mid;
        uint64_t left = pc->size - pc->end - *off;
        *len = left < pc->mid ? left : pc->mid;
    }
}
