/* optim.c — parameter groups, lr schedule, clipping, AdamW, and the dispatch of Muon
 * groups to muon.c (muon.h). What they compute runs through the op layer (ops/optim_ops.h). */
#include "optim/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim_internal.h"

void dm_optim_set_atlas(dm_optim *o, dm_atlas *atlas) {
    o->atlas = atlas;
    if (o->muon) o->muon->atlas = atlas;
}

const dm_group *dm_optim_group(const dm_optim *o, int tensor) { return &o->groups[tensor]; }

dm_optim *dm_optim_create(dm_model *m, const dm_config *c, char *err, size_t errlen) {
    dm_optim *o = calloc(1, sizeof *o);
    if (!o) goto oom;
    o->cfg = *c;
    o->be = dm_model_backend(m);
    o->n = dm_model_num_params(m);
    o->n_tensors = dm_model_num_tensors(m);
    o->groups = calloc((size_t)o->n_tensors, sizeof *o->groups);
    o->m1 = dm_backend_alloc(o->be, o->n * sizeof(float));
    o->m2 = dm_backend_alloc(o->be, o->n * sizeof(float));
    o->norm = dm_backend_alloc(o->be, sizeof(double));
    o->gscale = dm_backend_alloc(o->be, sizeof(float));
    o->hyper = dm_backend_alloc(o->be, (size_t)DM_ADAM_HYPER * o->n_tensors * sizeof(float));
    o->hyper_h = calloc((size_t)DM_ADAM_HYPER * o->n_tensors, sizeof(float));
    if (!o->groups || !o->m1 || !o->m2 || !o->norm || !o->gscale || !o->hyper || !o->hyper_h)
        goto oom;
    int any_muon = 0;
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        dm_group *g = &o->groups[i];
        int muon = c->optimizer == DM_OPT_MUON && (t->flags & DM_P_MATRIX) && t->ndim == 2;
        g->kind = muon ? DM_GROUP_MUON : DM_GROUP_ADAMW;
        g->lr = muon ? c->muon_lr : c->lr;
        g->wd = (t->flags & DM_P_NO_DECAY) ? 0.0f : c->weight_decay;
        g->slices = muon && (t->flags & DM_P_HEADWISE) && c->ns_headwise == DM_HEADWISE_QK
                        ? c->n_head : 1;
        any_muon |= muon;
    }
    if (any_muon && !(o->muon = dm_muon_create(&o->cfg, o->groups, m, err, errlen))) {
        dm_optim_free(o);
        return NULL;
    }
    return o;
oom:
    snprintf(err, errlen, "out of memory: the optimizer's AdamW moments need %.1f MiB",
             2.0 * dm_model_num_params(m) * sizeof(float) / (1 << 20));
    dm_optim_free(o);
    return NULL;
}

void dm_optim_free(dm_optim *o) {
    if (!o) return;
    dm_muon_free(o->muon);
    free(o->groups);
    dm_backend_release(o->be, o->m1);
    dm_backend_release(o->be, o->m2);
    dm_backend_release(o->be, o->norm);
    dm_backend_release(o->be, o->gscale);
    dm_backend_release(o->be, o->hyper);
    free(o->hyper_h);
    free(o);
}

void dm_optim_print_groups(const dm_optim *o, const dm_model *m, FILE *f) {
    fprintf(f, "%-26s %-11s %-6s %-9s %-8s %s\n", "tensor", "shape", "optim", "lr", "wd", "slices");
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        const dm_group *g = &o->groups[i];
        char shape[32];
        if (t->ndim == 2) snprintf(shape, sizeof shape, "%dx%d", t->shape[0], t->shape[1]);
        else snprintf(shape, sizeof shape, "%d", t->shape[0]);
        fprintf(f, "%-26s %-11s %-6s %-9.3g %-8.3g %d\n", t->name, shape,
                g->kind == DM_GROUP_MUON ? "muon" : "adamw", g->lr, g->wd, g->slices);
    }
}

/* the schedule over c->steps */
static double planned(const dm_config *c, long step) {
    double lo = c->min_lr_frac;
    if (step < c->warmup_steps) return (double)(float)((double)(step + 1) / c->warmup_steps);
    long decay = c->steps - c->warmup_steps;
    double p = decay > 0 ? (double)(step - c->warmup_steps) / decay : 1.0; /* 0..1 */
    if (p > 1) p = 1;
    switch (c->lr_schedule) {
    case DM_SCHED_CONSTANT: return 1.0;
    case DM_SCHED_WSD: /* flat, then linear decay over the last 20% of the steps */
        return p < 0.8 ? 1.0 : (double)(float)(1.0 - (1.0 - lo) * (p - 0.8) / 0.2);
    default: return (double)(float)(lo + (1.0 - lo) * 0.5 * (1.0 + cos(3.14159265358979323846 * p)));
    }
}

long dm_lr_cooldown_start(long steps) { return steps - (steps + 9) / 10; }

float dm_lr_factor(const dm_config *c, long step) {
    if (c->schedule_steps <= c->steps) return (float)planned(c, step);
    /* cut by a time budget: the schedule of schedule_steps, then from the cooldown's
     * first step a straight line from that schedule's lr down to min_lr_frac at the
     * last step */
    dm_config p = *c;
    p.steps = c->schedule_steps;
    long k = dm_lr_cooldown_start(c->steps);
    if (step < k) return (float)planned(&p, step);
    double f0 = planned(&p, k), q = (double)(step - k + 1) / (double)(c->steps - k);
    return (float)(f0 + (c->min_lr_frac - f0) * q);
}

