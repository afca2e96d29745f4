/* pointwise.c — the elementwise ops: SiLU, sigmoid, SwiGLU, the forget gate, and the
 * residual add. Each has the vectorized CPU kernel and the libm reference (act_ref.c);
 * add has only its kernel. */
#include "backends/cpu/kernels/kernels.h"
#include "ref/ref.h"
#include "ops/op.h"

/* silu, sigmoid: y = f(x); backward dx = dy * f'(.) from x (silu) or from y (sigmoid) */
typedef struct {
    float *y;
    const float *x;
    float *dx;
    const float *dy;
    size_t n;
} unary_args;

static int unary_outputs(void *args, int dir, dm_out *o) {
    unary_args *a = args;
    o[0] = dir == DM_FWD ? (dm_out){"y", (void **)&a->y, a->n, DM_OUT_SET}
                         : (dm_out){"dx", (void **)&a->dx, a->n, DM_OUT_SET};
    return 1;
}

/* a unary op's kernel pair: y = f(x) and its backward from x (silu) or y (sigmoid) */
typedef struct {
    void (*fwd)(float *y, const float *x, size_t n);
    void (*bwd)(float *dx, const float *dy, const float *x, size_t n);
} unary_k;

static void unary_run(const unary_k *k, void *args, int dir) {
    unary_args *a = args;
    if (dir == DM_FWD) k->fwd(a->y, a->x, a->n);
    else k->bwd(a->dx, a->dy, a->x, a->n);
}

static const unary_k SILU_CPU = {dm_silu_fwd, dm_silu_bwd},
                     SILU_REF = {dm_silu_ref_fwd, dm_silu_ref_bwd},
                     SIGMOID_CPU = {dm_sigmoid_fwd, dm_sigmoid_bwd},
                     SIGMOID_REF = {dm_sigmoid_ref_fwd, dm_sigmoid_ref_bwd};
static void silu_cpu(dm_ops *o, void *a, int d) { (void)o, unary_run(&SILU_CPU, a, d); }
static void silu_ref(dm_ops *o, void *a, int d) { (void)o, unary_run(&SILU_REF, a, d); }
static void sigmoid_cpu(dm_ops *o, void *a, int d) { (void)o, unary_run(&SIGMOID_CPU, a, d); }
static void sigmoid_ref(dm_ops *o, void *a, int d) { (void)o, unary_run(&SIGMOID_REF, a, d); }

static const dm_impl SILU[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, silu_cpu, DM_MEM_HOST},
                               {"reference", 1, DM_PREC_FP32, NULL, NULL, silu_ref, DM_MEM_HOST}};
const dm_op_def dm_def_silu = {"silu", 1u << DM_FWD | 1u << DM_BWD, SILU, 2, sizeof(unary_args),
                               unary_outputs, NULL};
static const dm_impl SIGMOID[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, sigmoid_cpu, DM_MEM_HOST},
                                  {"reference", 1, DM_PREC_FP32, NULL, NULL, sigmoid_ref, DM_MEM_HOST}};
const dm_op_def dm_def_sigmoid = {"sigmoid", 1u << DM_FWD | 1u << DM_BWD, SIGMOID, 2,
                                  sizeof(unary_args), unary_outputs, NULL};

/* in: x for the forward and for silu's backward, y for sigmoid's backward */
static void unary(dm_ops *o, int op, int dir, float *out, const float *in, const float *dy,
                  size_t n) {
    unary_args a = {.x = in, .dy = dy, .n = n};
    if (dir == DM_FWD) a.y = out;
    else a.dx = out;
    dm_op_run(o, op, dir, &a);
}
void dm_op_silu_fwd(dm_ops *o, float *y, const float *x, size_t n) {
    unary(o, DM_OP_SILU, DM_FWD, y, x, NULL, n);
}
void dm_op_silu_bwd(dm_ops *o, float *dx, const float *dy, const float *x, size_t n) {
    unary(o, DM_OP_SILU, DM_BWD, dx, x, dy, n);
}
void dm_op_sigmoid_fwd(dm_ops *o, float *y, const float *x, size_t n) {
    unary(o, DM_OP_SIGMOID, DM_FWD, y, x, NULL, n);
}
void dm_op_sigmoid_bwd(dm_ops *o, float *dx, const float *dy, const float *y, size_t n) {
    unary(o, DM_OP_SIGMOID, DM_BWD, dx, y, dy, n);
}

