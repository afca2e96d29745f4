/* test_head_xent.c — the fused head and cross-entropy (ops/seq.h head_xent): against the
 * unfused path (the head's matmul writing every logit, then xent) on the loss, dx and dW,
 * for vocabularies of 2- and 4-byte ids, row counts that are not a multiple of the chunk;
 * the cpu implementation against its reference (verify mode); the same bits on 1, 2 and 3
 * threads. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "model/model.h"
#include "model/plan.h"
#include "ops/ops.h"

/* ids [n] of width w, drawn below V (every one of the last rows V - 1 when hi) */
static void *draw_ids(int n, int V, uint64_t seed) {
    int w = dm_id_width(V);
    uint8_t *p = malloc((size_t)n * (size_t)w);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t id = i % 5 == 4 ? (uint32_t)(V - 1) : (uint32_t)(s % (uint64_t)V);
        if (w == 2) ((uint16_t *)p)[i] = (uint16_t)id;
        else if (w == 4) ((uint32_t *)p)[i] = id;
        else p[i] = (uint8_t)id;
    }
    return p;
}

/* max |a - b| / max |b| */
static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return den > 0 ? num / den : num;
}

typedef struct {
    double loss;
    float *losses, *dx, *dW;
} result;

static void result_free(result *r) {
    free(r->losses), free(r->dx), free(r->dW);
}

/* the fused op on x[N,D], W[V,D] in chunks of R (verify mode when verify) */
static result fused(dm_ops *ops, const float *x, const float *W, const void *ids, int N, int D,
                    int V, int R) {
    result r = {0, t_alloc((size_t)N), t_alloc((size_t)N * D), t_alloc((size_t)V * D)};
    float *work = t_alloc((size_t)R * V);
    int w = dm_id_width(V);
    dm_op_head_xent_fwd(ops, &r.loss, dm_bm(r.losses), dm_bm(x), dm_bm(W), ids, w, dm_bm(work), N,
                        D, V, R);
    dm_op_head_xent_bwd(ops, dm_bm(r.dx), dm_bm(r.dW), dm_bm(x), dm_bm(W), ids, w, dm_bm(work), N,
                        D, V, R, 1.0f / (float)N);
    free(work);
    return r;
}

/* the unfused path: every logit, then xent, then the head's backward */
static result unfused(dm_ops *ops, const float *x, const float *W, const void *ids, int N,
                      int D, int V) {
    result r = {0, t_alloc((size_t)N), t_alloc((size_t)N * D), t_alloc((size_t)V * D)};
    float *logits = t_alloc((size_t)N * V);
    int w = dm_id_width(V);
    dm_op_matmul_fwd(ops, dm_bm(logits), dm_bm(x), dm_bm(W), NULL, N, D, V);
    dm_op_xent_fwd_ids(ops, &r.loss, dm_bm(r.losses), dm_bm(logits), ids, w, N, V);
    dm_op_xent_bwd_ids(ops, dm_bm(logits), dm_bm(logits), ids, w, N, V, 1.0f / (float)N);
    dm_op_matmul_bwd(ops, dm_bm(r.dx), dm_bm(r.dW), NULL, dm_bm(logits), dm_bm(x), dm_bm(W), N, D,
                     V, 0);
    free(logits);
    return r;
}

static dm_config fp32_config(void) {
    dm_config c;
    dm_config_default(&c);
    c.precision = DM_PRECISION_FP32;
    return c;
}

/* The fused op against the unfused path within 1e-6 relative, on V 300, 1000 and 65537
 * (ids of 2 and 4 bytes) and N not a multiple of R; and against its reference. */
