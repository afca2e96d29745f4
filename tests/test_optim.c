/* test_optim.c — the optimizer as wired into the model: parameter groups, the Muon update
 * against NS directly, retraction cadence and norms, the lr schedule, clipping. The NS and
 * retraction kernels themselves: test_ns.c, test_retract.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "model/host.h"
#include "ops/backend.h"
#include "optim/optim.h"
#include "backends/cpu/kernels/ns.h"
#include "ref/normuon_ref.h"
#include "ref/optim_ref.h"
#include "base/rng.h"

TEST(cfg_retract_every_default_is_one) {
    dm_config c;
    dm_config_default(&c);
    CHECK(c.retract_every == 1);
    CHECK(c.optimizer == DM_OPT_MUON);
    CHECK(c.ns_headwise == DM_HEADWISE_QK);
}

static dm_config tiny(void) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32;
    c.n_layer = 1;
    c.n_head = 2;
    c.head_dim = 16;
    c.gate_rank = 8;
    c.warmup_steps = 0;
    c.grad_clip = 0;
    return c;
}

static void fill_grads(dm_model *m, uint64_t seed) {
    t_fill_normal(dm_model_grads(m), dm_model_num_params(m), seed, 0.01f);
}

TEST(optim_groups) {
    dm_config c = tiny();
    char err[256];
    for (int hw = 0; hw < 2; hw++) {
        c.ns_headwise = hw ? DM_HEADWISE_NONE : DM_HEADWISE_QK;
        dm_model *m = dm_model_create(&c, err, sizeof err);
        dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
        for (int i = 0; i < dm_model_num_tensors(m); i++) {
            const dm_tensor *t = dm_model_tensor(m, i);
            const dm_group *g = dm_optim_group(o, i);
            const char *n = t->name;
            int hidden = strstr(n, "w_q") || strstr(n, "w_k") || strstr(n, "w_v") ||
                         strstr(n, "w_o") || strstr(n, "w_f1") || strstr(n, "w_f2") ||
                         strstr(n, "w_g1") || strstr(n, "w_g2") || strstr(n, "mlp.");
            CHECKF(g->kind == (hidden ? DM_GROUP_MUON : DM_GROUP_ADAMW), "%s: optimizer", n);
            int qk = strstr(n, "w_q") || strstr(n, "w_k");
            CHECKF(g->slices == (qk && !hw ? c.n_head : 1), "%s: %d slices", n, g->slices);
            int nodecay = strstr(n, "norm") || strstr(n, "a_log") || strstr(n, "dt_bias") ||
                          strstr(n, "b_g2");
            CHECKF((t->flags & DM_P_NO_DECAY) == (nodecay ? DM_P_NO_DECAY : 0u), "%s: decay flag", n);
        }
        dm_optim_free(o);
        dm_model_free(m);
    }
    c.optimizer = DM_OPT_ADAMW;
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    for (int i = 0; i < dm_model_num_tensors(m); i++) CHECK(dm_optim_group(o, i)->kind == DM_GROUP_ADAMW);
    dm_optim_free(o);
    dm_model_free(m);
}

/* One Muon step with momentum 0 is W - lr * sqrt(max(1, rows/cols)) * NS(g), per slice. */
TEST(muon_update_matches_ns) {
    dm_config c = tiny();
    c.muon_momentum = 0.0f;
    c.retract = DM_RETRACT_OFF;
    c.ns_precision = DM_PRECISION_FP32; /* compared with the fp32 dm_ns */
    c.lr_schedule = DM_SCHED_CONSTANT;
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    fill_grads(m, 3);
    size_t np = dm_model_num_params(m);
    float *before = t_alloc(np);
    memcpy(before, dm_model_params(m), np * sizeof(float));
    dm_optim_step(o, m, 5);
    const char *names[] = {"layers.0.mixer.w_q", "layers.0.mlp.w_gate", "layers.0.mlp.w_down",
                           "layers.0.mixer.w_f1"};
    for (int k = 0; k < 4; k++) {
        const dm_tensor *t = dm_model_find(m, names[k]);
        const dm_group *g = dm_optim_group(o, (int)(t - dm_model_tensor(m, 0)));
        int rows = t->shape[0] / g->slices, cols = t->shape[1];
        float *u = t_alloc(t->numel), *work = t_alloc(dm_ns_work(g->slices, rows, cols));
        dm_ns(u, dm_model_grads(m) + t->offset, g->slices, rows, cols, c.ns, work);
        double s = c.muon_lr * sqrt(fmax(1.0, (double)rows / cols)), err2 = 0, ref2 = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double want = before[t->offset + j] - s * u[j];
            double got = dm_model_params(m)[t->offset + j];
            err2 += (want - got) * (want - got);
            ref2 += (want - before[t->offset + j]) * (want - before[t->offset + j]);
        }
        printf("  %-22s %d slice(s) of %dx%d: update rel err %.2e\n", names[k], g->slices, rows,
               cols, sqrt(err2 / ref2));
        CHECKF(sqrt(err2 / ref2) < 1e-5, "%s: Muon update differs from NS", names[k]);
        free(u);
        free(work);
    }
    free(before);
    dm_optim_free(o);
    dm_model_free(m);
}