/* swiglu: h = silu(a) b;  backward da, db from dh */
typedef struct {
    float *h;
    uint16_t *hb; /* bf16(h) too (NULL: none) */
    const float *a, *b;
    float *da, *db;
    uint16_t *dab, *dbb; /* bwd: bf16(da), bf16(db) too (NULL: none) */
    const float *dh;
    size_t n;
} swiglu_args;

static void swiglu_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    swiglu_args *s = args;
    if (dir == DM_FWD) dm_swiglu_fwd_yb(s->h, s->hb, s->a, s->b, s->n);
    else dm_swiglu_bwd_yb(s->da, s->db, s->dab, s->dbb, s->dh, s->a, s->b, s->n);
}
static void swiglu_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    swiglu_args *s = args;
    if (dir == DM_FWD) dm_swiglu_ref_fwd(s->h, s->a, s->b, s->n);
    else dm_swiglu_ref_bwd(s->da, s->db, s->dh, s->a, s->b, s->n);
    if (dir == DM_FWD && s->hb) dm_bf16_from_f32(s->hb, s->h, s->n);
    if (dir == DM_BWD && s->dab) dm_bf16_from_f32(s->dab, s->da, s->n);
    if (dir == DM_BWD && s->dbb) dm_bf16_from_f32(s->dbb, s->db, s->n);
}
static int swiglu_outputs(void *args, int dir, dm_out *o) {
    swiglu_args *s = args;
    if (dir == DM_FWD) {
        o[0] = (dm_out){"h", (void **)&s->h, s->n, DM_OUT_SET};
        if (!s->hb) return 1; /* the bf16 copy: the second run of verify mode writes none */
        o[1] = (dm_out){"h bf16", (void **)&s->hb, s->n, DM_OUT_PRIVATE};
        return 2;
    }
    o[0] = (dm_out){"da", (void **)&s->da, s->n, DM_OUT_SET};
    o[1] = (dm_out){"db", (void **)&s->db, s->n, DM_OUT_SET};
    int k = 2; /* the bf16 copies: the second run of verify mode writes none */
    if (s->dab) o[k++] = (dm_out){"da bf16", (void **)&s->dab, s->n, DM_OUT_PRIVATE};
    if (s->dbb) o[k++] = (dm_out){"db bf16", (void **)&s->dbb, s->n, DM_OUT_PRIVATE};
    return k;
}
static const dm_impl SWIGLU[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, swiglu_cpu, DM_MEM_HOST},
                                 {"reference", 1, DM_PREC_FP32, NULL, NULL, swiglu_ref, DM_MEM_HOST}};
const dm_op_def dm_def_swiglu = {"swiglu", 1u << DM_FWD | 1u << DM_BWD, SWIGLU, 2,
                                 sizeof(swiglu_args), swiglu_outputs, NULL};

void dm_op_swiglu_fwd(dm_ops *o, float *h, uint16_t *hb, const float *a, const float *b,
                      size_t n) {
    if (!dm_ops_bf16_active(o)) hb = NULL;
    swiglu_args s = {.h = h, .hb = hb, .a = a, .b = b, .n = n};
    dm_op_run(o, DM_OP_SWIGLU, DM_FWD, &s);
    if (hb) dm_op_bf16_register(o, hb, h, n);
}
void dm_op_swiglu_bwd(dm_ops *o, float *da, float *db, uint16_t *dab, uint16_t *dbb,
                      const float *dh, const float *a, const float *b, size_t n) {
    if (!dm_ops_bf16_active(o)) dab = dbb = NULL;
    swiglu_args s = {.a = a, .b = b, .da = da, .db = db, .dab = dab, .dbb = dbb, .dh = dh,
                     .n = n};
    dm_op_run(o, DM_OP_SWIGLU, DM_BWD, &s);
}

/* the forget gate: g = gate(f; A_log, dt_bias), [N,H,Cg] */
typedef struct {
    float *g;
    const float *f, *A_log, *dt_bias;
    float *df, *dA_log, *ddt_bias;
    uint16_t *dfb; /* bwd: bf16(df) too (NULL: none) */
    const float *dg;
    int N, H, Cg;
    float lb;
} gate_args;