TEST(head_xent_matches_unfused) {
    static const struct { int V, N, R; } cs[] = {{300, 37, 16}, {1000, 64, 256}, {1000, 70, 32},
                                                 {65537, 21, 8}};
    dm_config c = fp32_config();
    int D = 24;
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int V = cs[k].V, N = cs[k].N, R = cs[k].R;
        float *x = t_alloc((size_t)N * D), *W = t_alloc((size_t)V * D);
        t_fill_normal(x, (size_t)N * D, 11 + k, 1.0f);
        t_fill_normal(W, (size_t)V * D, 23 + k, 0.3f);
        void *ids = draw_ids(N, V, 7 + k);
        dm_ops ops;
        dm_ops_init(&ops, &c);
        result u = unfused(&ops, x, W, ids, N, D, V);
        result f = fused(&ops, x, W, ids, N, D, V, R);
        CHECKF(ops.calls[DM_OP_HEAD_XENT][DM_FWD] == 1 && ops.calls[DM_OP_HEAD_XENT][DM_BWD] == 1,
               "head_xent calls %ld %ld", ops.calls[DM_OP_HEAD_XENT][DM_FWD],
               ops.calls[DM_OP_HEAD_XENT][DM_BWD]);
        double el = fabs(f.loss - u.loss) / fabs(u.loss);
        double ell = rel(f.losses, u.losses, (size_t)N);
        double edx = rel(f.dx, u.dx, (size_t)N * D), edw = rel(f.dW, u.dW, (size_t)V * D);
        printf("  V %d N %d R %d: loss %.7f vs %.7f (%.1e), losses %.1e, dx %.1e, dW %.1e\n", V,
               N, R, f.loss, u.loss, el, ell, edx, edw);
        CHECKF(u.loss > 0 && el <= 1e-6 && ell <= 1e-6, "V %d: loss %.3e, losses %.3e", V, el,
               ell);
        CHECKF(edx <= 1e-6 && edw <= 1e-6, "V %d: dx %.3e dW %.3e", V, edx, edw);
        /* the cpu implementation against the reference */
        ops.verify = 1;
        result v = fused(&ops, x, W, ids, N, D, V, R);
        char what[64];
        double vmax = dm_ops_verify_take(&ops, what, sizeof what);
        CHECKF(vmax >= 0 && vmax <= 1e-5, "V %d: verify %.3e (%s)", V, vmax, what);
        CHECKF(memcmp(v.dx, f.dx, (size_t)N * D * sizeof(float)) == 0,
               "V %d: verify mode changed dx", V);
        result_free(&v), result_free(&u), result_free(&f);
        dm_ops_free(&ops);
        free(x), free(W), free(ids);
    }
}

/* The same bits on 1, 2 and 3 threads: loss, per-row losses, dx and dW. */
TEST(head_xent_same_bits_on_threads) {
    static const int NT[] = {1, 2, 3};
    dm_config c = fp32_config();
    int V = 1000, N = 45, D = 32, R = 16;
    float *x = t_alloc((size_t)N * D), *W = t_alloc((size_t)V * D);
    t_fill_normal(x, (size_t)N * D, 5, 1.0f);
    t_fill_normal(W, (size_t)V * D, 6, 0.3f);
    void *ids = draw_ids(N, V, 9);
    int saved = omp_get_max_threads();
    result r0 = {0};
    for (int i = 0; i < 3; i++) {
        dm_set_threads(NT[i]);
        dm_ops ops;
        dm_ops_init(&ops, &c);
        result r = fused(&ops, x, W, ids, N, D, V, R);
        dm_ops_free(&ops);
        if (i == 0) {
            r0 = r;
            continue;
        }
        CHECKF(memcmp(&r.loss, &r0.loss, sizeof r.loss) == 0 &&
                   memcmp(r.losses, r0.losses, (size_t)N * sizeof(float)) == 0,
               "%d threads: loss %.17g vs %.17g", NT[i], r.loss, r0.loss);
        CHECKF(memcmp(r.dx, r0.dx, (size_t)N * D * sizeof(float)) == 0, "%d threads: dx", NT[i]);
        CHECKF(memcmp(r.dW, r0.dW, (size_t)V * D * sizeof(float)) == 0, "%d threads: dW", NT[i]);
        result_free(&r);
    }
    dm_set_threads(saved);
    printf("  loss %.9g: the same bits on 1, 2 and 3 threads\n", r0.loss);
    result_free(&r0);
    free(x), free(W), free(ids);
}

/* saved activations (MiB) in the report of `dormouse plan` at vocab V; -1 when absent */
static double plan_saved(int V, const char *dir) {
    char cmd[1024], path[512], out[4096];
    snprintf(path, sizeof path, "%s/plan%d", dir, V);
    snprintf(cmd, sizeof cmd, "%s plan --set vocab=%d --reps 0", DM_CLI, V);
    if (t_run_out(cmd, path, out, sizeof out) != 0) return -1;
    const char *p = strstr(out, "saved activations");
    double mib = -1;
    if (!p || sscanf(p + strlen("saved activations"), "%lf", &mib) != 1) return -1;
    return mib;
}