/* Two whole Muon steps with NorMuon and cautious weight decay (momentum 0, so each step's
 * update is NS(g)) against the float64 chain on the same NS output: per slice, the row
 * moments (ref/normuon_ref.c, from zero) and the cautious update
 * (dm_muon_apply_cautious_ref), the weights carried from step to step. The update matches
 * to 1e-5 relative; and NorMuon changed it (its rows are not Muon's plain NS rows), and
 * the cautious mask left some weights undecayed. */
TEST(normuon_step_matches_float64_chain) {
    dm_config c = tiny();
    c.muon_momentum = 0.0f;
    c.retract = DM_RETRACT_OFF;
    c.ns_precision = DM_PRECISION_FP32; /* compared with the fp32 dm_ns */
    c.lr_schedule = DM_SCHED_CONSTANT;
    c.muon_norm = DM_MUON_NORM_NEURON;
    c.normuon_beta2 = 0.9f;
    c.cautious_wd = 1;
    c.weight_decay = 2.0f; /* large, so the mask shows in the weights */
    char err[256];
    CHECKF(dm_config_validate(&c, err, sizeof err) == 0, "%s", err);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    CHECKF(m && o, "%s", err);
    if (!m || !o) return;
    fill_grads(m, 7);
    size_t np = dm_model_num_params(m);
    float *before = t_alloc(np);
    memcpy(before, dm_model_params(m), np * sizeof(float));
    dm_optim_step(o, m, 0);
    dm_optim_step(o, m, 1);
    const char *names[] = {"layers.0.mixer.w_q", "layers.0.mlp.w_gate", "layers.0.mlp.w_down",
                           "layers.0.mixer.w_f1"};
    for (int k = 0; k < 4; k++) {
        const dm_tensor *t = dm_model_find(m, names[k]);
        const dm_group *g = dm_optim_group(o, (int)(t - dm_model_tensor(m, 0)));
        int rows = t->shape[0] / g->slices, cols = t->shape[1];
        size_t nr = (size_t)g->slices * rows;
        float *O = t_alloc(t->numel), *x = t_alloc(t->numel), *plain = t_alloc(t->numel);
        float *w = t_alloc(t->numel), *v = t_alloc(nr);
        float *work = t_alloc(dm_ns_work(g->slices, rows, cols));
        dm_ns(O, dm_model_grads(m) + t->offset, g->slices, rows, cols, c.ns, work);
        memcpy(w, before + t->offset, t->numel * sizeof(float));
        float lr = c.muon_lr, step = lr * sqrtf(fmaxf(1.0f, (float)rows / (float)cols));
        size_t kept = 0;
        for (int s = 0; s < 2; s++) {
            memcpy(x, O, t->numel * sizeof(float));
            dm_normuon_ref(x, v, g->slices, rows, cols, c.normuon_beta2, 1e-8f);
            if (s == 0)
                for (size_t j = 0; j < t->numel; j++) kept += x[j] * w[j] < 0;
            dm_muon_apply_ref(w, w, x, t->numel, 1.0f - lr * c.weight_decay, step, 1);
        }
        /* the same two steps with plain Muon's rows (no normalisation), for contrast */
        memcpy(plain, before + t->offset, t->numel * sizeof(float));
        for (int s = 0; s < 2; s++)
            dm_muon_apply_ref(plain, plain, O, t->numel, 1.0f - lr * c.weight_decay, step, 1);
        double err2 = 0, ref2 = 0, off2 = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double want = w[j], got = dm_model_params(m)[t->offset + j];
            double d0 = want - before[t->offset + j];
            err2 += (want - got) * (want - got);
            ref2 += d0 * d0;
            off2 += ((double)plain[j] - want) * ((double)plain[j] - want);
        }
        printf("  %-22s %d slice(s) of %dx%d: update rel err %.2e, NorMuon moved it %.2e, "
               "%zu of %zu weights undecayed at step 1\n",
               names[k], g->slices, rows, cols, sqrt(err2 / ref2), sqrt(off2 / ref2), kept,
               t->numel);
        CHECKF(sqrt(err2 / ref2) < 1e-5, "%s: the NorMuon step differs from the chain",
               names[k]);
        CHECKF(sqrt(off2 / ref2) > 1e-3, "%s: NorMuon left the update as plain Muon's",
               names[k]);
        CHECKF(kept > 0 && kept < t->numel, "%s: the cautious mask held everywhere or nowhere",
               names[k]);
        free(O), free(x), free(plain), free(w), free(v), free(work);
    }
    /* the moments are state: one per row of each slice, in the checkpoint's buffers */
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    int nb = dm_optim_state(o, bufs, DM_OPTIM_MAX_BUFS);
    size_t nv = 0, rows = 0;
    for (int i = 0; i < nb; i++)
        if (!strcmp(bufs[i].name, "normuon_v") && bufs[i].optional) nv = bufs[i].n;
    for (int i = 0; i < dm_model_num_tensors(m); i++)
        if (dm_optim_group(o, i)->kind == DM_GROUP_MUON) rows += dm_model_tensor(m, i)->shape[0];
    CHECKF(nv == rows && rows > 0, "normuon_v holds %zu floats, the Muon rows are %zu", nv, rows);
    /* and the memory report counts them */
    dm_config plain = c;
    plain.muon_norm = DM_MUON_NORM_NONE;
    dm_optim *op = dm_optim_create(m, &plain, err, sizeof err);
    dm_optim_mem with, without;
    dm_optim_memory(o, &with);
    dm_optim_memory(op, &without);
    CHECKF(with.state == without.state + rows * sizeof(float),
           "optimizer state %zu bytes with NorMuon, %zu without", with.state, without.state);
    dm_optim_free(op);
    free(before);
    dm_optim_free(o);
    dm_model_free(m);
}

