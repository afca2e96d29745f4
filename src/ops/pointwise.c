/* pointwise.c — the elementwise ops: SiLU, sigmoid, SwiGLU, the forget gate, and the
 * residual add (arguments: pointwise.h). Each but add has the libm reference (act_ref.c);
 * add has nothing to check it against. */
#include "ops/pointwise.h"

#include "ops/op.h"
#include "ref/ref.h"

static int unary_outputs(void *args, int dir, dm_out *o) {
    dm_unary_args *a = args;
    o[0] = dir == DM_FWD ? (dm_out){"y", (void **)&a->y, a->n, DM_OUT_SET}
                         : (dm_out){"dx", (void **)&a->dx, a->n, DM_OUT_SET};
    return 1;
}

static void silu_ref(dm_ops *o, void *args, int dir) {
    (void)o;
    dm_unary_args *a = args;
    if (dir == DM_FWD) dm_silu_ref_fwd(a->y, a->x, a->n);
    else dm_silu_ref_bwd(a->dx, a->dy, a->x, a->n);
}
static void sigmoid_ref(dm_ops *o, void *args, int dir) {
    (void)o;
    dm_unary_args *a = args;
    if (dir == DM_FWD) dm_sigmoid_ref_fwd(a->y, a->x, a->n);
    else dm_sigmoid_ref_bwd(a->dx, a->dy, a->x, a->n);
}
/* the elementwise ops' checks: the buffers of a non-empty call */
static const char *unary_check(const void *args, int dir) {
    const dm_unary_args *a = args;
    if (!a->n) return NULL;
    if (dir == DM_FWD) return !a->y || !a->x ? "a NULL buffer" : NULL;
    return !a->dx || !a->dy || !a->x ? "a NULL buffer" : NULL;
}
static const char *swiglu_check(const void *args, int dir) {
    const dm_swiglu_args *s = args;
    if (!s->n) return NULL;
    if (!s->a || !s->b) return "a NULL buffer";
    if (dir == DM_FWD) return !s->h ? "a NULL buffer" : NULL;
    return !s->da || !s->db || !s->dh ? "a NULL buffer" : NULL;
}
static const char *add_check(const void *args, int dir) {
    (void)dir;
    const dm_add_args *a = args;
    return a->n && (!a->y || !a->x) ? "a NULL buffer" : NULL;
}

/* inputs: x (the forward; silu's backward) or y (sigmoid's backward), and dy */
static double unary_reads(const void *args, int dir) {
    return 4.0 * (double)((const dm_unary_args *)args)->n * (dir == DM_FWD ? 1 : 2);
}
static double swiglu_reads(const void *args, int dir) {
    return 4.0 * (double)((const dm_swiglu_args *)args)->n * (dir == DM_FWD ? 2 : 3);
}
static double add_reads(const void *args, int dir) { /* x (y is the output, counted there) */
    (void)dir;
    return 4.0 * (double)((const dm_add_args *)args)->n;
}

static const dm_impl SILU_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, silu_ref, DM_MEM_HOST};
static const dm_impl SIGMOID_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, sigmoid_ref,
                                    DM_MEM_HOST};
const dm_op_def dm_def_silu = {"silu", 1u << DM_FWD | 1u << DM_BWD, &SILU_REF,
                               sizeof(dm_unary_args), unary_outputs, NULL, unary_check,
                               unary_reads, NULL};
const dm_op_def dm_def_sigmoid = {"sigmoid", 1u << DM_FWD | 1u << DM_BWD, &SIGMOID_REF,
                                  sizeof(dm_unary_args), unary_outputs, NULL, unary_check,
                                  unary_reads, NULL};

/* in: x for the forward and for silu's backward, y for sigmoid's backward */
static void unary(dm_ops *o, int op, int dir, dm_bf *out, const dm_bf *in, const dm_bf *dy,
                  size_t n) {
    dm_unary_args a = {.x = DM_RAW(in), .dy = dy ? DM_RAW(dy) : NULL, .n = n};
    if (dir == DM_FWD) a.y = DM_RAW(out);
    else a.dx = DM_RAW(out);
    dm_op_run(o, op, dir, &a);
}
void dm_op_silu_fwd(dm_ops *o, dm_bf *y, const dm_bf *x, size_t n) {
    unary(o, DM_OP_SILU, DM_FWD, y, x, NULL, n);
}
void dm_op_silu_bwd(dm_ops *o, dm_bf *dx, const dm_bf *dy, const dm_bf *x, size_t n) {
    unary(o, DM_OP_SILU, DM_BWD, dx, x, dy, n);
}
void dm_op_sigmoid_fwd(dm_ops *o, dm_bf *y, const dm_bf *x, size_t n) {
    unary(o, DM_OP_SIGMOID, DM_FWD, y, x, NULL, n);
}
void dm_op_sigmoid_bwd(dm_ops *o, dm_bf *dx, const dm_bf *dy, const dm_bf *y, size_t n) {
    unary(o, DM_OP_SIGMOID, DM_BWD, dx, y, dy, n);
}

/* ---- swiglu ---- */

static void swiglu_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_swiglu_args *s = args;
    if (dir == DM_FWD) dm_swiglu_ref_fwd(s->h, s->a, s->b, s->n);
    else dm_swiglu_ref_bwd(s->da, s->db, s->dh, s->a, s->b, s->n);
}
static int swiglu_outputs(void *args, int dir, dm_out *o) {
    dm_swiglu_args *s = args;
    if (dir == DM_FWD) {
        o[0] = (dm_out){"h", (void **)&s->h, s->n, DM_OUT_SET};
        return 1;
    }
    o[0] = (dm_out){"da", (void **)&s->da, s->n, DM_OUT_SET};
    o[1] = (dm_out){"db", (void **)&s->db, s->n, DM_OUT_SET};
    return 2;
}
static const dm_impl SWIGLU_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, swiglu_ref,
                                   DM_MEM_HOST};
