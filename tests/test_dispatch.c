/* test_dispatch.c — the dispatch guard: fused and reference paths of the whole model
 * agree (loss and every gradient), unsupported calls are declined with their reason and
 * stay correct, a forced fused path on an unsupported model is a clear error, the
 * counters count, verify mode measures the adjoint equivalence, and the fused norms
 * equal their composed references. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "backends/cpu/kernels/kernels.h"
#include "ref/ref.h"
#include "base/rng.h"
#include "model/model.h"
#include "backends/cpu/ctx.h"
#include "backends/cpu/kernels/ns.h"
#include "ops/optim_ops.h"

static dm_config small(int mixer) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 64;
    c.n_layer = 2;
    c.n_head = 2;
    c.head_dim = 32;
    c.gate_rank = 16;
    c.mixer = mixer;
    c.chunk_size = 16;
    c.precision = DM_PRECISION_FP32; /* fp32 products: the bf16 paths have tests of their own */
    return c;
}

static void tokens(uint8_t *t, size_t n, uint64_t seed) {
    dm_rng r;
    dm_rng_seed(&r, seed, 1);
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)dm_rng_below(&r, 256);
}

/* loss and grads of cfg on a fixed batch; the model's params are scaled away from init so
 * the gates and states carry real signal */
static float run(dm_config c, int B, int T, float *grads, size_t *np, char *report, size_t rn) {
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (!m) return NAN;
    float *p = dm_model_params(m);
    for (int i = 0; i < dm_model_num_tensors(m); i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        if (!(t->flags & DM_P_NO_DECAY))
            for (size_t j = 0; j < t->numel; j++) p[t->offset + j] *= 5.0f;
    }
    uint8_t *tok = malloc((size_t)B * (T + 1));
    tokens(tok, (size_t)B * (T + 1), 9);
    float loss = dm_model_forward(m, tok, B, T, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    *np = dm_model_num_params(m);
    if (grads) memcpy(grads, dm_model_grads(m), *np * sizeof(float));
    if (report) dm_model_dispatch_report(m, report, rn);
    free(tok);
    dm_model_free(m);
    return loss;
}

static void fused_vs_reference(int mixer, int T) {
    dm_config a = small(mixer), b = small(mixer);
    a.kda_impl = DM_IMPL_CHUNKED;
    b.kda_impl = DM_IMPL_REFERENCE;
    size_t np;
    run(a, 1, 4, NULL, &np, NULL, 0);
    float *ga = t_alloc(np), *gb = t_alloc(np);
    char ra[1024], rb[1024];
    float la = run(a, 3, T, ga, &np, ra, sizeof ra), lb = run(b, 3, T, gb, &np, rb, sizeof rb);
    double rel = t_rel_rms_ff(ga, gb, np);
    printf("  %s T=%d: loss %.9g vs %.9g; all-gradient rel rms %.2e\n    chunked: %s\n    "
           "reference: %s\n", mixer ? "gdn" : "kda", T, la, lb, rel, ra, rb);
    CHECKF(fabs(la - lb) <= 1e-5 * fabs(lb), "loss %.9g vs %.9g", la, lb);
    CHECKF(rel <= 1e-5, "gradients differ by %.3e", rel);
    CHECK(strstr(ra, " delta=2/2 delta_bwd=2/2") != NULL && strstr(ra, "declined=0"));
    CHECK(strstr(rb, " delta=0/2 delta_bwd=0/2") && strstr(rb, "declined=4") &&
          strstr(rb, "delta chunked: 2 (kda_impl=reference)"));
    free(ga);
    free(gb);
}

TEST(dispatch_model_chunked_equals_reference_kda) { fused_vs_reference(DM_MIXER_KDA, 100); }
TEST(dispatch_model_chunked_equals_reference_gdn) { fused_vs_reference(DM_MIXER_GDN, 37); }

TEST(dispatch_counts_and_declines) {
    /* head_dim 300 is beyond the chunked kernel: auto declines it, with the reason */
    dm_config c = small(DM_MIXER_KDA);
    c.d_model = 300;
    c.n_head = 1;
    c.head_dim = 300;
    c.n_layer = 1;
    size_t np;
    char rep[1024];
    float l_auto = run(c, 1, 20, NULL, &np, rep, sizeof rep);
    printf("  auto, head_dim 300: %s\n", rep);
    CHECK(strstr(rep, " delta=0/1 delta_bwd=0/1") != NULL);
    CHECK(strstr(rep, "delta chunked: 1 (dk or dv above 256)") != NULL);
    CHECK(strstr(rep, "rmsnorm=3/3 rmsnorm_bwd=3/3 gatednorm=1/1 gatednorm_bwd=1/1") != NULL);
    /* still correct: the same loss as the reference path, bit for bit */
    c.kda_impl = DM_IMPL_REFERENCE;
    float l_ref = run(c, 1, 20, NULL, &np, NULL, 0);
    CHECK(memcmp(&l_auto, &l_ref, sizeof l_ref) == 0);
    /* forcing the fused path on it is a clear error */
    c.kda_impl = DM_IMPL_CHUNKED;
    char err[256] = "";
    dm_model *m = dm_model_create(&c, err, sizeof err);
    printf("  kda_impl=chunked: %s\n", err);
    CHECK(m == NULL && strstr(err, "kda_impl=chunked") && strstr(err, "256"));
    dm_model_free(m);
}

TEST(dispatch_norm_reference_equals_fused) {
    dm_config a = small(DM_MIXER_KDA), b = small(DM_MIXER_KDA);
    b.norm_impl = DM_IMPL_REFERENCE;
    size_t np;
    run(a, 1, 4, NULL, &np, NULL, 0);
    float *ga = t_alloc(np), *gb = t_alloc(np);
    char rb[1024];
    float la = run(a, 2, 30, ga, &np, NULL, 0), lb = run(b, 2, 30, gb, &np, rb, sizeof rb);
    double rel = t_rel_rms_ff(ga, gb, np);
    printf("  fused vs composed norms: loss %.9g vs %.9g, gradients rel rms %.2e\n  %s\n", la, lb,
           rel, rb);
    CHECK(fabs(la - lb) <= 1e-6 * fabs(lb));
    CHECK(rel <= 1e-5);
    CHECK(strstr(rb, " rmsnorm=0/5") && strstr(rb, "rmsnorm fused: 5 (norm_impl=reference)"));
    free(ga);
    free(gb);
}

TEST(dispatch_verify_mode) {
    for (int impl = 0; impl < 2; impl++) {
        dm_config c = small(DM_MIXER_KDA);
        c.kda_impl = impl ? DM_IMPL_REFERENCE : DM_IMPL_AUTO;
        dm_model *m = dm_model_create(&c, NULL, 0);
        uint8_t tok[2 * 81];
        tokens(tok, sizeof tok, 4);
        char what[64];
        dm_model_forward(m, tok, 2, 80, NULL);
        dm_model_backward(m);
        CHECK(dm_model_verify_take(m, what, sizeof what) == -1); /* nothing verified yet */
        dm_model_set_verify(m, 1);
        float l1 = dm_model_forward(m, tok, 2, 80, NULL);
        dm_model_zero_grad(m);
        dm_model_backward(m);
        double v = dm_model_verify_take(m, what, sizeof what);
        printf("  verify (%s primary): largest relative difference %.2e (%s)\n",
               impl ? "reference" : "chunked", v, what);
        CHECK(v >= 0 && v <= 1e-5 && what[0]);
        /* verify mode does not change the result */
        dm_model_set_verify(m, 0);
        float l2 = dm_model_forward(m, tok, 2, 80, NULL);
        CHECK(memcmp(&l1, &l2, sizeof l1) == 0);
        dm_model_free(m);
    }
}

/* the fused norm kernels against their composed references, forward and backward */
TEST(fused_norms_match_composed) {
    const int N = 37, C = 48, D = 16, R = 3 * 37;
    float *x = t_alloc(N * C), *w = t_alloc(C), *dy = t_alloc(N * C);
    float *y1 = t_alloc(N * C), *y2 = t_alloc(N * C), *r1 = t_alloc(N), *r2 = t_alloc(N);
    float *dx1 = t_alloc(N * C), *dx2 = t_alloc(N * C), *dw1 = t_alloc(C), *dw2 = t_alloc(C);
    float *scratch = t_alloc(2 * (size_t)R * C);
    t_fill_normal(x, N * C, 1, 2.0f);
    t_fill_normal(w, C, 2, 1.0f);
    t_fill_normal(dy, N * C, 3, 1.0f);
    dm_rmsnorm_fwd(y1, r1, x, w, N, C, 1e-6f);
    dm_rmsnorm_ref_fwd(y2, r2, x, w, N, C, 1e-6f, scratch);
    dm_rmsnorm_bwd(dx1, dw1, dy, x, w, r1, N, C);
    dm_rmsnorm_ref_bwd(dx2, dw2, dy, x, w, r2, N, C, scratch);
    double e[8];
    e[0] = t_rel_rms_ff(y1, y2, N * C);
    e[1] = t_rel_rms_ff(dx1, dx2, N * C);
    e[2] = t_rel_rms_ff(dw1, dw2, C);
    printf("  rmsnorm fused vs composed: y %.2e dx %.2e dw %.2e\n", e[0], e[1], e[2]);
    for (int i = 0; i < 3; i++) CHECK(e[i] <= 1e-6);
    for (int act = 0; act < 2; act++) {
        float *o = t_alloc(R * D), *z = t_alloc(R * D), *g = t_alloc(R * D), *wd = t_alloc(D);
        float *a1 = t_alloc(R * D), *a2 = t_alloc(R * D), *s1 = t_alloc(R), *s2 = t_alloc(R);
        float *do1 = t_alloc(R * D), *do2 = t_alloc(R * D), *dz1 = t_alloc(R * D),
              *dz2 = t_alloc(R * D), *gw1 = t_alloc(D), *gw2 = t_alloc(D);
        t_fill_normal(o, R * D, 4, 1.0f);
        t_fill_normal(z, R * D, 5, 2.0f);
        t_fill_normal(g, R * D, 6, 1.0f);
        t_fill_normal(wd, D, 7, 1.0f);
        dm_gatednorm_fwd(a1, s1, o, z, wd, R, D, 1e-6f, act);
        dm_gatednorm_ref_fwd(a2, s2, o, z, wd, R, D, 1e-6f, act, scratch);
        dm_gatednorm_bwd(do1, dz1, gw1, g, o, z, wd, s1, R, D, act);
        dm_gatednorm_ref_bwd(do2, dz2, gw2, g, o, z, wd, s2, R, D, act, scratch);
        e[3] = t_rel_rms_ff(a1, a2, R * D);
        e[4] = t_rel_rms_ff(do1, do2, R * D);
        e[5] = t_rel_rms_ff(dz1, dz2, R * D);
        e[6] = t_rel_rms_ff(gw1, gw2, D);
        printf("  gatednorm (%s) fused vs composed: y %.2e do %.2e dz %.2e dw %.2e\n",
               act ? "swish" : "sigmoid", e[3], e[4], e[5], e[6]);
        for (int i = 3; i < 7; i++) CHECK(e[i] <= 1e-6);
        free(o); free(z); free(g); free(wd); free(a1); free(a2); free(s1); free(s2);
        free(do1); free(do2); free(dz1); free(dz2); free(gw1); free(gw2);
    }
    free(x); free(w); free(dy); free(y1); free(y2); free(r1); free(r2);
    free(dx1); free(dx2); free(dw1); free(dw2); free(scratch);
}

/* ---- the op layer over a whole step ---- */

/* one forward + backward of cfg on a fixed batch, with the atlas and verify mode as asked;
 * the model is returned for its counters */
static dm_model *step(dm_config c, int B, int T, dm_atlas *atlas, int verify) {
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (!m) return NULL;
    uint8_t *tok = malloc((size_t)B * (T + 1));
    tokens(tok, (size_t)B * (T + 1), 5);
    dm_model_set_atlas(m, atlas);
    dm_model_set_verify(m, verify);
    float loss = dm_model_forward(m, tok, B, T, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    CHECK(isfinite(loss));
    free(tok);
    return m;
}

/* Every op of a training step goes through the one routine: counted per direction, timed
 * into the atlas, and in verify mode checked against a second implementation — every op
 * that has a reference. */
TEST(dispatch_every_op_counted_timed_verified) {
    for (int mixer = 0; mixer < 2; mixer++) {
        dm_atlas atlas;
        dm_atlas_reset(&atlas);
        dm_model *m = step(small(mixer), 2, 40, &atlas, 1);
        if (!m) return;
        const dm_ops *ops = &m->ops;
        int counted = 0, verified = 0, timed = 0, pairs = 0;
        for (int op = 0; op < DM_OP_COUNT; op++)
            for (int d = 0; d < DM_NDIR; d++) {
                if (!dm_op_dir_name(d) || !ops->calls[op][d]) continue;
                counted++;
                int in_atlas = 0;
                for (int i = 0; i < atlas.n_ops; i++)
                    in_atlas |= !strcmp(atlas.op[i].name, dm_op_name(op)) &&
                                !strcmp(atlas.op[i].dir, dm_op_dir_name(d));
                timed += in_atlas;
                CHECKF(in_atlas, "%s.%s is not in the atlas", dm_op_name(op), dm_op_dir_name(d));
                if (!dm_op_impl_name(op, 1)) continue; /* one implementation: add */
                pairs++;
                double v = ops->verify_op[op][d];
                verified += v >= 0;
                CHECKF(v >= 0 && v <= DM_VERIFY_BOUND, "%s.%s: verify %.3g", dm_op_name(op),
                       dm_op_dir_name(d), v);
            }
        /* the model's ops (the optimizer's come after them, tests/test_optim_ops.c): matmul
         * 3 directions, add 1, the 11 others 2 each but the fused head (token vocabularies) */
        CHECKF(counted == 3 + 1 + 2 * (DM_OP_GRAD_ADD - 3), "%d (op, direction) pairs ran", counted);
        char table[8192];
        dm_model_dispatch_table(m, table, sizeof table);
        printf("  %s: %d op directions counted, %d in the atlas, %d of %d verified\n%s",
               mixer ? "gdn" : "kda", counted, timed, verified, pairs, table);
        CHECK(strstr(table, "matmul.bwd_w") && strstr(table, "verify"));
        dm_model_free(m);
    }
}

/* The atlas's roofline: every product of the step is recorded by shape on the kernel it
 * ran on (the sets' FLOPs add up to the matmul op's; verify mode's second runs are not
 * the step's), Newton-Schulz calls by their products, and each set is then timed
 * standalone; the table ends in the fraction. In fp32 over both GEMM backends, and in
 * bf16 where the CPU has it. */
TEST(atlas_roofline_times_every_gemm) {
    for (int v = 0; v < 3; v++) {
        dm_config c = small(DM_MIXER_KDA);
        c.gemm = v == 0 ? DM_GEMM_OPENBLAS : DM_GEMM_AUTO;
        if (v == 2) c.precision = DM_PRECISION_AUTO;
        dm_atlas *a = calloc(1, sizeof *a);
        dm_model *m = step(c, 2, 40, a, 1);
        if (!m) return;
        if (v == 2 && !dm_ops_bf16_active(&m->ops)) {
            printf("  bf16: not run here (%s)\n", m->ops.bf16_why);
            dm_model_free(m);
            free(a);
            continue;
        }
        a->steps = 1;
        a->stage[DM_ST_FORWARD] = 0.5; /* a step time for the fraction */
        long mm_calls = 0, set_calls = 0;
        double op_flops = 0, set_flops = 0;
        for (int d = 0; d < DM_NDIR; d++) mm_calls += m->ops.calls[DM_OP_MATMUL][d];
        for (int i = 0; i < a->n_ops; i++)
            if (!strcmp(a->op[i].name, "matmul")) op_flops += a->op[i].flops;
        for (int j = 0; j < a->n_gemm; j++) {
            set_calls += a->gemm[j].calls;
            set_flops += a->gemm[j].flops * a->gemm[j].calls;
            CHECK(a->gemm[j].kind == (v == 0 ? DM_GEMM_F32_OPENBLAS
                                      : v == 1 ? DM_GEMM_F32_ONEDNN : DM_GEMM_BF16_ONEDNN));
        }
        CHECKF(set_calls == mm_calls, "%ld products recorded, %ld matmul calls", set_calls, mm_calls);
        CHECKF(fabs(set_flops - op_flops) <= 1e-9 * op_flops, "%.6g vs %.6g", set_flops, op_flops);
        /* Newton-Schulz through its op (verify off: the whole iteration per call): a stack
         * and a lone slice, wide and tall */
        int sets = a->n_gemm;
        m->ops.verify = 0;
        float *x = t_alloc(96 * 64), *work = t_alloc(dm_op_ns_work(&m->ops, 4, 96, 64, v == 2));
        t_fill_normal(x, 96 * 64, 5, 1.0f);
        dm_op_ns(&m->ops, dm_bm(x), 4, 16, 64, DM_NS_QUINTIC5, dm_bm(work), v == 2, 1);
        dm_op_ns(&m->ops, dm_bm(x), 1, 96, 64, DM_NS_QUINTIC5, dm_bm(work), v == 2, 0);
        dm_op_ns(&m->ops, dm_bm(x), 1, 96, 64, DM_NS_QUINTIC5, dm_bm(work), v == 2, 0);
        free(x);
        free(work);
        CHECK(a->n_gemm == sets + 2 && a->gemm[sets + 1].calls == 2);
        CHECK(fabs(a->gemm[sets].flops - dm_ns_flops(4, 16, 64, DM_NS_QUINTIC5)) <=
              1e-9 * a->gemm[sets].flops);
        CHECK(fabs(a->gemm[sets + 1].flops - dm_ns_flops(1, 96, 64, DM_NS_QUINTIC5)) <=
              1e-9 * a->gemm[sets + 1].flops);
        dm_atlas_roofline(a);
        CHECKF(a->measured == 1, "roofline not measured: %s", a->roof_why ? a->roof_why : "?");
        for (int j = 0; j < a->n_gemm; j++)
            CHECKF(a->gemm[j].best > 0 && isfinite(a->gemm[j].best), "set %d (%s): %g s", j,
                   a->gemm[j].label, a->gemm[j].best);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        dm_atlas_print(a, f);
        fclose(f);
        CHECK(text && strstr(text, "roofline: ") && strstr(text, "% of the step"));
        if (text) printf("%s", strstr(text, "roofline: ") ? strstr(text, "roofline: ") : text);
        free(text);
        dm_model_free(m);
        free(a);
    }
}

/* gemm=openblas, onednn and auto compute the same step (to rounding), and the table says
 * which ran; a oneDNN that cannot start (pretended here) leaves the step to OpenBLAS, bit
 * for bit, with the reason counted. */
TEST(dispatch_gemm_backends) {
    static const int G[] = {DM_GEMM_OPENBLAS, DM_GEMM_ONEDNN, DM_GEMM_AUTO};
    static const char *const NAME[] = {"openblas", "onednn", "auto"};
    size_t np = 0;
    float *g[3] = {0}, loss[3];
    for (int i = 0; i < 3; i++) {
        dm_config c = small(DM_MIXER_KDA);
        c.gemm = G[i];
        dm_model *m = step(c, 2, 40, NULL, 0);
        if (!m) return;
        np = dm_model_num_params(m);
        g[i] = t_alloc(np);
        memcpy(g[i], dm_model_grads(m), np * sizeof(float));
        uint8_t tok[2 * 41];
        tokens(tok, sizeof tok, 5);
        loss[i] = dm_model_forward(m, tok, 2, 40, NULL);
        char table[8192];
        dm_model_dispatch_table(m, table, sizeof table);
        const char *line = strstr(table, "matmul.fwd");
        printf("  gemm=%s: loss %.9g  %.*s\n", NAME[i], loss[i],
               line ? (int)strcspn(line, "\n") : 0, line ? line : "");
        CHECK(line && strstr(line, i == 0 ? "openblas" : "onednn"));
        dm_model_free(m);
    }
    for (int i = 1; i < 3; i++) {
        double e = t_rel_rms_ff(g[i], g[0], np);
        CHECKF(fabs(loss[i] - loss[0]) <= 1e-6 * fabs(loss[0]) && e <= 1e-5,
               "gemm=%s vs openblas: loss %.9g vs %.9g, gradients rel rms %.3g", NAME[i],
               loss[i], loss[0], e);
    }
    /* oneDNN missing: auto falls back to OpenBLAS for every product, with the reason */
    dm_config c = small(DM_MIXER_KDA);
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_cpu_ctx_of(&m->ops)->onednn_why = "pretend: no oneDNN";
    uint8_t tok[2 * 41];
    tokens(tok, sizeof tok, 5);
    dm_model_forward(m, tok, 2, 40, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    CHECKF(memcmp(dm_model_grads(m), g[0], np * sizeof(float)) == 0,
           "the OpenBLAS fallback differs from gemm=openblas");
    char rep[4096];
    dm_model_dispatch_report(m, rep, sizeof rep);
    printf("  oneDNN pretended missing: %.200s...\n", strstr(rep, "[") ? strstr(rep, "[") : rep);
    CHECK(strstr(rep, "matmul onednn: 25 (pretend: no oneDNN)") != NULL);
    CHECK(strstr(rep, "declined=0") != NULL); /* OpenBLAS is not the reference */
    dm_model_free(m);
    for (int i = 0; i < 3; i++) free(g[i]);
}

/* An op's shape checks (its definition in src/ops) stop a call with a negative size or a
 * missing buffer before any implementation runs: the process aborts naming the op, the
 * direction and what is wrong; the same calls with sane arguments run. */
static int bad_call(int which, const char *errpath) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        FILE *e = freopen(errpath, "w", stderr);
        (void)e;
        dm_config c = small(DM_MIXER_KDA);
        dm_ops ops;
        dm_ops_init(&ops, &c);
        float x[16] = {0}, y[16], w[16] = {0};
        if (which == 0) dm_op_matmul_fwd(&ops, dm_bm(y), dm_bm(x), dm_bm(w), NULL, -1, 4, 4);
        if (which == 1) dm_op_silu_fwd(&ops, NULL, dm_bm(x), 16);
        if (which == 2) dm_op_rmsnorm_fwd(&ops, dm_bm(y), NULL, dm_bm(x), dm_bm(w), 2, 8, 1e-6f,
                                          NULL);
        if (which == 3) { /* sane: runs */
            dm_op_matmul_fwd(&ops, dm_bm(y), dm_bm(x), dm_bm(w), NULL, 4, 2, 2);
            dm_op_silu_fwd(&ops, dm_bm(y), dm_bm(x), 0); /* empty: no buffer needed */
            dm_op_silu_fwd(&ops, dm_bm(y), dm_bm(x), 16);
        }
        dm_ops_free(&ops);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

TEST(dispatch_shape_checks_stop_bad_calls) {
    static const char *const SAID[] = {"op matmul.fwd called with a negative size",
                                       "op silu.fwd called with a NULL buffer",
                                       "op rmsnorm.fwd called with a NULL buffer"};
    char d[256], path[512];
    t_tmpdir(d, sizeof d);
    snprintf(path, sizeof path, "%s/err", d);
    for (int i = 0; i < 3; i++) {
        int sig = bad_call(i, path);
        char *err = t_read_text(path);
        CHECKF(sig == SIGABRT && err && strstr(err, SAID[i]), "bad call %d: signal %d, said: %s",
               i, sig, err ? err : "(nothing)");
        free(err);
    }
    CHECK(bad_call(3, path) == 0);
    t_rmtree(d);
}
