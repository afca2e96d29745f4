/* update.c — the optimizer's elementwise ops and reductions as ops (optim_ops.h): adamw,
 * momentum, muon_update, grad_norm, grad_add, grad_mean. Each has the CPU kernel
 * (backends/cpu/kernels/optim.c) and the double-precision reference (ref/optim_ref.c).
 * The updates run in place: the args keep the output pointers apart from the inputs
 * (equal in the call), so verify mode can give the second run outputs of its own. */
#include "backends/cpu/kernels/optim.h"
#include "ref/optim_ref.h"
#include "ops/op.h"
#include "ops/optim_ops.h"

/* ---- adamw ---- */

typedef struct {
    float *po, *m1o, *m2o;
    const float *p, *g, *m1, *m2;
    size_t n;
    float lr, wd, b1, b2, eps, gscale;
    long t;
} adamw_args;

static void adamw_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    adamw_args *a = args;
    dm_adamw(a->po, a->m1o, a->m2o, a->p, a->g, a->m1, a->m2, a->n, a->lr, a->wd, a->b1, a->b2,
             a->eps, a->t, a->gscale);
}
static void adamw_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    adamw_args *a = args;
    dm_adamw_ref(a->po, a->m1o, a->m2o, a->p, a->g, a->m1, a->m2, a->n, a->lr, a->wd, a->b1,
                 a->b2, a->eps, a->t, a->gscale);
}
static int adamw_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    adamw_args *a = args;
    o[0] = (dm_out){"p", (void **)&a->po, a->n, DM_OUT_SET};
    o[1] = (dm_out){"m", (void **)&a->m1o, a->n, DM_OUT_SET};
    o[2] = (dm_out){"v", (void **)&a->m2o, a->n, DM_OUT_SET};
    return 3;
}
static const dm_impl ADAMW[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, adamw_cpu, DM_MEM_HOST},
                                {"reference", 1, DM_PREC_FP32, NULL, NULL, adamw_ref, DM_MEM_HOST}};
const dm_op_def dm_def_adamw = {"adamw", 1u << DM_FWD, ADAMW, 2, sizeof(adamw_args),
                                adamw_outputs, NULL};

void dm_op_adamw(dm_ops *o, float *p, float *m1, float *m2, const float *g, size_t n, float lr,
                 float wd, float b1, float b2, float eps, long t, float gscale) {
    adamw_args a = {p, m1, m2, p, g, m1, m2, n, lr, wd, b1, b2, eps, gscale, t};
    dm_op_run(o, DM_OP_ADAMW, DM_FWD, &a);
}

/* ---- momentum ---- */

typedef struct {
    float *momo, *u;
    const float *mom, *g;
    size_t n;
    float beta, gscale;
} mom_args;

static void mom_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    mom_args *a = args;
    dm_momentum(a->momo, a->u, a->mom, a->g, a->n, a->beta, a->gscale);
}
static void mom_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    mom_args *a = args;
    dm_momentum_ref(a->momo, a->u, a->mom, a->g, a->n, a->beta, a->gscale);
}
static int mom_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    mom_args *a = args;
    o[0] = (dm_out){"momentum", (void **)&a->momo, a->n, DM_OUT_SET};
    if (!a->u) return 1;
    o[1] = (dm_out){"u", (void **)&a->u, a->n, DM_OUT_SET};
    return 2;
}
static const dm_impl MOMENTUM[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, mom_cpu, DM_MEM_HOST},
                                   {"reference", 1, DM_PREC_FP32, NULL, NULL, mom_ref, DM_MEM_HOST}};
const dm_op_def dm_def_momentum = {"momentum", 1u << DM_FWD, MOMENTUM, 2, sizeof(mom_args),
                                   mom_outputs, NULL};

void dm_op_momentum(dm_ops *o, float *mom, float *u, const float *g, size_t n, float beta,
                    float gscale) {
    mom_args a = {mom, u, mom, g, n, beta, gscale};
    dm_op_run(o, DM_OP_MOMENTUM, DM_FWD, &a);
}

/* ---- muon_update ---- */

typedef struct {
    float *wo;
    const float *w, *x;
    size_t n;
    float decay, step;
} apply_args;