static void gate_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops;
    gate_args *a = args;
    if (dir == DM_FWD) dm_gate_fwd(a->g, a->f, a->A_log, a->dt_bias, a->N, a->H, a->Cg, a->lb);
    else
        dm_gate_bwd_yb(a->df, a->dfb, a->dA_log, a->ddt_bias, a->dg, a->f, a->A_log,
                       a->dt_bias, a->N, a->H, a->Cg, a->lb);
}
static void gate_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    gate_args *a = args;
    if (dir == DM_FWD)
        dm_gate_ref_fwd(a->g, a->f, a->A_log, a->dt_bias, a->N, a->H, a->Cg, a->lb);
    else
        dm_gate_ref_bwd(a->df, a->dA_log, a->ddt_bias, a->dg, a->f, a->A_log, a->dt_bias, a->N,
                        a->H, a->Cg, a->lb);
    if (dir == DM_BWD && a->dfb) dm_bf16_from_f32(a->dfb, a->df, (size_t)a->N * a->H * a->Cg);
}
static int gate_outputs(void *args, int dir, dm_out *o) {
    gate_args *a = args;
    size_t n = (size_t)a->N * a->H * a->Cg;
    if (dir == DM_FWD) {
        o[0] = (dm_out){"g", (void **)&a->g, n, DM_OUT_SET};
        return 1;
    }
    o[0] = (dm_out){"df", (void **)&a->df, n, DM_OUT_SET};
    o[1] = (dm_out){"dA_log", (void **)&a->dA_log, (size_t)a->H, DM_OUT_ACC};
    o[2] = (dm_out){"ddt_bias", (void **)&a->ddt_bias, (size_t)a->H * a->Cg, DM_OUT_ACC};
    if (!a->dfb) return 3; /* the bf16 copy: the second run of verify mode writes none */
    o[3] = (dm_out){"df bf16", (void **)&a->dfb, n, DM_OUT_PRIVATE};
    return 4;
}
static const dm_impl GATE[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, gate_cpu, DM_MEM_HOST},
                               {"reference", 1, DM_PREC_FP32, NULL, NULL, gate_ref, DM_MEM_HOST}};
const dm_op_def dm_def_gate = {"gate", 1u << DM_FWD | 1u << DM_BWD, GATE, 2, sizeof(gate_args),
                               gate_outputs, NULL};

void dm_op_gate_fwd(dm_ops *o, float *g, const float *f, const float *A_log,
                    const float *dt_bias, int N, int H, int Cg, float lb) {
    gate_args a = {.g = g, .f = f, .A_log = A_log, .dt_bias = dt_bias, .N = N, .H = H, .Cg = Cg,
                   .lb = lb};
    dm_op_run(o, DM_OP_GATE, DM_FWD, &a);
}
void dm_op_gate_bwd(dm_ops *o, float *df, uint16_t *dfb, float *dA_log, float *ddt_bias,
                    const float *dg, const float *f, const float *A_log, const float *dt_bias,
                    int N, int H, int Cg, float lb) {
    if (!dm_ops_bf16_active(o)) dfb = NULL;
    gate_args a = {.f = f, .A_log = A_log, .dt_bias = dt_bias, .df = df, .dfb = dfb,
                   .dA_log = dA_log, .ddt_bias = ddt_bias, .dg = dg, .N = N, .H = H, .Cg = Cg,
                   .lb = lb};
    dm_op_run(o, DM_OP_GATE, DM_BWD, &a);
}

/* the residual add y += x: one kernel, nothing to check it against */
typedef struct {
    float *y;
    const float *x;
    size_t n;
} add_args;

static void add_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    add_args *a = args;
    dm_add_inplace(a->y, a->x, a->n);
}
static int add_outputs(void *args, int dir, dm_out *o) {
    (void)dir;
    add_args *a = args;
    o[0] = (dm_out){"y", (void **)&a->y, a->n, DM_OUT_ACC};
    return 1;
}
static const dm_impl ADD[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, add_cpu, DM_MEM_HOST}};
const dm_op_def dm_def_add = {"add", 1u << DM_FWD, ADD, 1, sizeof(add_args), add_outputs, NULL};

void dm_op_add(dm_ops *o, float *y, const float *x, size_t n) {
    add_args a = {.y = y, .x = x, .n = n};
    dm_op_run(o, DM_OP_ADD, DM_FWD, &a);
}
