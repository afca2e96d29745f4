/* pointwise.c — the cpu backend's elementwise ops (ops/pointwise.c defines them): the
 * vectorized kernels of SiLU, sigmoid, SwiGLU, the forget gate and the residual add. */
#include "backends/cpu/ctx.h"
#include "backends/cpu/kernels/kernels.h"
#include "ops/op.h"
#include "ops/pointwise.h"

static void silu_cpu(dm_ops *o, void *args, int dir) {
    (void)o;
    dm_unary_args *a = args;
    if (dir == DM_FWD) dm_silu_fwd(a->y, a->x, a->n);
    else dm_silu_bwd(a->dx, a->dy, a->x, a->n);
}
static void sigmoid_cpu(dm_ops *o, void *args, int dir) {
    (void)o;
    dm_unary_args *a = args;
    if (dir == DM_FWD) dm_sigmoid_fwd(a->y, a->x, a->n);
    else dm_sigmoid_bwd(a->dx, a->dy, a->x, a->n);
}
static const dm_impl SILU[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, silu_cpu, DM_MEM_HOST}};
static const dm_impl SIGMOID[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, sigmoid_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_silu = DM_IMPL_LIST(SILU), dm_cpu_sigmoid = DM_IMPL_LIST(SIGMOID);

/* SwiGLU and the gate write the bf16 copies of their outputs in the same pass where they
 * have room (copies.c) */
static void swiglu_cpu(dm_ops *ops, void *args, int dir) {
    dm_swiglu_args *s = args;
    if (dir == DM_FWD) {
        uint16_t *hb = dm_cpu_room_of(ops, s->h, s->n);
        dm_swiglu_fwd_yb(s->h, hb, s->a, s->b, s->n);
        if (hb) dm_cpu_copy_made(ops, s->h, hb, s->n);
        return;
    }
    uint16_t *dab = dm_cpu_room_of(ops, s->da, s->n), *dbb = dm_cpu_room_of(ops, s->db, s->n);
    dm_swiglu_bwd_yb(s->da, s->db, dab, dbb, s->dh, s->a, s->b, s->n);
    if (dab) dm_cpu_copy_made(ops, s->da, dab, s->n);
    if (dbb) dm_cpu_copy_made(ops, s->db, dbb, s->n);
}
static const dm_impl SWIGLU[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, swiglu_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_swiglu = DM_IMPL_LIST(SWIGLU);

static void gate_cpu(dm_ops *ops, void *args, int dir) {
    dm_gate_args *a = args;
    if (dir == DM_FWD) {
        dm_gate_fwd(a->g, a->f, a->A_log, a->dt_bias, a->N, a->H, a->Cg, a->lb);
        return;
    }
    size_t n = (size_t)a->N * a->H * a->Cg;
    uint16_t *dfb = dm_cpu_room_of(ops, a->df, n);
    dm_gate_bwd_yb(a->df, dfb, a->dA_log, a->ddt_bias, a->dg, a->f, a->A_log, a->dt_bias, a->N,
                   a->H, a->Cg, a->lb);
    if (dfb) dm_cpu_copy_made(ops, a->df, dfb, n);
}
static const dm_impl GATE[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, gate_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_gate = DM_IMPL_LIST(GATE);

static void add_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_add_args *a = args;
    dm_add_inplace(a->y, a->x, a->n);
}
static const dm_impl ADD[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, add_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_add = DM_IMPL_LIST(ADD);