static void apply_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    apply_args *a = args;
    dm_muon_apply(a->wo, a->w, a->x, a->n, a->decay, a->step);
}
static void apply_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    apply_args *a = args;
    dm_muon_apply_ref(a->wo, a->w, a->x, a->n, a->decay, a->step);
}
static int apply_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    apply_args *a = args;
    o[0] = (dm_out){"w", (void **)&a->wo, a->n, DM_OUT_SET};
    return 1;
}
static const dm_impl APPLY[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, apply_cpu, DM_MEM_HOST},
                                {"reference", 1, DM_PREC_FP32, NULL, NULL, apply_ref, DM_MEM_HOST}};
const dm_op_def dm_def_muon_update = {"muon_update", 1u << DM_FWD, APPLY, 2,
                                      sizeof(apply_args), apply_outputs, NULL};

void dm_op_muon_update(dm_ops *o, float *w, const float *x, size_t n, float decay, float step) {
    apply_args a = {w, w, x, n, decay, step};
    dm_op_run(o, DM_OP_MUON_UPDATE, DM_FWD, &a);
}

/* ---- grad_norm ---- */

typedef struct {
    double *norm;
    const float *g;
    size_t n;
} norm_args;

static void norm_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    norm_args *a = args;
    *a->norm = dm_grad_norm2(a->g, a->n);
}
static void norm_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    norm_args *a = args;
    *a->norm = dm_grad_norm2_ref(a->g, a->n);
}
static int norm_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    norm_args *a = args;
    o[0] = (dm_out){"norm", (void **)&a->norm, 1, DM_OUT_F64};
    return 1;
}
static const dm_impl NORM[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, norm_cpu, DM_MEM_HOST},
                               {"reference", 1, DM_PREC_FP32, NULL, NULL, norm_ref, DM_MEM_HOST}};
const dm_op_def dm_def_grad_norm = {"grad_norm", 1u << DM_FWD, NORM, 2, sizeof(norm_args),
                                    norm_outputs, NULL};

double dm_op_grad_norm(dm_ops *o, const float *g, size_t n) {
    double norm = 0;
    norm_args a = {&norm, g, n};
    dm_op_run(o, DM_OP_GRAD_NORM, DM_FWD, &a);
    return norm;
}

/* ---- grad_add, grad_mean ---- */

typedef struct {
    float *out;
    const float *acc, *g;
    size_t n;
    int first, A;
} sum_args;

static void add_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    sum_args *a = args;
    dm_grad_add(a->out, a->acc, a->g, a->n, a->first);
}
static void add_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    sum_args *a = args;
    dm_grad_add_ref(a->out, a->acc, a->g, a->n, a->first);
}
static void mean_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    sum_args *a = args;
    dm_grad_mean(a->out, a->acc, a->n, a->A);
}
static void mean_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    sum_args *a = args;
    dm_grad_mean_ref(a->out, a->acc, a->n, a->A);
}
static int sum_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    sum_args *a = args;
    o[0] = (dm_out){"sum", (void **)&a->out, a->n, DM_OUT_SET};
    return 1;
}
static const dm_impl GRAD_ADD[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, add_cpu, DM_MEM_HOST},
                                   {"reference", 1, DM_PREC_FP32, NULL, NULL, add_ref, DM_MEM_HOST}};
const dm_op_def dm_def_grad_add = {"grad_add", 1u << DM_FWD, GRAD_ADD, 2, sizeof(sum_args),
                                   sum_outputs, NULL};
static const dm_impl GRAD_MEAN[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, mean_cpu, DM_MEM_HOST},
                                    {"reference", 1, DM_PREC_FP32, NULL, NULL, mean_ref, DM_MEM_HOST}};
const dm_op_def dm_def_grad_mean = {"grad_mean", 1u << DM_FWD, GRAD_MEAN, 2, sizeof(sum_args),
                                    sum_outputs, NULL};

void dm_op_grad_add(dm_ops *o, float *acc, const float *g, size_t n, int first) {
    sum_args a = {.out = acc, .acc = acc, .g = g, .n = n, .first = first};
    dm_op_run(o, DM_OP_GRAD_ADD, DM_FWD, &a);
}

void dm_op_grad_mean(dm_ops *o, float *out, const float *acc, size_t n, int A) {
    sum_args a = {.out = out, .acc = acc, .n = n, .A = A};
    dm_op_run(o, DM_OP_GRAD_MEAN, DM_FWD, &a);
}
