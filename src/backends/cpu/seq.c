/* seq.c — the cpu backend's sequence ops (ops/seq.c defines them): the byte embedding,
 * the causal depthwise conv and the softmax cross-entropy on the CPU kernels. */
#include "backends/cpu/kernels/kernels.h"
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

static void conv_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_conv_args *a = args;
    if (dir == DM_FWD) dm_conv_fwd(a->y, a->x, a->w, a->B, a->T, a->C, a->W);
    else dm_conv_bwd_yb(a->dx, a->dxb, a->dw, a->dy, a->x, a->w, a->B, a->T, a->C, a->W);
}
static const dm_impl CONV[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, conv_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_conv = DM_IMPL_LIST(CONV);

static void xent_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_xent_args *a = args;
    if (dir == DM_FWD)
        *a->mean = dm_xent_fwd_ids(a->losses, a->logits, a->targets, a->w, a->N, a->V);
    else dm_xent_bwd_yb_ids(a->dlogits, a->db, a->logits, a->targets, a->w, a->N, a->V, a->scale);
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
static const dm_impl HEAD_XENT[] = {
    {"cpu", 0, DM_PREC_FP32, NULL, NULL, head_xent_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_head_xent = DM_IMPL_LIST(HEAD_XENT);
