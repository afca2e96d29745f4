/* copies.c — the cpu backend's bf16 copies of the operands its bf16 products read (the
 * op layer's side room, ops.h): the registry of copies that hold exactly bf16 of their
 * tensor now, the rooms the model gave beside the tensors products read, the matmul
 * backward's dout rounded once for its two products, and the model's bf16 weights.
 *
 * A copy enters the registry when it is made: by a fused producer in its own pass
 * (dm_cpu_room_of, then dm_cpu_copy_made), or right after an op that wrote a tensor with a
 * room (dm_cpu_side_written, after), or by the matmul backward for its dout. It leaves when
 * any op writes its tensor or its room (dm_cpu_side_written, before the op runs), when
 * another copy is made in its room, and at dm_cpu_forget_bf16: so a product never reads a
 * copy that is not bf16 of its tensor as it is. Rooms are the running unit's (the model
 * gives them unit by unit); copies outlive them. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/ctx.h"
#include "backends/cpu/kernels/kernels.h"
#include "base/clock.h"
#include "ops/atlas.h"
#include "ops/policy.h"

/* [a, a + n) and [b, b + m) overlap (elements of size sz) */
static int overlap(const void *a, size_t n, const void *b, size_t m, size_t sz) {
    const char *p = a, *q = b;
    return n && m && p < q + m * sz && q < p + n * sz;
}

/* the registry without entry i */
static void drop(dm_cpu_ctx *c, int i) {
    memmove(c->copies + i, c->copies + i + 1, (size_t)(c->n_copies - i - 1) * sizeof *c->copies);
    c->n_copies--;
}

void dm_cpu_copy_made(dm_ops *ops, const float *x, const uint16_t *xb, size_t n) {
    dm_cpu_ctx *cx = dm_cpu_ctx_of(ops);
    for (int i = cx->n_copies - 1; i >= 0; i--) /* copies of x, or made where xb now lies */
        if (overlap(cx->copies[i].x, cx->copies[i].n, x, n, sizeof(float)) ||
            overlap(cx->copies[i].xb, cx->copies[i].n, xb, n, sizeof(uint16_t)))
            drop(cx, i);
    if (cx->n_copies == cx->cap_copies) {
        int cap = cx->cap_copies ? 2 * cx->cap_copies : 32;
        struct dm_bf16_copy *c = realloc(cx->copies, (size_t)cap * sizeof *c);
        if (!c) return; /* not registered: the products round x themselves */
        cx->copies = c;
        cx->cap_copies = cap;
    }
    cx->copies[cx->n_copies++] = (struct dm_bf16_copy){x, xb, n};
}

const uint16_t *dm_cpu_copy_of(const dm_cpu_ctx *c, const float *x, size_t n) {
    for (int i = c->n_copies - 1; i >= 0; i--) /* a copy of x, or of rows around it */
        if (x >= c->copies[i].x && x + n <= c->copies[i].x + c->copies[i].n)
            return c->copies[i].xb + (x - c->copies[i].x);
    if (c->wts && x >= c->wts && x + n <= c->wts + c->n_wts) return c->wts_bf16 + (x - c->wts);
    return NULL;
}

void dm_cpu_forget_bf16(dm_ops *ops) {
    if (ops->bctx) ((dm_cpu_ctx *)ops->bctx)->n_copies = 0;
}

/* x[n] rounded into xb (a separate pass, timed as round_bf16), and registered */
static void round_into(dm_ops *ops, uint16_t *xb, const float *x, size_t n) {
    double t0 = ops->atlas ? dm_now() : 0;
    dm_bf16_from_f32(xb, x, n);
    if (ops->atlas) dm_atlas_add(ops->atlas, "round_bf16", NULL, NULL, dm_now() - t0, 0);
    dm_cpu_copy_made(ops, x, xb, n);
}

/* ---- the side room ---- */

