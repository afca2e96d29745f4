/* update.c — the cpu backend's optimizer ops (ops/update.c defines them): the kernels of
 * adamw, momentum, muon_update, grad_norm, grad_add and grad_mean (kernels/optim.c), and
 * normuon with the cautious forms of adamw and muon_update (kernels/normuon.c). */
#include <string.h>

#include "backends/cpu/kernels/normuon.h"
#include "backends/cpu/kernels/optim.h"
#include "ops/op.h"
#include "ops/update.h"

static void adamw_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_adamw_args *a = args;
    const float *h = a->hyper;
    dm_adamw(a->po, a->m1o, a->m2o, a->p, a->g, a->m1, a->m2, a->n, h[0], h[1], a->b1, a->b2,
             a->eps, h[2], h[3], a->gscale ? *a->gscale : 1.0f, a->cautious);
}

static void mom_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_mom_args *a = args;
    dm_momentum(a->momo, a->u, a->mom, a->g, a->n, a->beta, a->gscale ? *a->gscale : 1.0f);
}

static void apply_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_apply_args *a = args;
    dm_muon_apply(a->wo, a->w, a->x, a->n, a->ds[0], a->ds[1], a->cautious);
}

/* in place; verify's second run gets outputs of its own: the inputs copied there first */
static void normuon_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_normuon_args *a = args;
    size_t nx = (size_t)a->n * a->rows * a->cols, nv = (size_t)a->n * a->rows;
    if (a->xo != a->x) memcpy(a->xo, a->x, nx * sizeof(float));
    if (a->vo != a->v) memcpy(a->vo, a->v, nv * sizeof(float));
    dm_normuon(a->xo, a->vo, a->n, a->rows, a->cols, a->beta2, a->eps, (double *)a->work);
}

static void norm_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_gnorm_args *a = args;
    *a->norm = dm_grad_norm2(a->g, a->n);
    if (a->gscale) *a->gscale = dm_clip_scale(*a->norm, a->clip);
}

static void add_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_sum_args *a = args;
    dm_grad_add(a->out, a->acc, a->g, a->n, a->first);
}

static void mean_cpu(dm_ops *ops, void *args, int dir) {
    (void)ops, (void)dir;
    dm_sum_args *a = args;
    dm_grad_mean(a->out, a->acc, a->n, a->A);
}
static const dm_impl ADAMW[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, adamw_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_adamw = DM_IMPL_LIST(ADAMW);
static const dm_impl MOMENTUM[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, mom_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_momentum = DM_IMPL_LIST(MOMENTUM);
static const dm_impl APPLY[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, apply_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_muon_update = DM_IMPL_LIST(APPLY);
static const dm_impl NORMUON[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, normuon_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_normuon = DM_IMPL_LIST(NORMUON);
static const dm_impl NORM[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, norm_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_grad_norm = DM_IMPL_LIST(NORM);
static const dm_impl GRAD_ADD[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, add_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_grad_add = DM_IMPL_LIST(GRAD_ADD);
static const dm_impl GRAD_MEAN[] = {{"cpu", 0, DM_PREC_FP32, NULL, NULL, mean_cpu, DM_MEM_HOST}};
const dm_impl_list dm_cpu_grad_mean = DM_IMPL_LIST(GRAD_MEAN);
