/* ns.c — Muon's matrix ops (optim_ops.h; arguments: ns.h): Newton–Schulz in fp32 (ns,
 * with the double-precision reference of ref/optim_ref.c) and with bf16 operands (ns_bf16:
 * no reference within the fp32 bound), and the sphere and Stiefel retractions (retract;
 * its reference, the same iteration on the reference's products, is registered by the
 * backend that runs the iteration). */
#include "ops/ns.h"

#include <string.h>

#include "ops/backend.h"
#include "ops/op.h"
#include "ops/optim_ops.h"
#include "ref/ns_sched.h"
#include "ref/optim_ref.h"

static int ns_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_ns_args *a = args;
    o[0] = (dm_out){"X", (void **)&a->out, (size_t)a->n * a->rows * a->cols, DM_OUT_SET};
    return 1;
}

/* per step and slice 4 m^2 k + 2 m^3, m = min(rows, cols), k = max (X X^T, A^2, B X) */
static double ns_op_flops(const void *args, int dir) {
    (void)dir;
    const dm_ns_args *a = args;
    double m = a->rows < a->cols ? a->rows : a->cols, k = a->rows < a->cols ? a->cols : a->rows;
    double step = (double)a->n * (4.0 * m * m * k + 2.0 * m * m * m);
    return a->t < 0 ? step * dm_ns_sched_steps(a->s) : step;
}

/* the whole iteration: the steps in turn, X ping-ponging between out and work (X0's place) */
static void ns_ref(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_ns_args *a = args;
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
static const char *ns_check(const void *args, int dir) {
    (void)dir;
    const dm_ns_args *a = args;
    if (a->n < 0 || a->rows < 0 || a->cols < 0) return "a negative size";
    return a->n && a->rows && a->cols && (!a->out || !a->G || !a->work) ? "a NULL buffer"
                                                                       : NULL;
}

static int ns_asked(const void *args) { return ((const dm_ns_args *)args)->prec; }

static const dm_impl NS_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, ns_ref, DM_MEM_HOST};
const dm_op_def dm_def_ns = {"ns", 1u << DM_FWD, &NS_REF, sizeof(dm_ns_args), ns_outputs,
                             ns_op_flops, ns_check, NULL, ns_asked};
const dm_op_def dm_def_ns_bf16 = {"ns_bf16", 1u << DM_FWD, NULL, sizeof(dm_ns_args), ns_outputs,
                                  ns_op_flops, ns_check, NULL, ns_asked};

void dm_op_ns(dm_ops *o, dm_bf *x, int n, int rows, int cols, int s, dm_bf *work, int bf16,
              int stack) {
    dm_ns_args a = {.out = DM_RAW(x), .G = DM_RAW(x), .n = n, .rows = rows, .cols = cols, .s = s,
                    .stack = stack, .t = -1, .work = DM_RAW(work), .prec = DM_PRECISION_FP32};
    if (bf16 && !dm_ops_ns_bf16_context(o)) {
        a.prec = DM_PRECISION_BF16;
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
    float *buf[2] = {DM_RAW(x), DM_RAW(work)};
    int steps = dm_ns_sched_steps(s);
    for (a.t = 0; a.t < steps; a.t++) {
        a.G = a.t == 0 ? buf[0] : buf[(a.t - 1) & 1];
        a.out = buf[a.t & 1];
        dm_op_run(o, DM_OP_NS, DM_FWD, &a);
    }
    if (!(steps & 1) && len) { /* within the backend's memory */
        if (o->be) dm_backend_copy(o->be, x, work, len * sizeof(float));
        else memcpy(x, work, len * sizeof(float));
    }
}

static int retract_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_retract_args *a = args;
    o[0] = (dm_out){"W", (void **)&a->out, (size_t)a->n * a->rows * a->cols, DM_OUT_SET};
    return 1;
}
static const char *retract_check(const void *args, int dir) {
    (void)dir;
    const dm_retract_args *a = args;
    if (a->n < 0 || a->rows < 0 || a->cols < 0) return "a negative size";
    if (!a->n || !a->rows || !a->cols) return NULL;
    return !a->out || !a->W || !a->c || (a->stiefel && !a->work) ? "a NULL buffer" : NULL;
}
const dm_op_def dm_def_retract = {"retract", 1u << DM_FWD, NULL, sizeof(dm_retract_args),
                                  retract_outputs, NULL, retract_check, NULL, NULL};

void dm_op_retract_sphere(dm_ops *o, dm_bf *W, const dm_bf *R, int n, int rows, int cols) {
    dm_retract_args a = {DM_RAW(W), DM_RAW(W), DM_RAW(R), n, rows, cols, 0, 0, NULL};
    dm_op_run(o, DM_OP_RETRACT, DM_FWD, &a);
}

void dm_op_retract_stiefel(dm_ops *o, dm_bf *W, const dm_bf *S, int n, int rows, int cols,
                           dm_bf *work, int stack) {
    dm_retract_args a = {DM_RAW(W), DM_RAW(W), DM_RAW(S), n, rows, cols, 1, stack, DM_RAW(work)};
    dm_op_run(o, DM_OP_RETRACT, DM_FWD, &a);
}


/* ---- what the optimizer asks to plan these ops (optim_ops.h) ---- */

int dm_op_ns_steps(int s) { return dm_ns_sched_steps(s); }
double dm_op_ns_flops(int n, int rows, int cols, int s) {
    double m = rows < cols ? rows : cols, k = rows < cols ? cols : rows;
    return (double)n * dm_ns_sched_steps(s) * (4.0 * m * m * k + 2.0 * m * m * m);
}

/* the backend's answers (ops/backend.h: dm_backend_calls; the host's without one) */
static const dm_backend_calls *calls_of(const dm_ops *o) {
    const dm_backend_vt *vt = o->be ? o->be->vt : dm_backend_regs[0].vt;
    return vt ? vt->calls : NULL;
}
size_t dm_op_ns_work(dm_ops *o, int n, int rows, int cols, int bf16) {
    const dm_backend_calls *c = calls_of(o);
    return c && c->ns_work ? c->ns_work(n, rows, cols, bf16) : 0;
}
int dm_op_ns_threaded(dm_ops *o, int rows, int cols) {
    const dm_backend_calls *c = calls_of(o);
    return c && c->ns_threaded ? c->ns_threaded(rows, cols) : 0;
}
size_t dm_op_retract_work(dm_ops *o, int n, int rows, int cols) {
    const dm_backend_calls *c = calls_of(o);
    return c && c->retract_work ? c->retract_work(n, rows, cols) : 0;
}
void dm_op_retract_init(dm_ops *o, float *R, float *s, const float *W0, int n, int rows,
                        int cols) {
    const dm_backend_calls *c = calls_of(o);
    if (c && c->retract_init) c->retract_init(R, s, W0, n, rows, cols);
}
