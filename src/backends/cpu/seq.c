/* seq.c — the cpu backend's sequence ops (ops/seq.c defines them): the embedding, the
 * causal depthwise conv, the softmax cross-entropy on the CPU kernels, and the fused head
 * (fp32 on OpenBLAS; bf16 on oneDNN's bf16 matmul or the reference bf16 path). */
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/ctx.h"
#include "ops/op.h"
#include "ops/seq.h"

static void embed_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_embed_args *a = args;
    if (dir == DM_FWD) dm_embed_fwd_ids(a->out, a->tok, a->w, a->table, a->N, a->C);
    else dm_embed_bwd_ids(a->dtable, a->dout, a->tok, a->w, a->N, a->C);
}
static const dm_impl EMBED[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, embed_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_embed = DM_IMPL_LIST(EMBED);

/* the conv's and the cross-entropy's backward write the bf16 copy of their gradient in
 * the same pass where it has room (copies.c) */
static void conv_cpu(dm_ops *ops, void *args, int dir) {
    dm_conv_args *a = args;
    if (dir == DM_FWD) {
        dm_conv_fwd(a->y, a->x, a->w, a->B, a->T, a->C, a->W);
        return;
    }
    size_t n = (size_t)a->B * a->T * a->C;
    uint16_t *dxb = dm_cpu_room_of(ops, a->dx, n);
    dm_conv_bwd_yb(a->dx, dxb, a->dw, a->dy, a->x, a->w, a->B, a->T, a->C, a->W);
    if (dxb) dm_cpu_copy_made(ops, a->dx, dxb, n);
}
static const dm_impl CONV[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, conv_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_conv = DM_IMPL_LIST(CONV);

static void xent_cpu(dm_ops *ops, void *args, int dir) {
    dm_xent_args *a = args;
    if (dir == DM_FWD) {
        *a->mean = dm_xent_fwd_ids(a->losses, a->logits, a->targets, a->w, a->N, a->V);
        return;
    }
    size_t n = (size_t)a->N * a->V;
    uint16_t *db = dm_cpu_room_of(ops, a->dlogits, n);
    dm_xent_bwd_yb_ids(a->dlogits, db, a->logits, a->targets, a->w, a->N, a->V, a->scale);
    if (db) dm_cpu_copy_made(ops, a->dlogits, db, n);
}
static const dm_impl XENT[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, xent_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_xent = DM_IMPL_LIST(XENT);

/* head_xent: each chunk's logits by OpenBLAS (dm_gemm) into work, then the xent kernels,
 * then (backward) the two products of the chunk's dlogits */
static void head_xent_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_head_xent_args *a = args;
    double sum = 0;
    for (int r0 = 0; r0 < a->N; r0 += a->R) {
        int n = a->N - r0 < a->R ? a->N - r0 : a->R;
        const float *x = a->x + (size_t)r0 * a->D;
        const void *t = (const char *)a->targets + (size_t)r0 * (size_t)(a->w ? a->w : 1);
        dm_matmul_fwd(NULL, a->work, x, a->W, NULL, n, a->D, a->V);
        if (dir == DM_FWD) {
            sum += n * dm_xent_fwd_ids(a->losses ? a->losses + r0 : NULL, a->work, t, a->w, n,
                                       a->V);
            continue;
        }
        dm_xent_bwd_yb_ids(a->work, NULL, a->work, t, a->w, n, a->V, a->scale);
        dm_matmul_bwd_data(NULL, a->dx + (size_t)r0 * a->D, a->work, a->W, n, a->D, a->V, 0);
        dm_matmul_bwd_weight(NULL, a->dW, NULL, a->work, x, n, a->D, a->V);
    }
    if (dir == DM_FWD) *a->mean = a->N ? sum / a->N : 0;
}
/* head_xent in bf16: the same chunks, each of the three products on bf16 operands (the
 * chunk's rows of x: the final norm's copy where it made one; W: the model's bf16 weights;
 * the chunk's dlogits rounded once for both backward products), f32 accumulation, the
 * cross-entropy in f32. hw: oneDNN's bf16 matmul, else the reference bf16 path. */
static dm_matmul_args chunk_product(const dm_head_xent_args *a, int r0, int n) {
    size_t at = (size_t)r0 * a->D;
    return (dm_matmul_args){.out = a->work, .in = a->x + at, .W = a->W,
                            .din = a->dx ? a->dx + at : NULL, .dout = a->work, .dW = a->dW,
                            .N = n, .K = a->D, .O = a->V, .prec = a->prec};
}
static const char *head_bf16_supports(dm_ops *ops, const void *args, int dir, int hw) {
    const dm_head_xent_args *a = args;
    /* the first chunk is the largest: its operand scratch serves the rest */
    dm_matmul_args m = chunk_product(a, 0, a->N < a->R ? a->N : a->R);
    const char *why = dm_cpu_matmul_bf16_supports(ops, &m, DM_FWD, hw);
    if (!why && dir == DM_BWD) why = dm_cpu_matmul_bf16_supports(ops, &m, DM_BWD, hw);
    if (!why && dir == DM_BWD) why = dm_cpu_matmul_bf16_supports(ops, &m, DM_BWD_W, hw);
    return why;
}
static void head_xent_bf16(dm_ops *ops, void *args, int dir, int hw) {
    dm_head_xent_args *a = args;
    double sum = 0;
    for (int r0 = 0; r0 < a->N; r0 += a->R) {
        int n = a->N - r0 < a->R ? a->N - r0 : a->R;
        const void *t = (const char *)a->targets + (size_t)r0 * (size_t)(a->w ? a->w : 1);
        dm_matmul_args m = chunk_product(a, r0, n);
        dm_cpu_matmul_bf16_run(ops, &m, DM_FWD, hw);
        if (dir == DM_FWD) {
            sum += n * dm_xent_fwd_ids(a->losses ? a->losses + r0 : NULL, a->work, t, a->w, n,
                                       a->V);
            continue;
        }
        dm_xent_bwd_yb_ids(a->work, NULL, a->work, t, a->w, n, a->V, a->scale);
        int made = dm_cpu_dout_bf16(ops, a->work, (size_t)n * a->V, 1);
        dm_cpu_matmul_bf16_run(ops, &m, DM_BWD, hw);
        dm_cpu_matmul_bf16_run(ops, &m, DM_BWD_W, hw);
        dm_cpu_dout_forget(ops, made);
    }
    if (dir == DM_FWD) *a->mean = a->N ? sum / a->N : 0;
}
static const char *head_hw_supports(dm_ops *o, const void *a, int d) {
    return head_bf16_supports(o, a, d, 1);
}
static const char *head_ref_supports(dm_ops *o, const void *a, int d) {
    return head_bf16_supports(o, a, d, 0);
}
static void head_hw_run(dm_ops *o, void *a, int d) { head_xent_bf16(o, a, d, 1); }
static void head_ref_run(dm_ops *o, void *a, int d) { head_xent_bf16(o, a, d, 0); }

static const dm_impl HEAD_XENT[] = {
    {"onednn-bf16", 0, DM_PREC_BF16, NULL, head_hw_supports, head_hw_run, DM_MEM_HOST},
    {"reference-bf16", 1, DM_PREC_BF16, NULL, head_ref_supports, head_ref_run, DM_MEM_HOST},
    {"cpu", 0, DM_PREC_FP32, NULL, NULL, head_xent_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_head_xent = DM_IMPL_LIST(HEAD_XENT);
