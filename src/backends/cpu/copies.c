/* copies.c — the cpu backend's bf16 copies of the operands its bf16 products read, in the
 * op layer's side room (ops.h; the bookkeeping: ops/copies.h): its rounding, the rooms and
 * the op outputs the op layer tells it of, the matmul backward's dout rounded once for its
 * two products, and the model's bf16 weights. */
#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/ctx.h"
#include "backends/cpu/kernels/kernels.h"
#include "base/clock.h"
#include "ops/atlas.h"

/* src[n] rounded into dst: a pass of its own, timed as round_bf16 */
static void round_pass(dm_ops *ops, uint16_t *dst, const float *src, size_t n) {
    double t0 = ops->atlas ? dm_now() : 0;
    dm_bf16_from_f32(dst, src, n);
    if (ops->atlas) dm_atlas_add(ops->atlas, "round_bf16", NULL, NULL, dm_now() - t0, 0);
}

void dm_cpu_copy_made(dm_ops *ops, const float *x, const uint16_t *xb, size_t n) {
    dm_copies_made(&dm_cpu_ctx_of(ops)->copies, x, xb, n);
}

void dm_cpu_forget_bf16(dm_ops *ops) {
    if (ops->bctx) dm_copies_forget(&((dm_cpu_ctx *)ops->bctx)->copies);
}

/* ---- the side room ---- */

size_t dm_cpu_side_bytes(const dm_ops *ops) {
    return dm_ops_bf16_active(ops) ? sizeof(uint16_t) : 0;
}

void dm_cpu_side_room(dm_ops *ops, const float *x, size_t n, float *room) {
    dm_copies_give_room(&dm_cpu_ctx_of(ops)->copies, x, n, (uint16_t *)room);
}

void dm_cpu_side_clear(dm_ops *ops) {
    if (ops->bctx) dm_copies_clear_rooms(&((dm_cpu_ctx *)ops->bctx)->copies);
}

uint16_t *dm_cpu_room_of(dm_ops *ops, const float *y, size_t n) {
    dm_cpu_ctx *c = ops->bctx;
    if (!c || !c->copies.n_room || !y || !dm_ops_bf16_active(ops)) return NULL;
    return dm_copies_room_of(&c->copies, y, n);
}

void dm_cpu_side_written(dm_ops *ops, const float *p, size_t n, int after) {
    dm_cpu_ctx *c = ops->bctx;
    if (!c || (!c->copies.n_copy && !c->copies.n_room)) return;
    dm_copies_written(&c->copies, ops, round_pass, p, n, after);
}

/* the operand scratch (matmul.c's operand_scratch: both operands' floats and 128 more,
 * f32 for the reference path, bf16 for the kernel in the same room) and the dout copy */
size_t dm_cpu_product_scratch(const dm_ops *ops, size_t pair, size_t dout) {
    if (!dm_ops_bf16_active(ops)) return 0;
    return (pair + 128) * sizeof(float) + dout * sizeof(uint16_t);
}

/* ---- the matmul backward's dout ---- */

int dm_cpu_dout_bf16(dm_ops *o, const float *dout, size_t nd, int shared) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(o);
    if (!shared || !nd || !dm_ops_bf16_active(o) || dm_copies_of(&c->copies, dout, nd)) return 0;
    if (nd > c->dcap) {
        uint16_t *p = realloc(c->dbuf, nd * sizeof *p);
        if (!p) return 0; /* each product rounds dout itself */
        c->dbuf = p, c->dcap = nd;
    }
    dm_backend_enter(o->be); /* dout is the backend's memory: read in its window */
    round_pass(o, c->dbuf, dout, nd);
    dm_backend_leave(o->be);
    dm_copies_made(&c->copies, dout, c->dbuf, nd);
    return 1;
}

void dm_cpu_dout_forget(dm_ops *o, int made) {
    if (made) dm_copies_drop_at(&dm_cpu_ctx_of(o)->copies, dm_cpu_ctx_of(o)->dbuf);
}

/* ---- the model's bf16 weights ---- */

int dm_cpu_reserve_bf16_weights(dm_ops *ops, size_t n) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (n <= c->wts_cap) return 0;
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) return 1;
    free(c->wts_bf16);
    c->wts_bf16 = p;
    c->wts_cap = n;
    c->copies.wts = NULL, c->copies.wts_b = NULL, c->copies.n_wts = 0;
    return 0;
}

void dm_cpu_set_weights(dm_ops *ops, const float *w, size_t n) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (!c->wts_bf16 || n > c->wts_cap) return;
    dm_backend_enter(ops->be);
    dm_bf16_from_f32(c->wts_bf16, w, n);
    dm_backend_leave(ops->be);
    c->copies.wts = w, c->copies.wts_b = c->wts_bf16, c->copies.n_wts = n;
}