/* `dormouse plan` of a vocabulary of 8192 counts one chunk of the fused head's logits
 * (R x V, dm_plan_head_rows), not all N x V: against the byte model's plan, whose logits
 * are N x 256, the saved activations differ by exactly the two logits' sizes. */
TEST(head_xent_plan_counts_the_chunk) {
    char d[256];
    t_tmpdir(d, sizeof d);
    dm_config c;
    dm_config_default(&c);
    size_t N = (size_t)c.batch_size * c.seq_len;
    c.vocab = 8192;
    int R = dm_plan_head_rows(&c, N);
    double bytes = plan_saved(256, d), tokens = plan_saved(8192, d);
    double mib = 1024.0 * 1024.0, want = ((double)R * 8192 - (double)N * 256) * 4 / mib;
    double full = (double)N * 8192 * 4 / mib;
    printf("  saved activations: vocab 256 %.1f MiB, vocab 8192 %.1f MiB (chunk of %d rows; "
           "all %zu rows' logits would be %.1f MiB)\n", bytes, tokens, R, N, full);
    CHECK(R > 0 && (size_t)R < N);
    CHECKF(bytes > 0 && tokens > 0 && fabs(tokens - bytes - want) <= 0.11,
           "vocab 8192 %.1f MiB, byte %.1f MiB: difference %.2f, the logits' %.2f", tokens,
           bytes, tokens - bytes, want);
    t_rmtree(d);
}

/* A model of tokens (vocab 1000, untied) through the fused head: its step counts head_xent
 * once each way and no xent, N = 2 x 45 rows are not a multiple of the chunk's, and the
 * loss and every gradient are the same bits on 1, 2 and 3 threads. */
TEST(head_xent_model_same_bits_on_threads) {
    static const int NT[] = {1, 2, 3};
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32, c.n_layer = 1, c.n_head = 2, c.head_dim = 16, c.gate_rank = 8;
    c.vocab = 1000, c.tie_embeddings = 0;
    int B = 2, T = 45;
    void *ids = draw_ids(B * (T + 1), c.vocab, 3);
    int saved = omp_get_max_threads();
    float l0 = 0, *g0 = NULL;
    size_t np = 0;
    for (int i = 0; i < 3; i++) {
        dm_set_threads(NT[i]);
        c.threads = NT[i];
        char err[256];
        dm_model *m = dm_model_create(&c, err, sizeof err);
        CHECKF(m != NULL, "%s", err);
        if (!m) break;
        dm_model_zero_grad(m);
        float l = dm_model_forward(m, ids, B, T, NULL);
        dm_model_backward(m);
        const dm_ops *ops = &m->ops;
        CHECKF(ops->calls[DM_OP_HEAD_XENT][DM_FWD] == 1 &&
                   ops->calls[DM_OP_HEAD_XENT][DM_BWD] == 1 &&
                   ops->calls[DM_OP_XENT][DM_FWD] == 0 && ops->calls[DM_OP_XENT][DM_BWD] == 0,
               "head_xent %ld/%ld, xent %ld/%ld", ops->calls[DM_OP_HEAD_XENT][DM_FWD],
               ops->calls[DM_OP_HEAD_XENT][DM_BWD], ops->calls[DM_OP_XENT][DM_FWD],
               ops->calls[DM_OP_XENT][DM_BWD]);
        CHECK(isfinite(l) && l > 0);
        if (i == 0) {
            np = dm_model_num_params(m);
            g0 = t_alloc(np);
            memcpy(g0, dm_model_grads(m), np * sizeof(float));
            l0 = l;
        } else {
            CHECKF(memcmp(&l, &l0, sizeof l) == 0, "%d threads: loss %.9g vs %.9g", NT[i], l,
                   l0);
            CHECKF(memcmp(dm_model_grads(m), g0, np * sizeof(float)) == 0,
                   "%d vs 1 thread: gradients differ", NT[i]);
        }
        dm_model_free(m);
    }
    dm_set_threads(saved);
    printf("  vocab 1000 model loss %.9g: the same bits on 1, 2 and 3 threads\n", l0);
    free(g0), free(ids);
}

/* ---- the fused head in bf16 ---- */

