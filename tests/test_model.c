/* test_model.c — the whole model: parameter table, init, loss at init, gradient check of
 * every parameter tensor against finite differences of the double oracle, determinism,
 * and config validation. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "oracle_model.h"
#include "base/rng.h"
#include "optim/optim.h"

static void tokens_random(uint8_t *tok, size_t n, uint64_t seed) {
    dm_rng r;
    dm_rng_seed(&r, seed, 99);
    for (size_t i = 0; i < n; i++) tok[i] = (uint8_t)dm_rng_below(&r, 256);
}

static void tokens_text(uint8_t *tok, size_t n) {
    static const char txt[] =
        "In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep. ";
    for (size_t i = 0; i < n; i++) tok[i] = (uint8_t)txt[i % (sizeof txt - 1)];
}

static dm_config tiny(int mixer) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.head_dim = 8;
    c.gate_rank = 4;
    c.conv_size = 3;
    c.mixer = mixer;
    c.seed = 7;
    c.precision = DM_PRECISION_FP32; /* fp32 numerics against the double oracle */
    return c;
}

TEST(model_default_param_count) {
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "create: %s", err);
    if (!m) return;
    printf("  d2 parameters: %zu in %d tensors\n", dm_model_num_params(m), dm_model_num_tensors(m));
    CHECK(dm_model_num_params(m) == 1976712);
    CHECK(dm_config_mlp_hidden(&c) == 768);
    /* tensors tile the buffer exactly, in order */
    size_t off = 0;
    for (int i = 0; i < dm_model_num_tensors(m); i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        CHECKF(t->offset == off, "%s offset %zu, expected %zu", t->name, t->offset, off);
        off += t->numel;
    }
    CHECK(off == dm_model_num_params(m));
    const dm_tensor *wq = dm_model_find(m, "layers.1.mixer.w_q");
    CHECK(wq && wq->shape[0] == 256 && wq->shape[1] == 256 && (wq->flags & DM_P_HEADWISE));
    const dm_tensor *al = dm_model_find(m, "layers.0.mixer.a_log");
    CHECK(al && al->numel == 4 && (al->flags & DM_P_NO_DECAY));
    if (al) {
        const float *p = dm_model_params(m) + al->offset;
        for (int h = 0; h < 4; h++) CHECK(p[h] >= 0.0f && p[h] <= logf(16.0f));
    }
    const dm_tensor *dt = dm_model_find(m, "layers.0.mixer.dt_bias");
    if (dt) { /* softplus(dt_bias) in [1e-3, 0.1] */
        const float *p = dm_model_params(m) + dt->offset;
        for (size_t i = 0; i < dt->numel; i++) {
            double sp = log1p(exp(p[i]));
            CHECKF(sp >= 0.99e-3 && sp <= 0.101, "softplus(dt_bias)=%g", sp);
        }
    }
    dm_model_free(m);
}

TEST(model_loss_at_init_near_ln256) {
    dm_config c;
    dm_config_default(&c);
    dm_model *m = dm_model_create(&c, NULL, 0);
    int B = 2, T = 128;
    uint8_t *tok = malloc((size_t)B * (T + 1));
    tokens_text(tok, (size_t)B * (T + 1));
    float loss = dm_model_forward(m, tok, B, T, NULL);
    printf("  loss at init %.5f, ln 256 = %.5f\n", loss, log(256.0));
    CHECKF(fabs(loss - log(256.0)) < 0.03 * log(256.0), "loss %g", loss);
    free(tok);
    dm_model_free(m);
}

struct oracle_ctx { const dm_model *m; double *pd; uint8_t *tok; int B, T; };
static double oracle_loss(void *p) {
    struct oracle_ctx *c = p;
    return o_model_loss(c->m, c->pd, c->tok, c->B, c->T, NULL);
}

/* Float forward vs the double oracle, then every parameter tensor's gradient vs central
 * differences of the oracle loss. Reports the worst relative error per tensor. */
