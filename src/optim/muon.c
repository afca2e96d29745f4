/* muon.c — Muon for the hidden matrices (docs/muon.md sections 2, 6-8):
 *   m <- beta m + (1 - beta) g;   u = (1 - beta) g + beta m          (Nesterov)
 *   O = NS(u), per slice (head-wise Q/K: [n_head, head_dim, d_model], ONE batched call)
 *   W <- (1 - lr wd) W - lr sqrt(max(1, rows/cols)) O                 ([out, in] layout)
 *   then, on steps where step % retract_every == 0, retraction per slice:
 *   sphere W <- R W/||W||_F, or stiefel W <- s polar(W), with R, s fixed at init. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/onednn.h"
#include "optim/ns.h"
#include "optim/retract.h"
#include "optim/optim_internal.h"

static void slice_shape(const dm_tensor *t, const dm_group *g, int *rows, int *cols) {
    *rows = t->shape[0] / g->slices;
    *cols = t->shape[1];
}

/* tensor i when Muon updates it (its group in *g, its slices' shape in *r, *c), else NULL */
static const dm_tensor *muon_tensor(const dm_optim *o, dm_model *m, int i, const dm_group **g,
                                    int *r, int *c) {
    *g = &o->groups[i];
    if ((*g)->kind != DM_GROUP_MUON) return NULL;
    const dm_tensor *t = dm_model_tensor(m, i);
    slice_shape(t, *g, r, c);
    return t;
}

/* NS in bf16 when ns_precision asks for it and the CPU has hardware bf16: a oneDNN context
 * (0), or an error naming what is missing (1; with auto: fp32, no error) */
static int ns_bf16(dm_optim *o, char *err, size_t errlen) {
    int p = o->cfg.ns_precision;
    if (p == DM_PRECISION_FP32) return 0;
    const char *why = dm_cpu_bf16_missing();
    if (!why) {
        o->dnn = dm_onednn_create(&why);
        if (o->dnn && dm_onednn_supports_bf16(o->dnn, 0, 1, 64, 64, 64, 64, 64, 64, 1.0f, 0.0f)) {
            why = "oneDNN has no bf16 matmul on this CPU";
            dm_onednn_free(o->dnn);
            o->dnn = NULL;
        }
    }
    if (!why || p == DM_PRECISION_AUTO) return 0;
    snprintf(err, errlen, "ns_precision=bf16: %s; use ns_precision=auto or fp32", why);
    return 1;
}

int dm_muon_init(dm_optim *o, dm_model *m, char *err, size_t errlen) {
    size_t biggest = 0, work = 0;
    if (ns_bf16(o, err, errlen)) return 1;
    o->slice_off = calloc((size_t)o->n_tensors, sizeof *o->slice_off);
    if (!o->slice_off) goto oom;
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_group *g;
        int r, c;
        const dm_tensor *t = muon_tensor(o, m, i, &g, &r, &c);
        if (!t) continue;
        o->slice_off[i] = o->n_slices;
        o->n_slices += g->slices;
        if (t->numel > biggest) biggest = t->numel;
        size_t w = o->dnn ? dm_ns_work_bf16(g->slices, r, c) : dm_ns_work(g->slices, r, c);
        size_t ws = dm_retract_stiefel_work(g->slices, r, c);
        if (w > work) work = w;
        if (ws > work) work = ws;
    }
    o->mom = calloc(o->n, sizeof(float));
    o->upd = malloc(biggest * sizeof(float));
    o->ns_work = malloc(work * sizeof(float));
    o->radius = calloc((size_t)o->n_slices, sizeof(float));
    o->scale = calloc((size_t)o->n_slices, sizeof(float));
    if (!o->mom || !o->upd || !o->ns_work || !o->radius || !o->scale) goto oom;
    /* retraction constants from the weights as they are now (init; a resumed run then
     * loads the saved ones over these) */
    const float *P = dm_model_params(m);
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_group *g;
        int r, c;
        const dm_tensor *t = muon_tensor(o, m, i, &g, &r, &c);
        if (!t) continue;
        dm_retract_init(o->radius + o->slice_off[i], o->scale + o->slice_off[i], P + t->offset,
                        g->slices, r, c);
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory: Muon's momentum and scratch need %.1f MiB",
             (o->n + biggest + work) * sizeof(float) / (double)(1 << 20));
    return 1;
}

void dm_muon_free(dm_optim *o) {
    dm_onednn_free(o->dnn);
    free(o->mom);
    free(o->upd);
    free(o->ns_work);
    free(o->slice_off);
    free(o->radius);
    free(o->scale);
}

void dm_muon_update(dm_optim *o, dm_model *m, int i, float lr, float gscale, long step) {
    const dm_config *c = &o->cfg;
    const dm_tensor *t = dm_model_tensor(m, i);
    const dm_group *g = &o->groups[i];
    float *W = dm_model_params(m) + t->offset;
    const float *G = dm_model_grads(m) + t->offset;
    float *mom = o->mom + t->offset, *u = o->upd;
    size_t n = t->numel;
    float beta = c->muon_momentum;
    int r, cols;
    slice_shape(t, g, &r, &cols);

#pragma omp parallel for schedule(static) if (n > 1 << 15)
    for (size_t j = 0; j < n; j++) {
        float gj = G[j] * gscale;
        mom[j] = beta * mom[j] + (1.0f - beta) * gj;
        u[j] = (1.0f - beta) * gj + beta * mom[j];
    }
    if (o->dnn)
        DM_TIMED(o->atlas, "ns (bf16)", dm_ns_flops(g->slices, r, cols, c->ns),
                 dm_ns_bf16(u, u, g->slices, r, cols, c->ns, o->ns_work, o->dnn));
    else
        DM_TIMED(o->atlas, "ns", dm_ns_flops(g->slices, r, cols, c->ns),
                 dm_ns(u, u, g->slices, r, cols, c->ns, o->ns_work));
    float step_scale = lr * sqrtf(fmaxf(1.0f, (float)r / (float)cols));
    float decay = 1.0f - lr * g->wd;
#pragma omp parallel for schedule(static) if (n > 1 << 15)
    for (size_t j = 0; j < n; j++) W[j] = W[j] * decay - step_scale * u[j];

    if (c->retract != DM_RETRACT_OFF && step % c->retract_every == 0) {
        const float *R = o->radius + o->slice_off[i], *S = o->scale + o->slice_off[i];
        if (c->retract == DM_RETRACT_SPHERE)
            DM_TIMED(o->atlas, "retract", 0, dm_retract_sphere(W, R, g->slices, r, cols));
        else
            DM_TIMED(o->atlas, "retract", 0,
                     dm_retract_stiefel(W, S, g->slices, r, cols, o->ns_work, NULL));
    }
}

int dm_muon_state(const dm_optim *o, dm_optim_buf *out, int max) {
    if (!o->mom || max < 3) return 0;
    out[0] = (dm_optim_buf){"muon_momentum", o->mom, o->n};
    out[1] = (dm_optim_buf){"retract_radius", o->radius, (size_t)o->n_slices};
    out[2] = (dm_optim_buf){"retract_scale", o->scale, (size_t)o->n_slices};
    return 3;
}