/* an op layer whose products run in bf16 (precision=bf16 set on it); pretend: as on a CPU
 * without bf16, where the reference bf16 path runs (the rounded operands through the f32
 * GEMM), else the machine's (its hardware kernel, or NULL in bf16_why when it lacks one) */
static void bf16_ops(dm_ops *ops, int pretend) {
    dm_config c;
    dm_config_default(&c);
    dm_ops_init(ops, &c);
    ops->precision = DM_PRECISION_BF16;
    if (pretend) ops->bf16_why = "pretend: the reference bf16 path";
}

/* calls of head_xent's implementation `name` in direction dir */
static long ran_by(const dm_ops *ops, int dir, const char *name) {
    for (int i = 0; dm_op_impl_name(DM_OP_HEAD_XENT, i); i++)
        if (strcmp(dm_op_impl_name(DM_OP_HEAD_XENT, i), name) == 0)
            return ops->ran[DM_OP_HEAD_XENT][dir][i];
    return -1;
}

/* The fused head in bf16, on the reference bf16 path (so on any CPU): against the unfused
 * head in bf16 (the head's matmul on bf16 operands, xent, its dlogits rounded for both
 * backward products) within 1e-6 relative, as in fp32, the call run by head_xent's
 * reference-bf16; and against the fused head in fp32: the rounding shows (dx and dW differ
 * by more than 1e-4 relative) and stays small (dx, dW within 3e-2; the loss within 1e-3). */
TEST(head_xent_bf16_matches_unfused_bf16) {
    static const struct { int V, N, R; } cs[] = {{300, 37, 16}, {1000, 70, 32}, {65537, 21, 8}};
    dm_config c = fp32_config();
    int D = 48;
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int V = cs[k].V, N = cs[k].N, R = cs[k].R;
        float *x = t_alloc((size_t)N * D), *W = t_alloc((size_t)V * D);
        t_fill_normal(x, (size_t)N * D, 31 + k, 1.0f);
        t_fill_normal(W, (size_t)V * D, 37 + k, 0.3f);
        void *ids = draw_ids(N, V, 41 + k);
        dm_ops h, f;
        bf16_ops(&h, 1);
        dm_ops_init(&f, &c);
        result u = unfused(&h, x, W, ids, N, D, V);
        result b = fused(&h, x, W, ids, N, D, V, R);
        result r = fused(&f, x, W, ids, N, D, V, R);
        long fw = ran_by(&h, DM_FWD, "reference-bf16"), bw = ran_by(&h, DM_BWD, "reference-bf16");
        CHECKF(fw == 1 && bw == 1, "V %d: reference-bf16 ran %ld/%ld of the calls", V, fw, bw);
        double el = fabs(b.loss - u.loss) / fabs(u.loss), ell = rel(b.losses, u.losses, N);
        double edx = rel(b.dx, u.dx, (size_t)N * D), edw = rel(b.dW, u.dW, (size_t)V * D);
        double fl = fabs(b.loss - r.loss) / fabs(r.loss);
        double fdx = rel(b.dx, r.dx, (size_t)N * D), fdw = rel(b.dW, r.dW, (size_t)V * D);
        printf("  V %d N %d R %d: fused vs unfused bf16: loss %.1e losses %.1e dx %.1e dW %.1e;"
               " vs fp32: loss %.1e dx %.1e dW %.1e\n", V, N, R, el, ell, edx, edw, fl, fdx, fdw);
        CHECKF(el <= 1e-6 && ell <= 1e-6 && edx <= 1e-6 && edw <= 1e-6,
               "V %d: fused vs unfused bf16: loss %.3e losses %.3e dx %.3e dW %.3e", V, el, ell,
               edx, edw);
        CHECKF(fdx > 1e-4 && fdw > 1e-4, "V %d: bf16 dx %.3e dW %.3e from fp32: not rounded?",
               V, fdx, fdw);
        CHECKF(fl <= 1e-3 && fdx <= 3e-2 && fdw <= 3e-2,
               "V %d: bf16 vs fp32: loss %.3e dx %.3e dW %.3e", V, fl, fdx, fdw);
        result_free(&u), result_free(&b), result_free(&r);
        dm_ops_free(&h), dm_ops_free(&f);
        free(x), free(W), free(ids);
    }
}

/* On a CPU with bf16: the fused head on oneDNN's bf16 matmul against the reference bf16
 * path (verify mode: the same rounded operands, only the order of the f32 sums differs),
 * within the verify bound. Skipped, with the reason, elsewhere. */
