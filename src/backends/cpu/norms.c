/* norms.c — the cpu backend's norms (ops/norms.c defines them): the fused one-pass
 * kernels of both RMSNorms (norm_impl=reference leaves them for the composed reference)
 * and the per-head L2 norm's kernel. */
#include "backends/cpu/ctx.h"
#include "backends/cpu/kernels/kernels.h"
#include "ops/norms.h"
#include "ops/op.h"

static const char *fused_selected(const dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    return ops->norm_impl == DM_IMPL_REFERENCE ? "norm_impl=reference" : NULL;
}

/* the fused kernels of both RMSNorms (the gated one when z != NULL), each writing the bf16
 * copy of what the next products read in the same pass where it has room (copies.c): y,
 * or the backward's dz (gated) or dx */
static void norm_fused(dm_ops *ops, void *args, int dir) {
    dm_norm_args *a = args;
    size_t n = (size_t)a->R * a->C;
    float *out = dir == DM_FWD ? a->y : a->z ? a->dz : a->dx;
    uint16_t *yb = dm_cpu_room_of(ops, out, n);
    if (a->z && dir == DM_FWD)
        dm_gatednorm_fwd_yb(a->y, yb, a->rstd, a->x, a->z, a->w, a->R, a->C, a->eps, a->act);
    else if (a->z)
        dm_gatednorm_bwd_yb(a->dx, a->dz, yb, a->dw, a->dy, a->x, a->z, a->w, a->rstd_in,
                            a->R, a->C, a->act);
    else if (dir == DM_FWD)
        dm_rmsnorm_fwd_yb(a->y, yb, a->rstd, a->x, a->w, a->R, a->C, a->eps);
    else
        dm_rmsnorm_bwd_yb(a->dx, yb, a->dw, a->dy, a->x, a->w, a->rstd_in, a->R, a->C);
    if (yb) dm_cpu_copy_made(ops, out, yb, n);
}

static const dm_impl RMS[] = {
    {"fused", 0, DM_PREC_FP32, fused_selected, NULL, norm_fused, DM_MEM_HOST},
};
const dm_impl_list dm_cpu_rmsnorm = DM_IMPL_LIST(RMS), dm_cpu_gatednorm = DM_IMPL_LIST(RMS);

static void l2_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_norm_args *a = args;
    if (dir == DM_FWD && a->act) dm_silu_l2norm_fwd(a->y, a->rstd, a->x, a->R, a->C, a->eps);
    else if (dir == DM_FWD) dm_l2norm_fwd(a->y, a->rstd, a->x, a->R, a->C, a->eps);
    else if (a->xs) dm_silu_l2norm_bwd(a->dx, a->dy, a->x, a->rstd_in, a->xs, a->R, a->C);
    else dm_l2norm_bwd(a->dx, a->dy, a->x, a->rstd_in, a->R, a->C);
}

static const dm_impl L2[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, l2_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_l2norm = DM_IMPL_LIST(L2);