const dm_op_def dm_def_swiglu = {"swiglu", 1u << DM_FWD | 1u << DM_BWD, &SWIGLU_REF,
                                 sizeof(dm_swiglu_args), swiglu_outputs, NULL, swiglu_check,
                                 swiglu_reads, NULL};

void dm_op_swiglu_fwd(dm_ops *o, dm_bf *h, const dm_bf *a, const dm_bf *b, size_t n) {
    dm_swiglu_args s = {.h = DM_RAW(h), .a = DM_RAW(a), .b = DM_RAW(b), .n = n};
    dm_op_run(o, DM_OP_SWIGLU, DM_FWD, &s);
}
void dm_op_swiglu_bwd(dm_ops *o, dm_bf *da, dm_bf *db, const dm_bf *dh, const dm_bf *a,
                      const dm_bf *b, size_t n) {
    dm_swiglu_args s = {.a = DM_RAW(a), .b = DM_RAW(b), .da = DM_RAW(da), .db = DM_RAW(db),
                        .dh = DM_RAW(dh), .n = n};
    dm_op_run(o, DM_OP_SWIGLU, DM_BWD, &s);
}

/* ---- the forget gate ---- */

static void gate_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_gate_args *a = args;
    if (dir == DM_FWD)
        dm_gate_ref_fwd(a->g, a->f, a->A_log, a->dt_bias, a->N, a->H, a->Cg, a->lb);
    else
        dm_gate_ref_bwd(a->df, a->dA_log, a->ddt_bias, a->dg, a->f, a->A_log, a->dt_bias, a->N,
                        a->H, a->Cg, a->lb);
}
static int gate_outputs(void *args, int dir, dm_out *o) {
    dm_gate_args *a = args;
    size_t n = (size_t)a->N * a->H * a->Cg;
    if (dir == DM_FWD) {
        o[0] = (dm_out){"g", (void **)&a->g, n, DM_OUT_SET};
        return 1;
    }
    o[0] = (dm_out){"df", (void **)&a->df, n, DM_OUT_SET};
    o[1] = (dm_out){"dA_log", (void **)&a->dA_log, (size_t)a->H, DM_OUT_ACC};
    o[2] = (dm_out){"ddt_bias", (void **)&a->ddt_bias, (size_t)a->H * a->Cg, DM_OUT_ACC};
    return 3;
}
static const char *gate_check(const void *args, int dir) {
    const dm_gate_args *a = args;
    if (a->N < 0 || a->H < 0 || a->Cg < 0) return "a negative size";
    if (!a->N || !a->H || !a->Cg) return NULL;
    if (!a->f || !a->A_log || !a->dt_bias) return "a NULL input";
    return dir == DM_FWD ? (!a->g ? "a NULL buffer" : NULL)
                         : (!a->df || !a->dA_log || !a->ddt_bias || !a->dg ? "a NULL buffer"
                                                                          : NULL);
}

/* f (and dg), A_log and dt_bias */
static double gate_reads(const void *args, int dir) {
    const dm_gate_args *a = args;
    return 4.0 * ((double)a->N * a->H * a->Cg * (dir == DM_FWD ? 1 : 2) + 2.0 * a->H);
}

static const dm_impl GATE_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, gate_ref, DM_MEM_HOST};
const dm_op_def dm_def_gate = {"gate", 1u << DM_FWD | 1u << DM_BWD, &GATE_REF,
                               sizeof(dm_gate_args), gate_outputs, NULL, gate_check, gate_reads,
                               NULL};

void dm_op_gate_fwd(dm_ops *o, dm_bf *g, const dm_bf *f, const dm_bf *A_log,
                    const dm_bf *dt_bias, int N, int H, int Cg, float lb) {
    dm_gate_args a = {.g = DM_RAW(g), .f = DM_RAW(f), .A_log = DM_RAW(A_log),
                      .dt_bias = DM_RAW(dt_bias), .N = N, .H = H, .Cg = Cg, .lb = lb};
    dm_op_run(o, DM_OP_GATE, DM_FWD, &a);
}
void dm_op_gate_bwd(dm_ops *o, dm_bf *df, dm_bf *dA_log, dm_bf *ddt_bias, const dm_bf *dg,
                    const dm_bf *f, const dm_bf *A_log, const dm_bf *dt_bias, int N, int H,
                    int Cg, float lb) {
    dm_gate_args a = {.f = DM_RAW(f), .A_log = DM_RAW(A_log), .dt_bias = DM_RAW(dt_bias),
                      .df = DM_RAW(df), .dA_log = DM_RAW(dA_log),
                      .ddt_bias = DM_RAW(ddt_bias), .dg = DM_RAW(dg), .N = N, .H = H, .Cg = Cg,
                      .lb = lb};
    dm_op_run(o, DM_OP_GATE, DM_BWD, &a);
}

/* ---- the residual add: no reference ---- */

static int add_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    dm_add_args *a = args;
    o[0] = (dm_out){"y", (void **)&a->y, a->n, DM_OUT_ACC};
    return 1;
}
const dm_op_def dm_def_add = {"add", 1u << DM_FWD, NULL, sizeof(dm_add_args), add_outputs,
                              NULL, add_check, add_reads, NULL};

void dm_op_add(dm_ops *o, dm_bf *y, const dm_bf *x, size_t n) {
    dm_add_args a = {.y = DM_RAW(y), .x = DM_RAW(x), .n = n};
    dm_op_run(o, DM_OP_ADD, DM_FWD, &a);
}