static void gradcheck(dm_config c, int B, int T, double tol) {
    char err[DM_ERRLEN];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "create: %s", err);
    if (!m) return;
    /* perturb norms, biases and gates away from their init so their gradients are generic */
    float *p = dm_model_params(m);
    dm_rng r;
    dm_rng_seed(&r, 5, 5);
    for (int i = 0; i < dm_model_num_tensors(m); i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        if (t->flags & DM_P_NO_DECAY)
            for (size_t j = 0; j < t->numel; j++)
                p[t->offset + j] += (float)(0.1 * dm_rng_normal(&r));
        else
            for (size_t j = 0; j < t->numel; j++) p[t->offset + j] *= 10.0f; /* O(1) signals */
    }
    size_t np = dm_model_num_params(m);
    uint8_t *tok = malloc((size_t)B * (T + 1));
    tokens_random(tok, (size_t)B * (T + 1), 3);
    float loss = dm_model_forward(m, tok, B, T, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    const float *grad = dm_model_grads(m);

    double *pd = t_allocd(np);
    t_to_double(pd, p, np);
    double oloss = o_model_loss(m, pd, tok, B, T, NULL);
    printf("  loss float %.9f oracle %.12f\n", loss, oloss);
    CHECKF(fabs(loss - oloss) <= 1e-5 * fabs(oloss), "forward: float %.9g vs oracle %.12g", loss,
           oloss);

    struct oracle_ctx cx = {m, pd, tok, B, T};
    double worst = 0;
    for (int i = 0; i < dm_model_num_tensors(m); i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        size_t n = t->numel, samples = n <= 48 ? n : 24;
        double num = 0, den = 0, maxerr = 0, maxg = 0;
        for (size_t s = 0; s < samples; s++) {
            size_t j = n <= 48 ? s : (size_t)dm_rng_below(&r, n);
            size_t at = t->offset + j;
            double h = 1e-5 * fmax(1.0, fabs(pd[at]));
            double g = t_fd(oracle_loss, &cx, pd, at, h), e = grad[at] - g;
            num += e * e;
            den += g * g;
            if (fabs(e) > maxerr) maxerr = fabs(e);
            if (fabs(g) > maxg) maxg = fabs(g);
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        printf("  %-26s rel-rms err %.2e  (max|g| %.2e, %zu of %zu entries)\n", t->name, rel, maxg,
               samples, n);
        CHECKF(rel <= tol, "%s: gradient rel err %.3e > %.1e", t->name, rel, tol);
        if (rel > worst) worst = rel;
    }
    printf("  worst tensor rel err %.3e\n", worst);
    free(pd);
    free(tok);
    dm_model_free(m);
}

TEST(model_gradcheck_kda) { gradcheck(tiny(DM_MIXER_KDA), 2, 9, 1e-4); }
TEST(model_gradcheck_gdn) { gradcheck(tiny(DM_MIXER_GDN), 2, 9, 1e-4); }
TEST(model_gradcheck_kda_lower_bound_tied) {
    dm_config c = tiny(DM_MIXER_KDA);
    c.gate_lower_bound = -5.0f;
    c.tie_embeddings = 1;
    c.n_layer = 1;
    gradcheck(c, 3, 5, 1e-4);
}

static float run_once(const dm_config *c, const uint8_t *tok, int B, int T, float *grads_out) {
    dm_model *m = dm_model_create(c, NULL, 0);
    float loss = dm_model_forward(m, tok, B, T, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    memcpy(grads_out, dm_model_grads(m), dm_model_num_params(m) * sizeof(float));
    dm_model_free(m);
    return loss;
}

/* the same model, batch and gradients at 1, 2, 3 and 8 threads (8 oversubscribes 2 cores),
 * over both GEMM backends; and another seed gives another init */
TEST(model_determinism_seed_and_threads) {
    static const int NT[] = {2, 1, 3, 8};
    static const int GEMM[] = {DM_GEMM_OPENBLAS, DM_GEMM_ONEDNN};
    dm_config c;
    dm_config_default(&c);
    c.n_layer = 1;
    int B = 4, T = 64;
    uint8_t *tok = malloc((size_t)B * (T + 1));
    tokens_text(tok, (size_t)B * (T + 1));
    dm_model *probe = dm_model_create(&c, NULL, 0);
    size_t np = dm_model_num_params(probe);
    dm_model_free(probe);
    float *g0 = t_alloc(np), *g = t_alloc(np);
    int saved = omp_get_max_threads();
    for (int b = 0; b < 2; b++) {
        c.gemm = GEMM[b];
        float l0 = 0;
        for (int i = 0; i < 4; i++) {
            c.threads = NT[i]; /* the model's policy sets its pool */
            float l = run_once(&c, tok, B, T, i ? g : g0);
            CHECK(omp_get_max_threads() == NT[i]);
            if (i == 0) {
                l0 = l;
                CHECK(run_once(&c, tok, B, T, g) == l0 && !memcmp(g, g0, np * sizeof(float)));
                continue;
            }
            CHECKF(memcmp(&l, &l0, sizeof l) == 0, "gemm=%s, %d vs 2 threads: loss %.9g vs %.9g",
                   b ? "onednn" : "openblas", NT[i], l, l0);
            CHECKF(memcmp(g, g0, np * sizeof(float)) == 0,
                   "gemm=%s, %d vs 2 threads: gradients differ", b ? "onednn" : "openblas", NT[i]);
        }
        printf("  gemm=%s: loss %.9g, the same bits at 1, 2, 3, 8 threads\n",
               b ? "onednn" : "openblas", l0);
    }
    dm_set_threads(saved);
    /* another seed gives another init */
    float l1 = run_once(&c, tok, B, T, g);
    c.seed = 2;
    float l4 = run_once(&c, tok, B, T, g);
    CHECK(l4 != l1);
    free(g0); free(g); free(tok);
}

static void expect_invalid(dm_config c, const char *field) {
    char err[DM_ERRLEN] = "";
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m == NULL, "config with bad %s accepted", field);
    CHECKF(strstr(err, field) != NULL, "error '%s' does not name %s", err, field);
    printf("  %s -> %s\n", field, err);
    dm_model_free(m);
}

TEST(config_validation_names_field) {
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN];
    CHECK(dm_config_validate(&c, err, sizeof err) == 0);
    dm_config b = c; b.n_head = 0; expect_invalid(b, "n_head");
    b = c; b.head_dim = 48; expect_invalid(b, "head_dim");
    b = c; b.d_model = -256; expect_invalid(b, "d_model");
    b = c; b.n_layer = -1; expect_invalid(b, "n_layer");
    b = c; b.gate_rank = 0; expect_invalid(b, "gate_rank");
    b = c; b.conv_size = 0; expect_invalid(b, "conv_size");
    b = c; b.gate_lower_bound = 1.0f; expect_invalid(b, "gate_lower_bound");
    b = c; b.chunk_size = 48; expect_invalid(b, "chunk_size");
    b = c; b.mixer = 7; expect_invalid(b, "mixer");
    /* --set: unknown key, bad value, good value */
    CHECK(dm_config_set(&c, "no_such_key", "1", err, sizeof err) != 0 && strstr(err, "no_such_key"));
    CHECK(dm_config_set(&c, "mixer", "mamba", err, sizeof err) != 0 && strstr(err, "kda|gdn"));
    CHECK(dm_config_set(&c, "n_head", "-3", err, sizeof err) != 0 && strstr(err, "n_head"));
    CHECK(dm_config_set(&c, "n_head", "4x", err, sizeof err) != 0);
    CHECK(dm_config_set(&c, "mixer", "gdn", err, sizeof err) == 0 && c.mixer == DM_MIXER_GDN);
    char buf[64];
    CHECK(dm_config_get(&c, "mixer", buf, sizeof buf) == 0 && strcmp(buf, "gdn") == 0);
}