size_t dm_cpu_side_bytes(const dm_ops *ops) {
    return dm_ops_bf16_active(ops) ? sizeof(uint16_t) : 0;
}

void dm_cpu_side_room(dm_ops *ops, const float *x, size_t n, float *room) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    for (int i = 0; i < c->n_rooms; i++)
        if (c->rooms[i].x == x && c->rooms[i].n == n) {
            c->rooms[i].room = (uint16_t *)room;
            return;
        }
    if (c->n_rooms == c->cap_rooms) {
        int cap = c->cap_rooms ? 2 * c->cap_rooms : 64;
        struct dm_side_room *r = realloc(c->rooms, (size_t)cap * sizeof *r);
        if (!r) return; /* no room: the products round x themselves */
        c->rooms = r;
        c->cap_rooms = cap;
    }
    c->rooms[c->n_rooms++] = (struct dm_side_room){x, n, (uint16_t *)room};
}

void dm_cpu_side_clear(dm_ops *ops) {
    if (ops->bctx) ((dm_cpu_ctx *)ops->bctx)->n_rooms = 0;
}

uint16_t *dm_cpu_room_of(dm_ops *ops, const float *y, size_t n) {
    dm_cpu_ctx *c = ops->bctx;
    if (!c || !c->n_rooms || !y || !dm_ops_bf16_active(ops)) return NULL;
    for (int i = c->n_rooms - 1; i >= 0; i--)
        if (c->rooms[i].x == y && n <= c->rooms[i].n) return c->rooms[i].room;
    return NULL;
}

void dm_cpu_side_written(dm_ops *ops, const float *p, size_t n, int after) {
    dm_cpu_ctx *c = ops->bctx;
    if (!c || (!c->n_copies && !c->n_rooms)) return;
    if (!after) { /* p is about to change: the copies of it, and those kept in it, go */
        for (int i = c->n_copies - 1; i >= 0; i--)
            if (overlap(c->copies[i].x, c->copies[i].n, p, n, sizeof(float)) ||
                overlap(c->copies[i].xb, c->copies[i].n * sizeof(uint16_t), p,
                        n * sizeof(float), 1))
                drop(c, i);
        return;
    }
    uint16_t *room = dm_cpu_room_of(ops, p, n);
    if (!room) return;
    for (int i = c->n_copies - 1; i >= 0; i--)
        if (c->copies[i].x == p && c->copies[i].n == n) return; /* its producer made it */
    round_into(ops, room, p, n);
}

/* ---- the matmul backward's dout ---- */

int dm_cpu_dout_bf16(dm_ops *o, const float *dout, size_t nd, int shared) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(o);
    if (!shared || !nd || !dm_ops_bf16_active(o) || dm_cpu_copy_of(c, dout, nd)) return 0;
    if (nd > c->dcap) {
        uint16_t *p = realloc(c->dbuf, nd * sizeof *p);
        if (!p) return 0; /* each product rounds dout itself */
        c->dbuf = p, c->dcap = nd;
    }
    dm_backend_enter(o->be); /* dout is the backend's memory: read in its window */
    round_into(o, c->dbuf, dout, nd);
    dm_backend_leave(o->be);
    return 1;
}

void dm_cpu_dout_forget(dm_ops *o, int made) {
    if (!made) return;
    dm_cpu_ctx *c = dm_cpu_ctx_of(o);
    for (int i = c->n_copies - 1; i >= 0; i--)
        if (c->copies[i].xb == c->dbuf) drop(c, i);
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
    c->wts = NULL;
    c->n_wts = 0;
    return 0;
}

void dm_cpu_set_weights(dm_ops *ops, const float *w, size_t n) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (!c->wts_bf16 || n > c->wts_cap) return;
    dm_backend_enter(ops->be);
    dm_bf16_from_f32(c->wts_bf16, w, n);
    dm_backend_leave(ops->be);
    c->wts = w;
    c->n_wts = n;
}
