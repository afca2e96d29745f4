/* test_optim_ops.c — the optimizer's computations as ops (ops/optim_ops.h): a training
 * step's gradient sum, norm, AdamW, momentum, Newton–Schulz, Muon update and retraction
 * are each counted in the dispatch table, timed in the atlas and, in verify mode, checked
 * against the reference within the fp32 bound; verify mode leaves the step's bits alone;
 * and each op computes what its kernel does, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "base/rng.h"
#include "backends/cpu/kernels/normuon.h"
#include "backends/cpu/kernels/ns.h"
#include "backends/cpu/kernels/optim.h"
#include "backends/cpu/kernels/retract.h"
#include "model/model.h"
#include "ops/optim_ops.h"
#include "optim/gradsum.h"
#include "optim/optim_internal.h"

/* the tiny model of test_dispatch.c, with the optimizer's settings of these tests:
 * clipping active (the gradient's scale reaches adamw and momentum), no warmup */
static dm_config small(int mixer, int retract) {
    static const char *const KV[][2] = {
        {"d_model", "64"}, {"n_layer", "2"}, {"n_head", "2"}, {"head_dim", "32"},
        {"gate_rank", "16"}, {"chunk_size", "16"}, {"precision", "fp32"},
        {"ns_precision", "fp32"}, {"grad_clip", "1e-3"}, {"warmup_steps", "0"}};
    dm_config c;
    char err[256];
    dm_config_default(&c);
    for (size_t i = 0; i < sizeof KV / sizeof KV[0]; i++)
        CHECKF(dm_config_set(&c, KV[i][0], KV[i][1], err, sizeof err) == 0, "%s", err);
    c.mixer = mixer;
    c.retract = retract;
    return c;
}

/* One training step of A = 2 micro-batches (the gradient sum, then the update), with
 * verify mode on or off, the atlas given or NULL. Returns the model, its optimizer in *o. */
static dm_model *train_step(dm_config c, int verify, dm_atlas *atlas, dm_optim **o) {
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (!m) return NULL;
    *o = dm_optim_create(m, &c, err, sizeof err);
    dm_gradsum *gs = dm_gradsum_create(m, 2, NULL, err, sizeof err);
    CHECKF(*o && gs, "%s", err);
    int B = 2, T = 32;
    uint8_t tok[2 * 33];
    dm_rng r;
    dm_rng_seed(&r, 7, 1);
    dm_model_set_atlas(m, atlas);
    dm_optim_set_atlas(*o, atlas);
    dm_model_set_verify(m, verify);
    for (int j = 0; j < 2; j++) {
        for (size_t i = 0; i < sizeof tok; i++) tok[i] = (uint8_t)dm_rng_below(&r, 256);
        dm_model_forward(m, tok, B, T, NULL);
        dm_model_zero_grad(m);
        dm_model_backward(m);
        CHECK(dm_gradsum_add(gs, j) == 0);
    }
    CHECK(dm_gradsum_finish(gs) == 0);
    CHECK(isfinite(dm_optim_step(*o, m, 0)));
    dm_model_set_verify(m, 0);
    dm_model_set_atlas(m, NULL);
    dm_gradsum_free(gs);
    return m;
}

/* the calls each optimizer op makes in one step of this model and optimizer */
static void expected_calls(const dm_optim *opt, const dm_model *m, int verify, long *want) {
    const dm_muon *o = opt->muon;
    int adamw = 0, lone = 0, shapes = 0;
    for (int i = 0; i < dm_model_num_tensors(m); i++)
        adamw += dm_optim_group(opt, i)->kind == DM_GROUP_ADAMW;
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        if (!u->stacked) {
            lone++;
            continue;
        }
        int first = 1;
        for (int b = 0; b < a; b++)
            first &= !(o->units[b].stacked && o->units[b].rows == u->rows &&
                       o->units[b].cols == u->cols);
        shapes += first;
    }
    memset(want, 0, sizeof(long) * DM_OP_COUNT);
    want[DM_OP_GRAD_ADD] = 2;
    want[DM_OP_GRAD_MEAN] = 1;
    want[DM_OP_GRAD_NORM] = 1;
    want[DM_OP_ADAMW] = adamw;
    want[DM_OP_MOMENTUM] = o->n_units;
    /* one call per stacked shape and per lone unit; in verify mode one per step of each */
    want[DM_OP_NS] = (shapes + lone) * (verify ? dm_op_ns_steps(o->cfg->ns) : 1);
    want[DM_OP_MUON_UPDATE] = o->n_units;
    want[DM_OP_RETRACT] = o->cfg->retract == DM_RETRACT_SPHERE ? o->n_units : shapes + lone;
}

