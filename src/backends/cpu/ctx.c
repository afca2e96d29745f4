/* ctx.c — the CPU kernels' private state of an op layer (ctx.h), and the bf16 weight copy
 * kept in it. */
#include "backends/cpu/cpu.h"
#include "backends/cpu/ctx.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"

dm_cpu_ctx *dm_cpu_ctx_of(dm_ops *ops) {
    if (!ops->bctx && !(ops->bctx = calloc(1, sizeof(dm_cpu_ctx)))) {
        fprintf(stderr, "dormouse: out of memory for the op layer's CPU state\n");
        abort();
    }
    ops->bctx_free = dm_cpu_ctx_free;
    return ops->bctx;
}

void dm_cpu_ctx_free(void *ctx) {
    dm_cpu_ctx *c = ctx;
    if (!c) return;
    dm_onednn_free(c->onednn);
    free(c->bbuf);
    free(c->dbuf);
    free(c->wts_bf16);
    free(c->copies);
    free(c);
}


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