/* Steps off the retraction cadence are bitwise equal to a run with retraction off; steps
 * on it put every slice back at its radius. */
TEST(retract_off_cadence_is_bitwise_off) {
    char err[256];
    for (int mode = 0; mode < 2; mode++) {
        dm_config on = tiny(), off = tiny();
        on.retract = mode ? DM_RETRACT_STIEFEL : DM_RETRACT_SPHERE;
        on.retract_every = 3;
        off.retract = DM_RETRACT_OFF;
        dm_model *ma = dm_model_create(&on, err, sizeof err), *mb = dm_model_create(&off, err, sizeof err);
        dm_optim *oa = dm_optim_create(ma, &on, err, sizeof err), *ob = dm_optim_create(mb, &off, err, sizeof err);
        size_t np = dm_model_num_params(ma);
        for (long step = 1; step <= 2; step++) { /* 1, 2: off the cadence of 3 */
            fill_grads(ma, 10 + step);
            fill_grads(mb, 10 + step);
            dm_optim_step(oa, ma, step);
            dm_optim_step(ob, mb, step);
        }
        CHECKF(memcmp(dm_model_params(ma), dm_model_params(mb), np * sizeof(float)) == 0,
               "%s every 3: steps 1, 2 differ from retraction off", mode ? "stiefel" : "sphere");
        fill_grads(ma, 20);
        fill_grads(mb, 20);
        dm_optim_step(oa, ma, 3);
        dm_optim_step(ob, mb, 3);
        CHECK(memcmp(dm_model_params(ma), dm_model_params(mb), np * sizeof(float)) != 0);
        dm_optim_free(oa);
        dm_optim_free(ob);
        dm_model_free(ma);
        dm_model_free(mb);
    }
}

