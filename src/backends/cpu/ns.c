/* ns.c — Muon's matrix ops (optim_ops.h): Newton–Schulz in fp32 (ns: OpenBLAS, and the
 * double-precision reference) and with bf16 operands (ns_bf16: oneDNN's bf16 matmul on the
 * op layer's oneDNN context), and the sphere and Stiefel retractions (retract: the CPU
 * kernel, and the same iteration on the reference's double-precision products). The ns ops
 * also record their products for the atlas's roofline. */
#include <string.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/ns.h"
#include "backends/cpu/kernels/onednn.h"
#include "backends/cpu/kernels/retract.h"
#include "ref/optim_ref.h"
#include "backends/cpu/ctx.h"
#include "ops/op.h"
#include "ops/optim_ops.h"

/* ---- ns (one step of the fp32 iteration), ns_bf16 (the whole bf16 iteration) ---- */

typedef struct {
    float *out;
    const float *G;
    int n, rows, cols, s, stack;
    int t;           /* ns: the step, or -1: the whole iteration */
    float *work;     /* dm_ns_work floats (ns_bf16: dm_ns_work_bf16); one step's scratch:
                        X0 in the first n rows*cols floats, then A and B per slice */
} ns_args;

static int ns_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    ns_args *a = args;
    o[0] = (dm_out){"X", (void **)&a->out, (size_t)a->n * a->rows * a->cols, DM_OUT_SET};
    return 1;
}

static double ns_op_flops(const void *args, int dir) {
    (void)dir;
    const ns_args *a = args;
    double f = dm_ns_flops(a->n, a->rows, a->cols, a->s);
    return a->t < 0 ? f : f / dm_ns_sched_steps(a->s);
}

/* the products of `reps` steps of each slice, as the kernel runs them, for the roofline */
static void ns_noted(dm_ops *ops, const ns_args *a, int bf16, int reps, double sec) {
    if (a->n <= 0 || a->rows <= 0 || a->cols <= 0) return;
    int m = a->rows < a->cols ? a->rows : a->cols, wide = a->rows <= a->cols;
    dm_atlas_gemm g = {.label = "ns", .kind = bf16 ? DM_GEMM_BF16_ONEDNN : DM_GEMM_F32_OPENBLAS,
                       .n = 3, .reps = reps, .slices = a->n,
                       .tiled = dm_ns_tiled(a->n, a->rows, a->cols, a->stack),
                       .prod = {{!wide, wide, m, m, wide ? a->cols : a->rows, 0},
                                {0, 0, m, m, m, 1},
                                {0, !wide, a->rows, a->cols, m, 0}}};
    dm_atlas_gemm_add(ops->atlas, &g, sec);
}

static void ns_openblas(dm_ops *ops, void *args, int dir) {
    (void)dir;
    ns_args *a = args;
    double t0 = ops->atlas ? dm_now() : 0;
    size_t len = (size_t)a->n * a->rows * a->cols;
    if (a->t < 0) dm_ns_run(a->out, a->G, a->n, a->rows, a->cols, a->s, a->work, NULL, a->stack);
    else dm_ns_step(a->out, a->G, a->n, a->rows, a->cols, a->s, a->t, a->work, a->work + len,
                    a->stack);
    if (ops->atlas)
        ns_noted(ops, a, 0, a->t < 0 ? dm_ns_sched_steps(a->s) : 1, dm_now() - t0);
}
/* the whole iteration: the steps in turn, X ping-ponging between out and work (X0's place) */
static void ns_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    ns_args *a = args;
    size_t len = (size_t)a->n * a->rows * a->cols;
    float *x0 = a->work, *ab = a->work + len;
    if (a->t >= 0) {
        dm_ns_ref_step(a->out, a->G, a->n, a->rows, a->cols, a->s, a->t, x0, ab);
        return;
    }
    float *buf[2] = {a->out, x0};
    int steps = dm_ns_sched_steps(a->s);
    for (int t = 0; t < steps; t++)
        dm_ns_ref_step(buf[t & 1], t ? buf[(t - 1) & 1] : a->G, a->n, a->rows, a->cols, a->s, t,
                       x0, ab);
    if (!(steps & 1) && len) memcpy(a->out, x0, len * sizeof(float));
}
static const dm_impl NS[] = {{"openblas", 0, DM_PREC_FP32, NULL, NULL, ns_openblas, DM_MEM_HOST},
                             {"reference", 1, DM_PREC_FP32, NULL, NULL, ns_ref, DM_MEM_HOST}};
const dm_op_def dm_def_ns = {"ns", 1u << DM_FWD, NS, 2, sizeof(ns_args), ns_outputs,
                             ns_op_flops};

/* the op layer's oneDNN context, made on first use (matmul.c makes it the same way) */
static dm_onednn *onednn(dm_ops *ops) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (!c->onednn && !c->onednn_why) c->onednn = dm_onednn_create(&c->onednn_why);
    return c->onednn;
}

const char *dm_ops_ns_bf16_context(dm_ops *ops) {
    return onednn(ops) ? NULL : (dm_cpu_ctx_of(ops)->onednn_why ? dm_cpu_ctx_of(ops)->onednn_why
                                                                   : "no reason given");
}