TEST(optim_ops_counted_timed_verified) {
    static const int OPS[] = {DM_OP_GRAD_ADD, DM_OP_GRAD_MEAN, DM_OP_GRAD_NORM, DM_OP_ADAMW,
                              DM_OP_MOMENTUM, DM_OP_NS, DM_OP_MUON_UPDATE, DM_OP_RETRACT};
    for (int w = 0; w < 4; w++) {
        int v = w / 2, verify = !(w & 1); /* each model with verify mode on, then off */
        dm_config c = small(v ? DM_MIXER_GDN : DM_MIXER_KDA,
                            v ? DM_RETRACT_STIEFEL : DM_RETRACT_SPHERE);
        dm_atlas *atlas = calloc(1, sizeof *atlas);
        dm_optim *o = NULL;
        dm_model *m = train_step(c, verify, atlas, &o);
        if (!m || !o) return;
        const dm_ops *ops = &m->ops;
        long want[DM_OP_COUNT];
        expected_calls(o, m, verify, want);
        CHECK(o->muon->n_units > 0 && want[DM_OP_ADAMW] > 0);
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
            int op = OPS[k];
            const char *name = dm_op_name(op);
            CHECKF(ops->calls[op][DM_FWD] == want[op], "%s: %ld calls, want %ld", name,
                   ops->calls[op][DM_FWD], want[op]);
            CHECKF(ops->ran[op][DM_FWD][0] == want[op], "%s: %ld by %s", name,
                   ops->ran[op][DM_FWD][0], dm_op_impl_name(op, 0));
            double rel = ops->verify_op[op][DM_FWD];
            CHECKF(verify ? rel >= 0 && rel <= DM_VERIFY_BOUND : rel < 0,
                   "%s: verify %.3g against the reference", name, rel);
            long timed = 0;
            for (int i = 0; i < atlas->n_ops; i++)
                if (!strcmp(atlas->op[i].name, name) && atlas->op[i].dir &&
                    !strcmp(atlas->op[i].dir, "fwd"))
                    timed += atlas->op[i].calls;
            CHECKF(timed == want[op], "%s: %ld calls in the atlas, want %ld", name, timed, want[op]);
        }
        CHECK(ops->calls[DM_OP_NS_BF16][DM_FWD] == 0);
        /* the roofline has NS's products, one set per shape */
        int ns_sets = 0;
        for (int j = 0; j < atlas->n_gemm; j++) ns_sets += !strcmp(atlas->gemm[j].label, "ns");
        CHECK(ns_sets > 0);
        char table[8192];
        dm_model_dispatch_table(m, table, sizeof table);
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
            char row[48];
            snprintf(row, sizeof row, "%s.fwd", dm_op_name(OPS[k]));
            CHECKF(strstr(table, row) != NULL, "%s not in the dispatch table", row);
        }
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        atlas->steps = 1;
        dm_atlas_print(atlas, f);
        fclose(f);
        CHECK(text && strstr(text, "ns.fwd (openblas)") && strstr(text, "adamw.fwd (cpu)") &&
              strstr(text, "grad_norm.fwd (cpu)"));
        printf("  %s, retract %s, verify %s: %d units, %d NS calls\n%s", v ? "gdn" : "kda",
               v ? "stiefel" : "sphere", verify ? "on" : "off", o->muon->n_units,
               (int)want[DM_OP_NS], table);
        free(text);
        dm_optim_free(o);
        dm_model_free(m);
        free(atlas);
    }
}

/* verify mode runs the references beside the step; the step's bits stay those of a step
 * without it: parameters and every optimizer state buffer */
TEST(optim_ops_verify_leaves_the_step_alone) {
    for (int v = 0; v < 2; v++) {
        dm_config c = small(v ? DM_MIXER_GDN : DM_MIXER_KDA,
                            v ? DM_RETRACT_STIEFEL : DM_RETRACT_SPHERE);
        dm_optim *oa = NULL, *ob = NULL;
        dm_model *a = train_step(c, 0, NULL, &oa), *b = train_step(c, 1, NULL, &ob);
        if (!a || !b || !oa || !ob) return;
        size_t n = dm_model_num_params(a);
        CHECK(memcmp(dm_model_params(a), dm_model_params(b), n * sizeof(float)) == 0);
        dm_optim_buf sa[DM_OPTIM_MAX_BUFS], sb[DM_OPTIM_MAX_BUFS];
        int na = dm_optim_state(oa, sa, DM_OPTIM_MAX_BUFS), nb = dm_optim_state(ob, sb, DM_OPTIM_MAX_BUFS);
        CHECK(na == nb && na >= 3);
        for (int i = 0; i < na && i < nb; i++)
            CHECKF(sa[i].n == sb[i].n && !memcmp(sa[i].data, sb[i].data, sa[i].n * sizeof(float)),
                   "%s differs with verify on", sa[i].name);
        dm_optim_free(oa);
        dm_optim_free(ob);
        dm_model_free(a);
        dm_model_free(b);
    }
}