double dm_grad_norm(const dm_model *m) {
    dm_model *mm = (dm_model *)m; /* the op layer counts the call */
    dm_backend *be = dm_model_backend(mm);
    double *d = dm_backend_alloc(be, sizeof(double)), norm = NAN;
    if (!d) return NAN;
    dm_op_grad_norm(dm_optim_ops(mm), d, NULL, dm_model_grad_mem(mm), dm_model_num_params(m), 0);
    dm_backend_to_host(be, &norm, d, sizeof norm);
    dm_backend_release(be, d);
    return norm;
}

void dm_optim_set_steps(dm_optim *o, int steps, int schedule_steps) {
    o->cfg.steps = steps;
    o->cfg.schedule_steps = schedule_steps;
}

void dm_optim_prepare(dm_optim *o, long step) {
    const dm_config *c = &o->cfg;
    float f = dm_lr_factor(c, step);
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_group *g = &o->groups[i];
        if (g->kind == DM_GROUP_ADAMW)
            dm_adam_hyper(o->hyper_h + (size_t)DM_ADAM_HYPER * i, g->lr * f, g->wd, c->beta1,
                          c->beta2, step + 1);
    }
    dm_backend_put(o->be, o->hyper, o->hyper_h,
                   (size_t)DM_ADAM_HYPER * o->n_tensors * sizeof(float));
    if (o->muon) dm_muon_prepare(o->muon, f);
}

int dm_optim_retracts(const dm_optim *o, long step) {
    return o->muon && o->cfg.retract != DM_RETRACT_OFF && step % o->cfg.retract_every == 0;
}

int dm_optim_enqueue(dm_optim *o, dm_model *m, long step) {
    const dm_config *c = &o->cfg;
    const dm_bf *gscale = o->gscale; /* clipping on the backend: no wait for the host */
    dm_op_grad_norm(dm_optim_ops(m), o->norm, o->gscale, dm_model_grad_mem(m),
                    dm_model_num_params(m), c->grad_clip);
    dm_bf *P = dm_model_param_mem(m);
    const dm_bf *G = dm_model_grad_mem(m);
    /* AdamW: every rank updates every AdamW tensor (replicated state: a small share of
     * the parameters, elementwise; docs/scaling.md) */
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        const dm_group *g = &o->groups[i];
        if (g->kind == DM_GROUP_ADAMW)
            dm_op_adamw(dm_optim_ops(m), P + t->offset, o->m1 + t->offset, o->m2 + t->offset,
                        G + t->offset, t->numel, o->hyper + (size_t)DM_ADAM_HYPER * i,
                        c->beta1, c->beta2, c->adam_eps, gscale, c->cautious_wd);
    }
    return o->muon && dm_muon_step(o->muon, m, gscale, step) ? 1 : 0;
}

int dm_optim_step_queued(dm_optim *o, dm_model *m, long step) {
    dm_optim_prepare(o, step);
    return dm_optim_enqueue(o, m, step);
}

double dm_optim_norm(const dm_optim *o) {
    double norm;
    dm_backend_to_host(o->be, &norm, o->norm, sizeof norm);
    return norm;
}

const double *dm_optim_norm_mem(const dm_optim *o) { return o->norm; }

double dm_optim_step(dm_optim *o, dm_model *m, long step) {
    return dm_optim_step_queued(o, m, step) ? NAN : dm_optim_norm(o);
}

int dm_optim_set_comm(dm_optim *o, dm_comm *comm, char *err, size_t errlen) {
    return o->muon ? dm_muon_shard(o->muon, comm, err, errlen) : 0;
}

void dm_optim_shard_text(const dm_optim *o, char *buf, size_t n) {
    if (o->muon) dm_muon_shard_text(o->muon, buf, n);
    else snprintf(buf, n, "muon: none (optimizer adamw)");
}

int dm_optim_state(const dm_optim *o, dm_optim_buf *out, int max) {
    int k = 0;
    if (max < 2) return 0;
    out[k++] = (dm_optim_buf){"adam_m", o->m1, o->n, 0};
    out[k++] = (dm_optim_buf){"adam_v", o->m2, o->n, 0};
    return o->muon ? k + dm_muon_state(o->muon, out + k, max - k) : k;
}

int dm_optim_load(dm_optim *o, const char *name, const float *src, size_t n, char *err,
                  size_t errlen) {
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    int nb = dm_optim_state(o, bufs, DM_OPTIM_MAX_BUFS);
    for (int i = 0; i < nb; i++) {
        if (strcmp(bufs[i].name, name) != 0) continue;
        if (bufs[i].n != n) break;
        if (src) dm_backend_from_host(o->be, bufs[i].data, src, n * sizeof(float));
        else dm_backend_zero(o->be, bufs[i].data, n * sizeof(float));
        return 0;
    }
    snprintf(err, errlen, "optimizer state: tensor '%s' missing or of the wrong shape", name);
    return 1;
}

void dm_optim_memory(const dm_optim *o, dm_optim_mem *mem) {
    *mem = (dm_optim_mem){0};
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    int nb = dm_optim_state(o, bufs, DM_OPTIM_MAX_BUFS);
    for (int i = 0; i < nb; i++) mem->state += bufs[i].n * sizeof(float);
    if (o->muon) dm_muon_memory(o->muon, &mem->scratch, &mem->gather);
}