static const char *ns_bf16_supports(dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    return onednn(ops) ? NULL : dm_cpu_ctx_of(ops)->onednn_why;
}
static void ns_bf16_run(dm_ops *ops, void *args, int dir) {
    (void)dir;
    ns_args *a = args;
    double t0 = ops->atlas ? dm_now() : 0;
    dm_ns_run(a->out, a->G, a->n, a->rows, a->cols, a->s, a->work, dm_cpu_ctx_of(ops)->onednn, a->stack);
    if (ops->atlas) ns_noted(ops, a, 1, dm_ns_sched_steps(a->s), dm_now() - t0);
}
/* the last implementation takes every call: the optimizer runs ns_bf16 only after
 * the precision record chose it and dm_ops_ns_bf16_context made the context */
static const dm_impl NS_BF16[] = {{"onednn-bf16", 0, DM_PREC_FP32, NULL, NULL, ns_bf16_run, DM_MEM_HOST}};
const dm_op_def dm_def_ns_bf16 = {"ns_bf16", 1u << DM_FWD, NS_BF16, 1, sizeof(ns_args),
                                  ns_outputs, ns_op_flops};

void dm_op_ns(dm_ops *o, float *x, int n, int rows, int cols, int s, float *work, int bf16,
              int stack) {
    ns_args a = {.out = x, .G = x, .n = n, .rows = rows, .cols = cols, .s = s, .stack = stack,
                 .t = -1, .work = work};
    if (bf16 && !ns_bf16_supports(o, &a, DM_FWD)) {
        dm_op_run(o, DM_OP_NS_BF16, DM_FWD, &a);
        return;
    }
    if (!o->verify) { /* the whole iteration in one call */
        dm_op_run(o, DM_OP_NS, DM_FWD, &a);
        return;
    }
    /* verify mode: each step a call of its own, so each is checked from the same X_t (the
     * whole iteration amplifies its products' rounding differences toward the bound), the
     * same bits as the whole. X_{t+1} goes to x at even t, to T (work's first n rows*cols
     * floats, where step 0 forms X0 first) at odd t: the last in x when the step count is
     * odd. */
    size_t len = (size_t)(n > 0 ? n : 0) * rows * cols;
    float *buf[2] = {x, work};
    int steps = dm_ns_sched_steps(s);
    for (a.t = 0; a.t < steps; a.t++) {
        a.G = a.t == 0 ? x : buf[(a.t - 1) & 1];
        a.out = buf[a.t & 1];
        dm_op_run(o, DM_OP_NS, DM_FWD, &a);
    }
    if (!(steps & 1) && len) memcpy(x, work, len * sizeof(float));
}

size_t dm_op_ns_work(int n, int rows, int cols, int bf16) {
    return bf16 ? dm_ns_work_bf16(n, rows, cols) : dm_ns_work(n, rows, cols);
}
double dm_op_ns_flops(int n, int rows, int cols, int s) { return dm_ns_flops(n, rows, cols, s); }
int dm_op_ns_steps(int s) { return dm_ns_sched_steps(s); }
int dm_op_ns_threaded(int rows, int cols) { return dm_ns_slice_threaded(rows, cols); }

/* ---- retract ---- */

typedef struct {
    float *out;
    const float *W, *c; /* c: the radii (sphere) or the scales (stiefel) */
    int n, rows, cols, stiefel, stack;
    float *work;
} retract_args;

static void retract_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    retract_args *a = args;
    if (a->stiefel)
        dm_retract_stiefel_run(a->out, a->W, a->c, a->n, a->rows, a->cols, a->work, NULL,
                               a->stack, NULL);
    else dm_retract_sphere_run(a->out, a->W, a->c, a->n, a->rows, a->cols);
}
static void retract_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    retract_args *a = args;
    if (a->stiefel)
        dm_retract_stiefel_run(a->out, a->W, a->c, a->n, a->rows, a->cols, a->work, NULL,
                               a->stack, &dm_ns_ref_blocks);
    else dm_retract_sphere_ref(a->out, a->W, a->c, a->n, a->rows, a->cols);
}
static int retract_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    retract_args *a = args;
    o[0] = (dm_out){"W", (void **)&a->out, (size_t)a->n * a->rows * a->cols, DM_OUT_SET};
    return 1;
}
static const dm_impl RETRACT[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, retract_cpu, DM_MEM_HOST},
                                  {"reference", 1, DM_PREC_FP32, NULL, NULL, retract_ref, DM_MEM_HOST}};
const dm_op_def dm_def_retract = {"retract", 1u << DM_FWD, RETRACT, 2, sizeof(retract_args),
                                  retract_outputs, NULL};

void dm_op_retract_sphere(dm_ops *o, float *W, const float *R, int n, int rows, int cols) {
    retract_args a = {W, W, R, n, rows, cols, 0, 0, NULL};
    dm_op_run(o, DM_OP_RETRACT, DM_FWD, &a);
}

void dm_op_retract_stiefel(dm_ops *o, float *W, const float *S, int n, int rows, int cols,
                           float *work, int stack) {
    retract_args a = {W, W, S, n, rows, cols, 1, stack, work};
    dm_op_run(o, DM_OP_RETRACT, DM_FWD, &a);
}

size_t dm_op_retract_work(int n, int rows, int cols) {
    return dm_retract_stiefel_work(n, rows, cols);
}

void dm_op_retract_init(float *R, float *s, const float *W0, int n, int rows, int cols) {
    dm_retract_init(R, s, W0, n, rows, cols);
}