/* Each op is its kernel, bit for bit (the ops add counting, not arithmetic), and its
 * verify difference is within the bound: NS and the Stiefel retraction on a lone big
 * slice (tiled GEMMs) and on a stack, the sphere, and the elementwise updates. */
TEST(optim_ops_are_their_kernels) {
    dm_config c;
    dm_config_default(&c);
    dm_ops ops;
    dm_ops_init(&ops, &c);
    ops.verify = 1;
    struct { int n, rows, cols, stack; } cs[] = {{1, 128, 512, 0}, {3, 16, 64, 1}, {2, 48, 24, 1}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int n = cs[k].n, rows = cs[k].rows, cols = cs[k].cols, st = cs[k].stack;
        size_t len = (size_t)n * rows * cols;
        float *x = t_alloc(len), *y = t_alloc(len), *s = t_alloc(n);
        float *work = t_alloc(dm_op_ns_work(&ops, n, rows, cols, 0) + dm_op_retract_work(&ops, n, rows, cols));
        t_fill_normal(x, len, 11 + k, 0.02f);
        memcpy(y, x, len * sizeof(float));
        dm_op_ns(&ops, dm_bm(x), n, rows, cols, DM_NS_POLAR5, dm_bm(work), 0, st);
        dm_ns_run(y, y, n, rows, cols, DM_NS_POLAR5, work, NULL, st);
        CHECKF(!memcmp(x, y, len * sizeof(float)), "ns [%d,%d,%d] differs from its kernel", n,
               rows, cols);
        CHECK(dm_ns_tiled(n, rows, cols, st) == (k == 0));
        dm_op_retract_init(&ops, s, NULL, x, n, rows, cols); /* radii of the orthogonalized x */
        for (int i = 0; i < n; i++) s[i] *= 1.5f;
        dm_op_retract_sphere(&ops, dm_bm(x), dm_bm(s), n, rows, cols);
        dm_retract_sphere(y, s, n, rows, cols);
        CHECK(!memcmp(x, y, len * sizeof(float)));
        for (int i = 0; i < n; i++) s[i] = 0.7f;
        dm_op_retract_stiefel(&ops, dm_bm(x), dm_bm(s), n, rows, cols, dm_bm(work), st);
        dm_retract_stiefel_run(y, y, s, n, rows, cols, work, NULL, st, NULL);
        CHECK(!memcmp(x, y, len * sizeof(float)));
        free(x), free(y), free(s), free(work);
    }
    size_t n = 70001; /* over the kernels' parallel thresholds */
    float *p = t_alloc(n), *g = t_alloc(n), *m1 = t_alloc(n), *m2 = t_alloc(n), *u = t_alloc(n);
    float *q = t_alloc(n), *q1 = t_alloc(n), *q2 = t_alloc(n), *w = t_alloc(n);
    t_fill_normal(p, n, 1, 0.05f), t_fill_normal(g, n, 2, 1.0f);
    t_fill_normal(m1, n, 3, 0.1f), t_fill_normal(m2, n, 4, 0.1f);
    for (size_t i = 0; i < n; i++) m2[i] = m2[i] * m2[i];
    memcpy(q, p, n * 4), memcpy(q1, m1, n * 4), memcpy(q2, m2, n * 4);
    const float half = 0.5f; /* the clipping factor: host memory is the cpu's */
    float h[DM_ADAM_HYPER]; /* the step's values: host memory is the cpu's too */
    dm_adam_hyper(h, 3e-3f, 0.1f, 0.9f, 0.95f, 7);
    dm_op_adamw(&ops, dm_bm(p), dm_bm(m1), dm_bm(m2), dm_bm(g), n, dm_bm(h), 0.9f, 0.95f, 1e-8f,
                dm_bm(&half), 0);
    dm_adamw(q, q1, q2, q, g, q1, q2, n, h[0], h[1], 0.9f, 0.95f, 1e-8f, h[2], h[3], 0.5f, 0);
    CHECK(!memcmp(p, q, n * 4) && !memcmp(m1, q1, n * 4) && !memcmp(m2, q2, n * 4));
    dm_op_momentum(&ops, dm_bm(m1), dm_bm(u), dm_bm(g), n, 0.95f, dm_bm(&half));
    dm_momentum(q1, w, q1, g, n, 0.95f, 0.5f);
    CHECK(!memcmp(m1, q1, n * 4) && !memcmp(u, w, n * 4));
    const float ds[DM_MUON_HYPER] = {0.999f, 2e-2f}, dc[DM_MUON_HYPER] = {0.99f, 2e-2f};
    dm_op_muon_update(&ops, dm_bm(p), dm_bm(u), n, dm_bm(ds), 0);
    dm_muon_apply(q, q, w, n, 0.999f, 2e-2f, 0);
    CHECK(!memcmp(p, q, n * 4));
    double gn = NAN;
    float clip_f = NAN;
    dm_op_grad_norm(&ops, &gn, dm_bm(&clip_f), dm_bm(g), n, 1.0f);
    CHECK(gn == dm_grad_norm2(g, n) && gn > 1.0 && clip_f == (float)(1.0 / gn));
    dm_op_grad_norm(&ops, &gn, dm_bm(&clip_f), dm_bm(g), n, 0.0f); /* no clipping: the factor 1 */
    CHECK(gn == dm_grad_norm2(g, n) && clip_f == 1.0f);
    dm_op_grad_add(&ops, dm_bm(m1), dm_bm(g), n, 0);
    dm_grad_add(q1, q1, g, n, 0);
    dm_op_grad_mean(&ops, dm_bm(u), dm_bm(m1), n, 3);
    dm_grad_mean(w, q1, n, 3);
    CHECK(!memcmp(m1, q1, n * 4) && !memcmp(u, w, n * 4));
    /* the cautious forms (cautious_wd) are their kernels too */
    memcpy(q, p, n * 4), memcpy(q1, m1, n * 4), memcpy(q2, m2, n * 4);
    dm_adam_hyper(h, 3e-3f, 0.1f, 0.9f, 0.95f, 8);
    dm_op_adamw(&ops, dm_bm(p), dm_bm(m1), dm_bm(m2), dm_bm(g), n, dm_bm(h), 0.9f, 0.95f, 1e-8f,
                dm_bm(&half), 1);
    dm_adamw(q, q1, q2, q, g, q1, q2, n, h[0], h[1], 0.9f, 0.95f, 1e-8f, h[2], h[3], 0.5f, 1);
    CHECK(!memcmp(p, q, n * 4) && !memcmp(m1, q1, n * 4) && !memcmp(m2, q2, n * 4));
    dm_op_muon_update(&ops, dm_bm(p), dm_bm(u), n, dm_bm(dc), 1);
    dm_muon_apply(q, q, u, n, 0.99f, 2e-2f, 1);
    CHECK(!memcmp(p, q, n * 4));
    /* normuon: 3 slices of [70, 333] (over the kernel's parallel threshold), two steps */
    {
        int ns = 3, rows = 70, cols = 333;
        size_t nx = (size_t)ns * rows * cols, nr = (size_t)ns * rows;
        float *x = t_alloc(nx), *y = t_alloc(nx), *v = t_alloc(nr), *vv = t_alloc(nr);
        float *wk = t_alloc(2 * (size_t)rows);
        for (int st = 0; st < 2; st++) {
            t_fill_normal(x, nx, 9 + st, 0.05f);
            memcpy(y, x, nx * 4);
            dm_op_normuon(&ops, dm_bm(x), dm_bm(v), ns, rows, cols, 0.95f, 1e-8f, dm_bm(wk));
            dm_normuon(y, vv, ns, rows, cols, 0.95f, 1e-8f, (double *)wk);
            CHECK(!memcmp(x, y, nx * 4) && !memcmp(v, vv, nr * 4));
        }
        free(x), free(y), free(v), free(vv), free(wk);
    }
    static const int OPS[] = {DM_OP_GRAD_ADD, DM_OP_GRAD_MEAN, DM_OP_GRAD_NORM, DM_OP_ADAMW,
                              DM_OP_MOMENTUM, DM_OP_NS, DM_OP_NORMUON, DM_OP_MUON_UPDATE,
                              DM_OP_RETRACT};
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        double rel = ops.verify_op[OPS[k]][DM_FWD];
        printf("  %-12s verify %.3g\n", dm_op_name(OPS[k]), rel);
        CHECKF(rel >= 0 && rel <= DM_VERIFY_BOUND, "%s: verify %.3g", dm_op_name(OPS[k]), rel);
    }
    free(p), free(g), free(m1), free(m2), free(u), free(q), free(q1), free(q2), free(w);
    dm_ops_free(&ops);
}
