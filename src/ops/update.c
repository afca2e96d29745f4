/* update.c — the optimizer's elementwise ops and reductions as ops (optim_ops.h;
 * arguments: update.h): adamw, momentum, muon_update, normuon, grad_norm, grad_add,
 * grad_mean, each with the double-precision reference (ref/optim_ref.c,
 * ref/normuon_ref.c). */
#include "ops/update.h"

#include <string.h>

#include "ops/op.h"
#include "ops/optim_ops.h"
#include "ref/normuon_ref.h"
#include "ref/optim_ref.h"

/* ---- adamw ---- */

static void adamw_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_adamw_args *a = args;
    const float *h = a->hyper;
    dm_adamw_ref(a->po, a->m1o, a->m2o, a->p, a->g, a->m1, a->m2, a->n, h[0], h[1], a->b1,
                 a->b2, a->eps, h[2], h[3], a->gscale ? *a->gscale : 1.0f, a->cautious);
}
static int adamw_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_adamw_args *a = args;
    o[0] = (dm_out){"p", (void **)&a->po, a->n, DM_OUT_SET};
    o[1] = (dm_out){"m", (void **)&a->m1o, a->n, DM_OUT_SET};
    o[2] = (dm_out){"v", (void **)&a->m2o, a->n, DM_OUT_SET};
    return 3;
}
/* ---- the checks: the buffers of a non-empty call ---- */

static const char *adamw_check(const void *args, int dir) {
    (void)dir;
    const dm_adamw_args *a = args;
    return a->n && (!a->po || !a->m1o || !a->m2o || !a->p || !a->g || !a->m1 || !a->m2 ||
                    !a->hyper)
               ? "a NULL buffer" : NULL;
}
static const char *mom_check(const void *args, int dir) {
    (void)dir;
    const dm_mom_args *a = args;
    return a->n && (!a->momo || !a->mom || !a->g) ? "a NULL buffer" : NULL;
}
static const char *apply_check(const void *args, int dir) {
    (void)dir;
    const dm_apply_args *a = args;
    return a->n && (!a->wo || !a->w || !a->x || !a->ds) ? "a NULL buffer" : NULL;
}
static const char *gnorm_check(const void *args, int dir) {
    (void)dir;
    const dm_gnorm_args *a = args;
    return !a->norm || (a->n && !a->g) ? "a NULL buffer" : NULL;
}
static const char *sum_check(const void *args, int dir) {
    (void)dir;
    const dm_sum_args *a = args;
    if (a->A < 0) return "a negative count";
    return a->n && (!a->out || !a->acc) ? "a NULL buffer" : NULL;
}

/* ---- the reads: every input once ---- */

static double adamw_reads(const void *args, int dir) { /* p, g, m, v */
    (void)dir;
    return 16.0 * (double)((const dm_adamw_args *)args)->n;
}
static double mom_reads(const void *args, int dir) { /* mom, g */
    (void)dir;
    return 8.0 * (double)((const dm_mom_args *)args)->n;
}
static double apply_reads(const void *args, int dir) { /* w, x */
    (void)dir;
    return 8.0 * (double)((const dm_apply_args *)args)->n;
}
static double normuon_reads(const void *args, int dir) { /* x, v */
    (void)dir;
    const dm_normuon_args *a = args;
    return 4.0 * (double)a->n * a->rows * ((double)a->cols + 1);
}
static double gnorm_reads(const void *args, int dir) { /* g */
    (void)dir;
    return 4.0 * (double)((const dm_gnorm_args *)args)->n;
}
static double sum_reads(const void *args, int dir) { /* acc (but for the first) and g */
    (void)dir;
    const dm_sum_args *a = args;
    return 4.0 * (double)a->n * (a->g ? (a->first ? 1 : 2) : 1);
}

static const dm_impl ADAMW_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, adamw_ref,
                                  DM_MEM_HOST};
const dm_op_def dm_def_adamw = {"adamw", 1u << DM_FWD, &ADAMW_REF,
                                sizeof(dm_adamw_args),
                                adamw_outputs, NULL, adamw_check, adamw_reads, NULL};

