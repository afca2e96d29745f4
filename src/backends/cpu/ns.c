/* ns.c — the cpu backend's matrix ops of Muon (ops/ns.c defines them): Newton–Schulz in
 * fp32 (ns: OpenBLAS, before the op's double-precision reference) and with bf16 operands
 * (ns_bf16: oneDNN's bf16 matmul on the op layer's oneDNN context), and the sphere and
 * Stiefel retractions (retract: the CPU kernel, and the same iteration on the reference's
 * double-precision products). The ns ops also record their products for the atlas's
 * roofline. And what the optimizer asks of these ops on this backend: scratch, FLOPs,
 * threading, the retraction constants. */
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/ns.h"
#include "backends/cpu/kernels/onednn.h"
#include "backends/cpu/kernels/retract.h"
#include "ref/optim_ref.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/ctx.h"
#include "ops/op.h"
#include "ops/ns.h"
#include "ops/optim_ops.h"

/* ---- ns (one step of the fp32 iteration), ns_bf16 (the whole bf16 iteration) ---- */

/* the products of `reps` steps of each slice, as the kernel runs them, for the roofline */
static void ns_noted(dm_ops *ops, const dm_ns_args *a, int bf16, int reps, double sec) {
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
    dm_ns_args *a = args;
    double t0 = ops->atlas ? dm_now() : 0;
    size_t len = (size_t)a->n * a->rows * a->cols;
    if (a->t < 0) dm_ns_run(a->out, a->G, a->n, a->rows, a->cols, a->s, a->work, NULL, a->stack);
    else dm_ns_step(a->out, a->G, a->n, a->rows, a->cols, a->s, a->t, a->work, a->work + len,
                    a->stack);
    if (ops->atlas)
        ns_noted(ops, a, 0, a->t < 0 ? dm_ns_sched_steps(a->s) : 1, dm_now() - t0);
}
static const dm_impl NS[] = {{"openblas", 0, DM_PREC_FP32, NULL, NULL, ns_openblas, DM_MEM_HOST}};
const dm_impl_list dm_cpu_ns = DM_IMPL_LIST(NS);

/* the op layer's oneDNN context, made on first use (matmul.c makes it the same way) */
static dm_onednn *onednn(dm_ops *ops) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (!c->onednn && !c->onednn_why) c->onednn = dm_onednn_create(&c->onednn_why);
    return c->onednn;
}

const char *dm_cpu_ns_bf16_context(dm_ops *ops) {
    return onednn(ops) ? NULL : (dm_cpu_ctx_of(ops)->onednn_why ? dm_cpu_ctx_of(ops)->onednn_why
                                                                   : "no reason given");
}

static void ns_bf16_run(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_ns_args *a = args;
    double t0 = ops->atlas ? dm_now() : 0;
    dm_ns_run(a->out, a->G, a->n, a->rows, a->cols, a->s, a->work, dm_cpu_ctx_of(ops)->onednn, a->stack);
    if (ops->atlas) ns_noted(ops, a, 1, dm_ns_sched_steps(a->s), dm_now() - t0);
}
/* the last implementation takes every call: the optimizer runs ns_bf16 only after
 * the precision record chose it and dm_ops_ns_bf16_context made the context */
static const dm_impl NS_BF16[] = {
    {"onednn-bf16", 0, DM_PREC_BF16, NULL, NULL, ns_bf16_run, DM_MEM_HOST}};
const dm_impl_list dm_cpu_ns_bf16 = DM_IMPL_LIST(NS_BF16);

size_t dm_cpu_ns_work(int n, int rows, int cols, int bf16) {
    return bf16 ? dm_ns_work_bf16(n, rows, cols) : dm_ns_work(n, rows, cols);
}
int dm_cpu_ns_threaded(int rows, int cols) { return dm_ns_slice_threaded(rows, cols); }

/* ---- retract ---- */

static void retract_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_retract_args *a = args;
    if (a->stiefel)
        dm_retract_stiefel_run(a->out, a->W, a->c, a->n, a->rows, a->cols, a->work, NULL,
                               a->stack, NULL);
    else dm_retract_sphere_run(a->out, a->W, a->c, a->n, a->rows, a->cols);
}
static void retract_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_retract_args *a = args;
    if (a->stiefel)
        dm_retract_stiefel_run(a->out, a->W, a->c, a->n, a->rows, a->cols, a->work, NULL,
                               a->stack, &dm_ns_ref_blocks);
    else dm_retract_sphere_ref(a->out, a->W, a->c, a->n, a->rows, a->cols);
}
static const dm_impl RETRACT[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, retract_cpu, DM_MEM_HOST},
                                  {"reference", 1, DM_PREC_FP32, NULL, NULL, retract_ref, DM_MEM_HOST}};
const dm_impl_list dm_cpu_retract = DM_IMPL_LIST(RETRACT);

size_t dm_cpu_retract_work(int n, int rows, int cols) {
    return dm_retract_stiefel_work(n, rows, cols);
}
