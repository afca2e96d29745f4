/* ctx.h — the CPU kernels' private state of one op layer (dm_ops.bctx, ops/backend.h):
 * what the generic dm_ops does not hold. Inside src/ops only.
 *   - the oneDNN context (its primitives cached inside), made on the first matmul that
 *     asks for it (onednn_why: its failure);
 *   - the bf16 products' operand scratch and the bf16 dout of a matmul's two backward
 *     products (grown on demand, kept);
 *   - the model's weights and their bf16 copy (dm_ops_set_weights): a bf16 matmul whose
 *     weight lies in them reads the copy; any other operand is rounded per call;
 *   - the registry of bf16 copies of activations and gradients, and the rooms the model
 *     gave for them (the op layer's side room; ops/copies.h): copies.c. */
#ifndef DM_OPS_CPU_CTX_H
#define DM_OPS_CPU_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "ops/backend.h"
#include "ops/copies.h"
#include "ops/ops.h"

typedef struct dm_cpu_ctx {
    struct dm_onednn *onednn;
    const char *onednn_why;
    void *bbuf;
    size_t bcap;
    uint16_t *dbuf;
    size_t dcap;
    uint16_t *wts_bf16; /* owned: room for wts_cap values (dm_ops_reserve_bf16_weights) */
    size_t wts_cap;
    dm_copies copies;   /* the registry of bf16 copies, the rooms, the weights' copy */
} dm_cpu_ctx;

/* The op layer's CPU state, made on first use (aborts with a message when even that
 * small struct cannot be allocated). */
dm_cpu_ctx *dm_cpu_ctx_of(dm_ops *ops);
void dm_cpu_ctx_free(void *ctx);

/* The room for a bf16 copy of y[n] when the products run bf16 and the model gave y room
 * (NULL: none): a fused producer writes bf16(y) there in its own pass, then registers it
 * with dm_cpu_copy_made (copies.c; ops/copies.h). */
uint16_t *dm_cpu_room_of(dm_ops *ops, const float *y, size_t n);
void dm_cpu_copy_made(dm_ops *ops, const float *x, const uint16_t *xb, size_t n);

#endif