/* One model through batches of changing shape gives what a fresh model gives for each:
 * the arena is laid out anew for every (B, T) (the chunked core's state is per chunk, so
 * B*T alone does not size it). Under ASan this also checks the regions' bounds. */
TEST(model_changing_batch_shapes) {
    dm_config c = tiny(DM_MIXER_KDA);
    c.chunk_size = 16;
    dm_model *m = dm_model_create(&c, NULL, 0);
    const int shapes[][2] = {{2, 64}, {32, 4}, {1, 100}, {16, 17}, {2, 64}};
    uint8_t tok[4096];
    tokens_random(tok, sizeof tok, 5);
    for (int i = 0; i < 5; i++) {
        int B = shapes[i][0], T = shapes[i][1];
        float l1 = dm_model_forward(m, tok, B, T, NULL);
        dm_model_zero_grad(m);
        dm_model_backward(m);
        float g1 = dm_model_grads(m)[dm_model_find(m, "layers.0.mixer.w_q")->offset + 3];
        dm_model *f = dm_model_create(&c, NULL, 0);
        float l2 = dm_model_forward(f, tok, B, T, NULL);
        dm_model_backward(f);
        float g2 = dm_model_grads(f)[dm_model_find(f, "layers.0.mixer.w_q")->offset + 3];
        CHECKF(memcmp(&l1, &l2, sizeof l1) == 0 && memcmp(&g1, &g2, sizeof g1) == 0,
               "%d x %d: loss %.9g vs fresh %.9g", B, T, l1, l2);
        dm_model_free(f);
    }
    dm_model_free(m);
}

/* No cap on the model but memory: 32 layers (675 tensors; the parameter table once
 * stopped at 512) build, and a few optimizer steps on one batch lower its loss. */
TEST(model_32_layers_builds_and_trains) {
    dm_config c = tiny(DM_MIXER_KDA);
    c.n_layer = 32;
    c.warmup_steps = 0;
    char err[DM_ERRLEN];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "create with n_layer=32: %s", err);
    if (!m) return;
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    CHECKF(o != NULL, "optimizer: %s", err);
    if (!o) { dm_model_free(m); return; }
    int B = 2, T = 24;
    uint8_t tok[2 * 25];
    tokens_text(tok, sizeof tok);
    float first = NAN, last = NAN;
    for (int s = 0; s < 8; s++) {
        float l = dm_model_forward(m, tok, B, T, NULL);
        dm_model_zero_grad(m);
        dm_model_backward(m);
        dm_optim_step(o, m, s);
        if (s == 0) first = l;
        last = l;
    }
    printf("  n_layer 32: %d tensors, %zu parameters; loss %.4f -> %.4f in 8 steps\n",
           dm_model_num_tensors(m), dm_model_num_params(m), first, last);
    CHECK(dm_model_num_tensors(m) > 512);
    CHECKF(isfinite(last) && last < first, "loss %.4f -> %.4f", first, last);
    dm_optim_free(o);
    dm_model_free(m);
}
