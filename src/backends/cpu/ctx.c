/* ctx.c — the CPU kernels' private state of an op layer (ctx.h). */
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
    dm_copies_free(&c->copies);
    free(c);
}

