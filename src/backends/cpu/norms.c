/* norms.c — the cpu backend's norms (ops/norms.c defines them): the fused one-pass
 * kernels of both RMSNorms (norm_impl=reference leaves them for the composed reference)
 * and the per-head L2 norm's kernel. */
#include "backends/cpu/kernels/kernels.h"
#include "ops/norms.h"
#include "ops/op.h"

static const char *fused_selected(const dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    return ops->norm_impl == DM_IMPL_REFERENCE ? "norm_impl=reference" : NULL;
}

/* the fused kernels of both RMSNorms (the gated one when z != NULL) */
static void norm_fused(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_norm_args *a = args;
    if (a->z && dir == DM_FWD)
        dm_gatednorm_fwd_yb(a->y, a->yb, a->rstd, a->x, a->z, a->w, a->R, a->C, a->eps,
                            a->act);
    else if (a->z)
        dm_gatednorm_bwd_yb(a->dx, a->dz, a->yb, a->dw, a->dy, a->x, a->z, a->w, a->rstd_in,
                            a->R, a->C, a->act);
    else if (dir == DM_FWD)
        dm_rmsnorm_fwd_yb(a->y, a->yb, a->rstd, a->x, a->w, a->R, a->C, a->eps);
    else
        dm_rmsnorm_bwd_yb(a->dx, a->yb, a->dw, a->dy, a->x, a->w, a->rstd_in, a->R, a->C);
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