TEST(retract_sphere_keeps_radius_per_slice) {
    dm_config c = tiny();
    c.retract = DM_RETRACT_SPHERE;
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    const dm_tensor *wq = dm_model_find(m, "layers.0.mixer.w_q");
    const dm_tensor *wo = dm_model_find(m, "layers.0.mixer.w_o");
    /* make the two heads of W_q different sizes, so a whole-matrix radius would be wrong */
    float *p = dm_model_params(m) + wq->offset;
    for (size_t j = 0; j < wq->numel / 2; j++) p[j] *= 3.0f;
    double r0 = dm_frob_norm(p, wq->numel / 2), r1 = dm_frob_norm(p + wq->numel / 2, wq->numel / 2);
    double ro = dm_frob_norm(dm_model_params(m) + wo->offset, wo->numel);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    for (long step = 0; step < 4; step++) {
        fill_grads(m, 30 + step);
        dm_optim_step(o, m, step);
    }
    p = dm_model_params(m) + wq->offset;
    double n0 = dm_frob_norm(p, wq->numel / 2), n1 = dm_frob_norm(p + wq->numel / 2, wq->numel / 2);
    double no = dm_frob_norm(dm_model_params(m) + wo->offset, wo->numel);
    printf("  head radii %.6f %.6f -> %.6f %.6f; w_o %.6f -> %.6f\n", r0, r1, n0, n1, ro, no);
    CHECK(fabs(n0 / r0 - 1) < 1e-6 && fabs(n1 / r1 - 1) < 1e-6 && fabs(no / ro - 1) < 1e-6);
    dm_optim_free(o);
    dm_model_free(m);
}

TEST(lr_schedule_and_clip) {
    dm_config c = tiny();
    c.steps = 100;
    c.warmup_steps = 10;
    c.min_lr_frac = 0.1f;
    CHECK(fabsf(dm_lr_factor(&c, 0) - 0.1f) < 1e-6f);
    CHECK(fabsf(dm_lr_factor(&c, 9) - 1.0f) < 1e-6f);
    CHECK(fabsf(dm_lr_factor(&c, 10) - 1.0f) < 1e-6f);
    CHECK(fabsf(dm_lr_factor(&c, 55) - 0.55f) < 1e-3f); /* cosine midpoint */
    CHECK(fabsf(dm_lr_factor(&c, 100) - 0.1f) < 1e-6f);
    c.lr_schedule = DM_SCHED_WSD;
    CHECK(fabsf(dm_lr_factor(&c, 70) - 1.0f) < 1e-6f);
    CHECK(fabsf(dm_lr_factor(&c, 100) - 0.1f) < 1e-6f);
    /* clipping scales the gradient by clip/norm before the update: visible in AdamW's
     * first moment after one step, m = (1 - beta1) * g * clip / norm */
    char err[256];
    c.optimizer = DM_OPT_ADAMW;
    c.grad_clip = 0.5f;
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    fill_grads(m, 4);
    double n = dm_grad_norm(m), reported = dm_optim_step(o, m, 0);
    CHECK(n == reported && n > 0.5);
    dm_optim_buf st[DM_OPTIM_MAX_BUFS];
    dm_optim_state(o, st, DM_OPTIM_MAX_BUFS);
    CHECK(strcmp(st[0].name, "adam_m") == 0);
    double worst = 0;
    const float *m1 = dm_backend_host_view(dm_model_backend(m), st[0].data); /* the cpu's */
    for (size_t i = 0; i < dm_model_num_params(m); i++) {
        double want = (1 - c.beta1) * dm_model_grads(m)[i] * (0.5 / n);
        worst = fmax(worst, fabs(m1[i] - want) / (fabs(want) + 1e-12));
    }
    printf("  grad norm %.4f clipped to 0.5: first-moment rel err %.2e\n", n, worst);
    CHECK(worst < 1e-5);
    dm_optim_free(o);
    dm_model_free(m);
}
