/* norms.c — RMSNorm, the per-head gated RMSNorm and the per-head L2 norm as ops
 * (arguments: norms.h). The two RMSNorms' reference is composed (norm_ref.c: the chain of
 * elementary steps an autodiff framework would record); norm_impl=reference picks it over
 * a backend's fused kernels. */
#include "ops/norms.h"

#include "ops/op.h"
#include "ref/ref.h"

/* the RMSNorms' composed references (the gated one when z != NULL) */
static void norm_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_norm_args *a = args;
    if (a->z && dir == DM_FWD)
        dm_gatednorm_ref_fwd(a->y, a->rstd, a->x, a->z, a->w, a->R, a->C, a->eps, a->act,
                             a->scratch);
    else if (a->z)
        dm_gatednorm_ref_bwd(a->dx, a->dz, a->dw, a->dy, a->x, a->z, a->w, a->rstd_in, a->R,
                             a->C, a->act, a->scratch);
    else if (dir == DM_FWD)
        dm_rmsnorm_ref_fwd(a->y, a->rstd, a->x, a->w, a->R, a->C, a->eps, a->scratch);
    else
        dm_rmsnorm_ref_bwd(a->dx, a->dw, a->dy, a->x, a->w, a->rstd_in, a->R, a->C, a->scratch);
}

/* every norm's forward: y and the per-row inverse norms */
static int fwd_outputs(dm_norm_args *a, dm_out *o, const char *inv) {
    o[0] = (dm_out){"y", (void **)&a->y, (size_t)a->R * a->C, DM_OUT_SET};
    o[1] = (dm_out){inv, (void **)&a->rstd, (size_t)a->R, DM_OUT_SET};
    return 2;
}

/* both RMSNorms: rmsnorm's dx accumulates (it adds onto the residual stream's gradient);
 * the gated one (z != NULL) overwrites dx and dz */
static int rms_outputs(void *args, int dir, dm_out *o) {
    dm_norm_args *a = args;
    size_t n = (size_t)a->R * a->C;
    if (dir == DM_FWD) return fwd_outputs(a, o, "rstd");
    int k = 0;
    o[k++] = (dm_out){"dx", (void **)&a->dx, n, a->z ? DM_OUT_SET : DM_OUT_ACC};
    if (a->z) o[k++] = (dm_out){"dz", (void **)&a->dz, n, DM_OUT_SET};
    o[k++] = (dm_out){"dw", (void **)&a->dw, (size_t)a->C, DM_OUT_ACC};
    return k;
}

/* every norm's check: sizes, and the buffers a non-empty call needs */
static const char *norm_check(const void *args, int dir) {
    const dm_norm_args *a = args;
    if (a->R < 0 || a->C < 0) return "a negative size";
    if (!a->R || !a->C) return NULL;
    if (dir == DM_FWD) return !a->y || !a->rstd || !a->x ? "a NULL buffer" : NULL;
    return !a->dx || !a->dy || !a->x || !a->rstd_in ? "a NULL buffer" : NULL;
}

/* every norm's inputs: x (and z, the gate; xs, the SiLU's input), the weights; the
 * backward's dy and the inverse norms too */
static double norm_reads(const void *args, int dir) {
    const dm_norm_args *a = args;
    double n = (double)a->R * a->C, w = a->w ? a->C : 0;
    if (dir == DM_FWD) return 4.0 * (n * (a->z ? 2 : 1) + w);
    return 4.0 * (n * (2 + (a->z ? 1 : 0) + (a->xs ? 1 : 0)) + w + a->R);
}

static const dm_impl RMS_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, norm_ref, DM_MEM_HOST};
const dm_op_def dm_def_rmsnorm = {"rmsnorm", 1u << DM_FWD | 1u << DM_BWD, &RMS_REF,
                                  sizeof(dm_norm_args), rms_outputs, NULL, norm_check,
                                  norm_reads, NULL};
const dm_op_def dm_def_gatednorm = {"gatednorm", 1u << DM_FWD | 1u << DM_BWD, &RMS_REF,
                                    sizeof(dm_norm_args), rms_outputs, NULL, norm_check,
                                    norm_reads, NULL};

static void l2_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_norm_args *a = args;
    size_t n = (size_t)a->R * a->C;
    if (dir == DM_FWD && a->act) { /* composed: SiLU into y, then the norm in place */
        dm_silu_ref_fwd(a->y, a->x, n);
        dm_l2norm_ref_fwd(a->y, a->rstd, a->y, a->R, a->C, a->eps);
    } else if (dir == DM_FWD) {
        dm_l2norm_ref_fwd(a->y, a->rstd, a->x, a->R, a->C, a->eps);
    } else {
        dm_l2norm_ref_bwd(a->dx, a->dy, a->x, a->rstd_in, a->R, a->C);
        if (a->xs) dm_silu_ref_bwd(a->dx, a->dx, a->xs, n);
    }
}