void dm_op_adamw(dm_ops *o, dm_bf *p, dm_bf *m1, dm_bf *m2, const dm_bf *g, size_t n,
                 const dm_bf *hyper, float b1, float b2, float eps, const dm_bf *gscale,
                 int cautious) {
    float *P = DM_RAW(p), *M1 = DM_RAW(m1), *M2 = DM_RAW(m2);
    dm_adamw_args a = {P,  M1, M2,  P,   DM_RAW(g),      M1,      M2,
                       n,  DM_RAW(hyper), b1, b2, eps, DM_RAW(gscale), cautious};
    dm_op_run(o, DM_OP_ADAMW, DM_FWD, &a);
}

/* ---- momentum ---- */

static void mom_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_mom_args *a = args;
    dm_momentum_ref(a->momo, a->u, a->mom, a->g, a->n, a->beta, a->gscale ? *a->gscale : 1.0f);
}
static int mom_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_mom_args *a = args;
    o[0] = (dm_out){"momentum", (void **)&a->momo, a->n, DM_OUT_SET};
    if (!a->u) return 1;
    o[1] = (dm_out){"u", (void **)&a->u, a->n, DM_OUT_SET};
    return 2;
}
static const dm_impl MOMENTUM_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, mom_ref,
                                     DM_MEM_HOST};
const dm_op_def dm_def_momentum = {"momentum", 1u << DM_FWD, &MOMENTUM_REF,
                                   sizeof(dm_mom_args),
                                   mom_outputs, NULL, mom_check, mom_reads, NULL};

void dm_op_momentum(dm_ops *o, dm_bf *mom, dm_bf *u, const dm_bf *g, size_t n, float beta,
                    const dm_bf *gscale) {
    dm_mom_args a = {DM_RAW(mom), DM_RAW(u), DM_RAW(mom), DM_RAW(g), n, beta, DM_RAW(gscale)};
    dm_op_run(o, DM_OP_MOMENTUM, DM_FWD, &a);
}

/* ---- muon_update ---- */

static void apply_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_apply_args *a = args;
    dm_muon_apply_ref(a->wo, a->w, a->x, a->n, a->ds[0], a->ds[1], a->cautious);
}
static int apply_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_apply_args *a = args;
    o[0] = (dm_out){"w", (void **)&a->wo, a->n, DM_OUT_SET};
    return 1;
}
static const dm_impl APPLY_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, apply_ref,
                                  DM_MEM_HOST};
const dm_op_def dm_def_muon_update = {"muon_update", 1u << DM_FWD, &APPLY_REF,
                                      sizeof(dm_apply_args), apply_outputs, NULL, apply_check,
                                      apply_reads, NULL};

void dm_op_muon_update(dm_ops *o, dm_bf *w, const dm_bf *x, size_t n, const dm_bf *ds,
                       int cautious) {
    dm_apply_args a = {DM_RAW(w), DM_RAW(w), DM_RAW(x), n, DM_RAW(ds), cautious};
    dm_op_run(o, DM_OP_MUON_UPDATE, DM_FWD, &a);
}

/* ---- normuon ---- */

/* the reference: the inputs copied to the outputs when they differ (verify's second run),
 * then ref/normuon_ref.c in place */
static void normuon_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_normuon_args *a = args;
    size_t nx = (size_t)a->n * a->rows * a->cols, nv = (size_t)a->n * a->rows;
    if (a->xo != a->x) memcpy(a->xo, a->x, nx * sizeof(float));
    if (a->vo != a->v) memcpy(a->vo, a->v, nv * sizeof(float));
    dm_normuon_ref(a->xo, a->vo, a->n, a->rows, a->cols, a->beta2, a->eps);
}
static int normuon_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_normuon_args *a = args;
    o[0] = (dm_out){"x", (void **)&a->xo, (size_t)a->n * a->rows * a->cols, DM_OUT_SET};
    o[1] = (dm_out){"v", (void **)&a->vo, (size_t)a->n * a->rows, DM_OUT_SET};
    return 2;
}
static const char *normuon_check(const void *args, int dir) {
    (void)dir;
    const dm_normuon_args *a = args;
    if (a->n < 0 || a->rows < 0 || a->cols < 0) return "a negative size";
    if (!a->n || !a->rows || !a->cols) return NULL;
    return !a->xo || !a->vo || !a->x || !a->v || !a->work ? "a NULL buffer" : NULL;
}
static const dm_impl NORMUON_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, normuon_ref,
                                    DM_MEM_HOST};