TEST(head_xent_bf16_hardware_matches_reference) {
    dm_ops h;
    bf16_ops(&h, 0);
    if (h.bf16_why) {
        t_skip("%s", h.bf16_why);
        dm_ops_free(&h);
        return;
    }
    int V = 4096, N = 100, D = 64, R = 32;
    float *x = t_alloc((size_t)N * D), *W = t_alloc((size_t)V * D);
    t_fill_normal(x, (size_t)N * D, 3, 1.0f);
    t_fill_normal(W, (size_t)V * D, 4, 0.3f);
    void *ids = draw_ids(N, V, 5);
    h.verify = 1;
    result b = fused(&h, x, W, ids, N, D, V, R);
    char what[64];
    double vmax = dm_ops_verify_take(&h, what, sizeof what);
    long fw = ran_by(&h, DM_FWD, "onednn-bf16"), bw = ran_by(&h, DM_BWD, "onednn-bf16");
    printf("  V %d N %d R %d: oneDNN bf16 vs reference bf16 %.2g (%s)\n", V, N, R, vmax, what);
    CHECKF(fw == 1 && bw == 1, "onednn-bf16 ran %ld/%ld of the calls", fw, bw);
    CHECKF(vmax >= 0 && vmax <= DM_VERIFY_BOUND, "verify %.3e (%s)", vmax, what);
    result_free(&b);
    dm_ops_free(&h);
    free(x), free(W), free(ids);
}

/* A model of tokens (vocab 1000) whose products run in bf16 (the reference bf16 path, as
 * on a CPU without bf16): the fused head runs in bf16 (head_xent by reference-bf16 once each
 * way), the loss is within 1e-3 relative of the same model's in fp32 and differs from it
 * (the rounding is there), and the head's gradient within cosine 0.999. */
TEST(head_xent_bf16_model_close_to_fp32) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32, c.n_layer = 1, c.n_head = 2, c.head_dim = 16, c.gate_rank = 8;
    c.vocab = 1000, c.tie_embeddings = 0, c.precision = DM_PRECISION_FP32;
    int B = 2, T = 45;
    void *ids = draw_ids(B * (T + 1), c.vocab, 8);
    char err[256];
    dm_model *f = dm_model_create(&c, err, sizeof err), *h = dm_model_create(&c, err, sizeof err);
    CHECKF(f && h, "%s", err);
    if (!f || !h) return;
    h->ops.precision = DM_PRECISION_BF16;
    h->ops.bf16_why = "pretend: the reference bf16 path";
    size_t np = dm_model_num_params(f);
    memcpy(dm_model_params(h), dm_model_params(f), np * sizeof(float));
    float lf = dm_model_forward(f, ids, B, T, NULL), lh = dm_model_forward(h, ids, B, T, NULL);
    dm_model_zero_grad(f), dm_model_zero_grad(h);
    dm_model_backward(f), dm_model_backward(h);
    long fw = ran_by(&h->ops, DM_FWD, "reference-bf16"), bw = ran_by(&h->ops, DM_BWD,
                                                                      "reference-bf16");
    const dm_tensor *t = NULL;
    for (int i = 0; i < dm_model_num_tensors(f); i++)
        if (strcmp(dm_model_tensor(f, i)->name, "lm_head") == 0) t = dm_model_tensor(f, i);
    CHECK(t != NULL);
    double ab = 0, aa = 0, bb = 0;
    for (size_t j = 0; t && j < t->numel; j++) {
        double x = dm_model_grads(f)[t->offset + j], y = dm_model_grads(h)[t->offset + j];
        ab += x * y, aa += x * x, bb += y * y;
    }
    double cs = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
    printf("  loss fp32 %.7f bf16 %.7f (rel %.1e); lm_head gradient cosine %.6f\n", lf, lh,
           fabs(lh - lf) / lf, cs);
    CHECKF(fw == 1 && bw == 1, "reference-bf16 ran %ld/%ld of head_xent", fw, bw);
    CHECKF(lh != lf && fabs(lh - lf) <= 1e-3 * lf, "loss fp32 %.7f bf16 %.7f", lf, lh);
    CHECKF(cs >= 0.999, "lm_head gradient cosine %.6f", cs);
    dm_model_free(f), dm_model_free(h);
    free(ids);
}