static int l2_outputs(void *args, int dir, dm_out *o) {
    dm_norm_args *a = args;
    if (dir == DM_FWD) return fwd_outputs(a, o, "rn");
    o[0] = (dm_out){"dx", (void **)&a->dx, (size_t)a->R * a->C, DM_OUT_SET};
    return 1;
}

static const dm_impl L2_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, l2_ref, DM_MEM_HOST};
const dm_op_def dm_def_l2norm = {"l2norm", 1u << DM_FWD | 1u << DM_BWD, &L2_REF,
                                 sizeof(dm_norm_args),
                                 l2_outputs, NULL, norm_check, norm_reads, NULL};

void dm_op_rmsnorm_fwd(dm_ops *o, dm_bf *y, dm_bf *rstd, const dm_bf *x, const dm_bf *w, int N,
                       int C, float eps, dm_bf *scratch) {
    dm_norm_args a = {.y = DM_RAW(y), .rstd = DM_RAW(rstd), .x = DM_RAW(x), .w = DM_RAW(w),
                      .eps = eps, .R = N, .C = C, .scratch = DM_RAW(scratch)};
    dm_op_run(o, DM_OP_RMSNORM, DM_FWD, &a);
}

void dm_op_rmsnorm_bwd(dm_ops *o, dm_bf *dx, dm_bf *dw, const dm_bf *dy, const dm_bf *x,
                       const dm_bf *w, const dm_bf *rstd, int N, int C, dm_bf *scratch) {
    dm_norm_args a = {.x = DM_RAW(x), .w = DM_RAW(w), .dx = DM_RAW(dx), .dw = DM_RAW(dw),
                      .dy = DM_RAW(dy), .rstd_in = DM_RAW(rstd), .R = N, .C = C,
                      .scratch = DM_RAW(scratch)};
    dm_op_run(o, DM_OP_RMSNORM, DM_BWD, &a);
}

void dm_op_gatednorm_fwd(dm_ops *o, dm_bf *y, dm_bf *rstd, const dm_bf *x, const dm_bf *z,
                         const dm_bf *w, int R, int D, float eps, int act, dm_bf *scratch) {
    dm_norm_args a = {.y = DM_RAW(y), .rstd = DM_RAW(rstd), .x = DM_RAW(x), .z = DM_RAW(z),
                      .w = DM_RAW(w), .eps = eps, .act = act, .R = R, .C = D,
                      .scratch = DM_RAW(scratch)};
    dm_op_run(o, DM_OP_GATEDNORM, DM_FWD, &a);
}

void dm_op_gatednorm_bwd(dm_ops *o, dm_bf *dx, dm_bf *dz, dm_bf *dw, const dm_bf *dy,
                         const dm_bf *x, const dm_bf *z, const dm_bf *w, const dm_bf *rstd,
                         int R, int D, int act, dm_bf *scratch) {
    dm_norm_args a = {.x = DM_RAW(x), .z = DM_RAW(z), .w = DM_RAW(w), .act = act, .dx = DM_RAW(dx),
                      .dz = DM_RAW(dz), .dw = DM_RAW(dw), .dy = DM_RAW(dy),
                      .rstd_in = DM_RAW(rstd), .R = R, .C = D, .scratch = DM_RAW(scratch)};
    dm_op_run(o, DM_OP_GATEDNORM, DM_BWD, &a);
}

/* the backward reads the forward's output y (passed as x) and its inverse norms rn */
void dm_op_l2norm_fwd(dm_ops *o, dm_bf *y, dm_bf *rn, const dm_bf *x, int R, int D, float eps,
                      int silu) {
    dm_norm_args a = {.y = DM_RAW(y), .rstd = DM_RAW(rn), .x = DM_RAW(x), .eps = eps, .act = silu,
                      .R = R, .C = D};
    dm_op_run(o, DM_OP_L2NORM, DM_FWD, &a);
}

void dm_op_l2norm_bwd(dm_ops *o, dm_bf *dx, const dm_bf *dy, const dm_bf *y, const dm_bf *rn,
                      const dm_bf *xs, int R, int D) {
    dm_norm_args a = {.x = DM_RAW(y), .dx = DM_RAW(dx), .dy = DM_RAW(dy), .rstd_in = DM_RAW(rn),
                      .xs = DM_RAW(xs), .R = R, .C = D};
    dm_op_run(o, DM_OP_L2NORM, DM_BWD, &a);
}