const dm_op_def dm_def_normuon = {"normuon", 1u << DM_FWD, &NORMUON_REF,
                                  sizeof(dm_normuon_args), normuon_outputs, NULL,
                                  normuon_check, normuon_reads, NULL};

void dm_op_normuon(dm_ops *o, dm_bf *x, dm_bf *v, int n, int rows, int cols, float beta2,
                   float eps, dm_bf *work) {
    dm_normuon_args a = {DM_RAW(x), DM_RAW(v), DM_RAW(x), DM_RAW(v), DM_RAW(work), n, rows, cols,
                         beta2, eps};
    dm_op_run(o, DM_OP_NORMUON, DM_FWD, &a);
}

/* ---- grad_norm ---- */

static void norm_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_gnorm_args *a = args;
    *a->norm = dm_grad_norm2_ref(a->g, a->n);
    if (a->gscale) *a->gscale = dm_clip_scale(*a->norm, a->clip);
}
static int norm_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_gnorm_args *a = args;
    o[0] = (dm_out){"norm", (void **)&a->norm, 1, DM_OUT_F64};
    if (!a->gscale) return 1;
    o[1] = (dm_out){"gscale", (void **)&a->gscale, 1, DM_OUT_SET};
    return 2;
}
static const dm_impl NORM_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, norm_ref,
                                 DM_MEM_HOST};
const dm_op_def dm_def_grad_norm = {"grad_norm", 1u << DM_FWD, &NORM_REF,
                                    sizeof(dm_gnorm_args),
                                    norm_outputs, NULL, gnorm_check, gnorm_reads, NULL};

void dm_op_grad_norm(dm_ops *o, double *norm, dm_bf *gscale, const dm_bf *g, size_t n,
                     float clip) {
    dm_gnorm_args a = {norm, DM_RAW(gscale), DM_RAW(g), n, clip};
    dm_op_run(o, DM_OP_GRAD_NORM, DM_FWD, &a);
}

/* ---- grad_add, grad_mean ---- */

static void add_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_sum_args *a = args;
    dm_grad_add_ref(a->out, a->acc, a->g, a->n, a->first);
}
static void mean_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_sum_args *a = args;
    dm_grad_mean_ref(a->out, a->acc, a->n, a->A);
}
static int sum_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_sum_args *a = args;
    o[0] = (dm_out){"sum", (void **)&a->out, a->n, DM_OUT_SET};
    return 1;
}
static const dm_impl GRAD_ADD_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, add_ref,
                                     DM_MEM_HOST};
const dm_op_def dm_def_grad_add = {"grad_add", 1u << DM_FWD, &GRAD_ADD_REF,
                                   sizeof(dm_sum_args),
                                   sum_outputs, NULL, sum_check, sum_reads, NULL};
static const dm_impl GRAD_MEAN_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, mean_ref,
                                      DM_MEM_HOST};
const dm_op_def dm_def_grad_mean = {"grad_mean", 1u << DM_FWD, &GRAD_MEAN_REF,
                                    sizeof(dm_sum_args),
                                    sum_outputs, NULL, sum_check, sum_reads, NULL};

void dm_op_grad_add(dm_ops *o, dm_bf *acc, const dm_bf *g, size_t n, int first) {
    dm_sum_args a = {.out = DM_RAW(acc), .acc = DM_RAW(acc), .g = DM_RAW(g), .n = n,
                     .first = first};
    dm_op_run(o, DM_OP_GRAD_ADD, DM_FWD, &a);
}

void dm_op_grad_mean(dm_ops *o, dm_bf *out, const dm_bf *acc, size_t n, int A) {
    dm_sum_args a = {.out = DM_RAW(out), .acc = DM_RAW(acc), .n = n, .A = A};
    dm_op_run(o, DM_OP_GRAD_MEAN, DM_FWD, &a);
}
