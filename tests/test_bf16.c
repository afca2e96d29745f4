/* test_bf16.c — bf16 mixed precision: the rounding to bf16, and the bf16 matmul
 * through the op layer — oneDNN's bf16 kernel against the reference bf16 path (the same
 * rounded operands through the f32 GEMM) in all three products, and bf16 against f32
 * within the error the rounding of the operands predicts. Cases that need hardware bf16
 * are skipped, with the reason, on a CPU without it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "check.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "model/model.h"
#include "backends/cpu/ctx.h" /* the bf16 copy of the weights */
#include "ops/matmul.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "io/data.h"
#include "optim/optim.h"
#include "optim/optim_internal.h" /* the optimizer's oneDNN context */

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

TEST(bf16_rounding) {
    /* value, its bf16 (as the upper half) */
    static const struct { uint32_t in; uint16_t out; } C[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: a tie, to even (down) */
        {0x3f818000u, 0x3f82}, /* 1 + 3*2^-8: a tie, to even (up) */
        {0x3f808001u, 0x3f81}, /* just above the tie: up */
        {0x3f807fffu, 0x3f80}, /* just below: down */
        {0x80000000u, 0x8000}, /* -0 */
        {0x7f800000u, 0x7f80}, /* inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7f7fffffu, 0x7f80}, /* the largest float rounds to inf */
        {0x00000001u, 0x0000}, /* the smallest denormal rounds to 0 */
    };
    int n = (int)(sizeof C / sizeof C[0]);
    for (int i = 0; i < n; i++) {
        float x = bits_f(C[i].in), r;
        uint16_t b;
        dm_bf16_from_f32(&b, &x, 1);
        dm_bf16_round(&r, &x, 1);
        CHECKF(b == C[i].out, "bf16(0x%08x) = 0x%04x, expected 0x%04x", C[i].in, b, C[i].out);
        CHECKF(f_bits(r) == (uint32_t)C[i].out << 16, "round(0x%08x) = 0x%08x", C[i].in, f_bits(r));
    }
    float nan = NAN, r;
    uint16_t b;
    dm_bf16_from_f32(&b, &nan, 1);
    dm_bf16_round(&r, &nan, 1);
    CHECK((b & 0x7f80) == 0x7f80 && (b & 0x7f) && isnan(r));
    /* in place, and the relative error of a rounding is at most 2^-8 (half an ulp of 8
     * significant bits) */
    size_t m = 100001;
    float *x = t_alloc(m), *y = t_alloc(m);
    t_fill_normal(x, m, 3, 10.0f);
    memcpy(y, x, m * sizeof(float));
    dm_bf16_round(y, y, m);
    double worst = 0;
    for (size_t i = 0; i < m; i++) {
        double e = fabs((double)y[i] - x[i]) / fabs((double)x[i]);
        if (e > worst) worst = e;
        CHECK((f_bits(y[i]) & 0xffff) == 0);
    }
    printf("  largest relative rounding error %.3g (bound 2^-8 = %.3g)\n", worst, ldexp(1, -8));
    CHECK(worst <= ldexp(1, -8) && worst > ldexp(1, -9)); /* and it does round */
    free(x);
    free(y);
}

/* The producers' bf16 copies (rmsnorm, the gated norm, SwiGLU: *_fwd_yb): y bitwise the
 * plain kernel's, and the copy bitwise dm_bf16_from_f32(y) — the rounding the separate
 * pass made, done in the producer — on shapes that leave partial blocks, with a NaN and
 * an infinity among the inputs; SwiGLU's copy over the threads too. */
TEST(bf16_copy_made_by_producers) {
    int R = 203, C = 96;
    size_t n = (size_t)R * C, ns = 3 * 65536 + 77; /* swiglu: parallel, a partial block */
    float *x = t_alloc(ns), *z = t_alloc(ns), *w = t_alloc(C), *y = t_alloc(ns),
          *y2 = t_alloc(ns), *r = t_alloc(R), *r2 = t_alloc(R);
    uint16_t *yb = malloc(ns * sizeof *yb), *want = malloc(ns * sizeof *want);
    t_fill_normal(x, ns, 11, 1.0f);
    t_fill_normal(z, ns, 12, 2.0f);
    t_fill_normal(w, C, 13, 1.0f);
    x[5] = NAN, x[C + 3] = INFINITY, z[7] = NAN;
    for (int k = 0; k < 4; k++) {
        const char *what = k == 0 ? "rmsnorm" : k == 1 ? "gatednorm sigmoid"
                         : k == 2 ? "gatednorm swish" : "swiglu";
        size_t len = k == 3 ? ns : n;
        memset(yb, 0xa5, ns * sizeof *yb);
        if (k == 0) {
            dm_rmsnorm_fwd(y, r, x, w, R, C, 1e-6f);
            dm_rmsnorm_fwd_yb(y2, yb, r2, x, w, R, C, 1e-6f);
        } else if (k < 3) {
            int act = k == 1 ? DM_GATE_SIGMOID : DM_GATE_SWISH;
            dm_gatednorm_fwd(y, r, x, z, w, R, C, 1e-6f, act);
            dm_gatednorm_fwd_yb(y2, yb, r2, x, z, w, R, C, 1e-6f, act);
        } else {
            dm_swiglu_fwd(y, x, z, ns);
            dm_swiglu_fwd_yb(y2, yb, x, z, ns);
        }
        dm_bf16_from_f32(want, y, len);
        CHECKF(memcmp(y, y2, len * sizeof(float)) == 0, "%s: y differs with the copy", what);
        if (k < 3) CHECKF(memcmp(r, r2, R * sizeof(float)) == 0, "%s: rstd differs", what);
        CHECKF(memcmp(yb, want, len * sizeof *yb) == 0, "%s: copy != bf16(y)", what);
    }
    CHECK(isnan(y[5]) && (yb[5] & 0x7f80) == 0x7f80 && (yb[5] & 0x7f)); /* NaN stays NaN */
    free(x), free(z), free(w), free(y), free(y2), free(r), free(r2), free(yb), free(want);
}

/* The backward's producers of output gradients (rmsnorm's dx, the gated norm's dz,
 * SwiGLU's da and db, the conv's dx, the gate's df, xent's dlogits: *_bwd_yb): every f32
 * output bitwise the plain
 * kernel's, and each copy bitwise dm_bf16_from_f32 of its gradient (rmsnorm's of the
 * accumulated dx), on shapes with partial blocks, over the threads, with a NaN and an
 * infinity among the inputs. */
TEST(bf16_grad_copy_made_by_producers) {
    int R = 203, C = 96, B = 3, T = 61, W = 4;
    size_t n = (size_t)R * C, ns = 3 * 65536 + 77, m = ns > n ? ns : n;
    float *x = t_alloc(m), *z = t_alloc(m), *dy = t_alloc(m), *w = t_alloc(C * W),
          *r = t_alloc(R), *g1 = t_alloc(m), *g2 = t_alloc(m), *h1 = t_alloc(m),
          *h2 = t_alloc(m), *dw1 = t_alloc(C * W), *dw2 = t_alloc(C * W);
    uint16_t *gb = malloc(m * sizeof *gb), *hb = malloc(m * sizeof *hb),
             *want = malloc(m * sizeof *want);
    uint8_t *tgt = malloc(R);
    float A_log[1] = {0.3f}, dA1[1], dA2[1];
    for (int i = 0; i < R; i++) tgt[i] = (uint8_t)((i * 37) % C);
    t_fill_normal(x, m, 21, 1.0f);
    t_fill_normal(z, m, 22, 2.0f);
    t_fill_normal(dy, m, 23, 1.0f);
    t_fill_normal(w, C * W, 24, 1.0f);
    for (int i = 0; i < R; i++) r[i] = 0.5f + (float)i / R;
    dy[5] = NAN, dy[C + 3] = INFINITY, x[2 * C + 1] = NAN;
    for (int k = 0; k < 8; k++) {
        const char *what = k == 0 ? "rmsnorm" : k == 1 ? "gatednorm sigmoid"
                         : k == 2 ? "gatednorm swish" : k == 3 ? "swiglu" : k == 4 ? "conv"
                         : k == 5 ? "gate softplus" : k == 6 ? "gate sigmoid" : "xent";
        size_t len = k == 3 ? ns : k == 4 ? (size_t)B * T * C : n;
        memset(gb, 0xa5, m * sizeof *gb);
        memset(hb, 0xa5, m * sizeof *hb);
        t_fill_normal(g1, m, 25, 1.0f); /* rmsnorm accumulates into dx */
        memcpy(g2, g1, m * sizeof *g1);
        memset(dw1, 0, C * W * sizeof *dw1), memset(dw2, 0, C * W * sizeof *dw2);
        dA1[0] = dA2[0] = 0.0f;
        const float *got = g2, *got2 = NULL;
        if (k == 0) {
            dm_rmsnorm_bwd(g1, dw1, dy, x, w, r, R, C);
            dm_rmsnorm_bwd_yb(g2, gb, dw2, dy, x, w, r, R, C);
        } else if (k < 3) {
            int act = k == 1 ? DM_GATE_SIGMOID : DM_GATE_SWISH;
            dm_gatednorm_bwd(g1, h1, dw1, dy, x, z, w, r, R, C, act);
            dm_gatednorm_bwd_yb(g2, h2, gb, dw2, dy, x, z, w, r, R, C, act);
            got = h2;
        } else if (k == 3) {
            dm_swiglu_bwd(g1, h1, dy, x, z, ns);
            dm_swiglu_bwd_yb(g2, h2, gb, hb, dy, x, z, ns);
            got2 = h2;
        } else if (k == 4) {
            dm_conv_bwd(g1, dw1, dy, x, w, B, T, C, W);
            dm_conv_bwd_yb(g2, gb, dw2, dy, x, w, B, T, C, W);
        } else if (k < 7) { /* [R, 1 head, C channels]: a full and a partial channel block */
            float lb = k == 5 ? 0.0f : -5.0f;
            dm_gate_bwd(g1, dA1, dw1, dy, x, A_log, w, R, 1, C, lb);
            dm_gate_bwd_yb(g2, gb, dA2, dw2, dy, x, A_log, w, R, 1, C, lb);
            CHECKF(memcmp(dA1, dA2, sizeof dA1) == 0, "%s: dA_log differs", what);
        } else {
            dm_xent_bwd(g1, x, tgt, R, C, 0.25f);
            dm_xent_bwd_yb(g2, gb, x, tgt, R, C, 0.25f);
        }
        CHECKF(memcmp(g1, g2, len * sizeof(float)) == 0, "%s: dx differs with the copy", what);
        if (k == 1 || k == 2 || k == 3)
            CHECKF(memcmp(h1, h2, len * sizeof(float)) == 0, "%s: dz/db differs", what);
        if (k != 3)
            CHECKF(memcmp(dw1, dw2, C * W * sizeof(float)) == 0, "%s: dw differs", what);
        dm_bf16_from_f32(want, got, len);
        CHECKF(memcmp(gb, want, len * sizeof *gb) == 0, "%s: copy != bf16(gradient)", what);
        if (got2) {
            dm_bf16_from_f32(want, got2, len);
            CHECKF(memcmp(hb, want, len * sizeof *hb) == 0, "%s: db copy != bf16(db)", what);
        }
    }
    free(x), free(z), free(dy), free(w), free(r), free(g1), free(g2), free(h1), free(h2);
    free(dw1), free(dw2), free(gb), free(hb), free(want), free(tgt);
}

/* an op layer with bf16 asked for */
static void bf16_ops(dm_ops *ops) {
    dm_config c;
    dm_config_default(&c);
    dm_ops_init(ops, &c);
    ops->precision = DM_PRECISION_BF16;
}

/* the three products of matmul on random data: out, din, dW (dbias) */
typedef struct { float *out, *din, *dW, *db; } mm_out;
static void mm_all(dm_ops *ops, const float *in, const float *W, const float *b, const float *dy,
                   int N, int K, int O, mm_out *r) {
    dm_op_matmul_fwd(ops, dm_bm(r->out), dm_bm(in), dm_bm(W), dm_bm(b), N, K, O);
    memset(r->dW, 0, (size_t)O * K * sizeof(float));
    memset(r->db, 0, (size_t)O * sizeof(float));
    dm_op_matmul_bwd(ops, dm_bm(r->din), dm_bm(r->dW), dm_bm(r->db), dm_bm(dy), dm_bm(in),
                     dm_bm(W), N, K, O, 0);
}
static mm_out mm_alloc(int N, int K, int O) {
    return (mm_out){t_alloc((size_t)N * O), t_alloc((size_t)N * K), t_alloc((size_t)O * K),
                    t_alloc((size_t)O)};
}
static void mm_free(mm_out *r) {
    free(r->out);
    free(r->din);
    free(r->dW);
    free(r->db);
}

static const int SHAPES[][3] = {{64, 64, 64}, {37, 17, 5}, {100, 256, 64}, {129, 65, 33},
                                {4096, 256, 4}, {512, 768, 256}};

/* oneDNN's bf16 kernel against the reference bf16 path on the same rounded operands: the
 * only difference left is the order of the f32 sums */
TEST(bf16_matmul_onednn_matches_reference) {
    dm_ops ops;
    bf16_ops(&ops);
    if (ops.bf16_why) {
        t_skip("%s", ops.bf16_why);
        dm_ops_free(&ops);
        return;
    }
    double worst = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        int N = SHAPES[s][0], K = SHAPES[s][1], O = SHAPES[s][2];
        float *in = t_alloc((size_t)N * K), *W = t_alloc((size_t)O * K), *b = t_alloc(O);
        float *dy = t_alloc((size_t)N * O);
        t_fill_normal(in, (size_t)N * K, 1 + s, 1.0f);
        t_fill_normal(W, (size_t)O * K, 2 + s, 0.1f);
        t_fill_normal(b, O, 3 + s, 1.0f);
        t_fill_normal(dy, (size_t)N * O, 4 + s, 1.0f);
        mm_out a = mm_alloc(N, K, O), r = mm_alloc(N, K, O);
        mm_all(&ops, in, W, b, dy, N, K, O, &a);
        long dnn = ops.ran[DM_OP_MATMUL][DM_FWD][0] + ops.ran[DM_OP_MATMUL][DM_BWD][0] +
                   ops.ran[DM_OP_MATMUL][DM_BWD_W][0];
        const char *saved = ops.bf16_why;
        ops.bf16_why = "pretend: the reference bf16 path"; /* the oneDNN bf16 kernel declines */
        mm_all(&ops, in, W, b, dy, N, K, O, &r);
        ops.bf16_why = saved;
        double e[4] = {t_rel_rms_ff(a.out, r.out, (size_t)N * O),
                       t_rel_rms_ff(a.din, r.din, (size_t)N * K),
                       t_rel_rms_ff(a.dW, r.dW, (size_t)O * K), t_rel_rms_ff(a.db, r.db, O)};
        printf("  %dx%dx%d: oneDNN bf16 vs reference bf16: out %.2g din %.2g dW %.2g dbias %.2g\n",
               N, K, O, e[0], e[1], e[2], e[3]);
        CHECKF(dnn == 3 * (long)(s + 1), "oneDNN ran %ld of the products", dnn);
        for (int i = 0; i < 4; i++) {
            CHECKF(e[i] <= 1e-6, "%dx%dx%d product %d: %.3g", N, K, O, i, e[i]);
            if (e[i] > worst) worst = e[i];
        }
        free(in); free(W); free(b); free(dy);
        mm_free(&a);
        mm_free(&r);
    }
    printf("  worst %.3g (bound 1e-6)\n", worst);
    dm_ops_free(&ops);
}

/* oneDNN's bf16 product written in bf16 (dm_onednn_gemm_bf16_c16, tiled, and _here on
 * one thread): bitwise bf16 of its f32 output, on shapes with partial tiles, transposed
 * operands and an output scale (Newton-Schulz writes its next X so). The f32 outputs
 * here are far from the denormals, which oneDNN's conversion flushes. */
TEST(bf16_matmul_bf16_output_is_rounded_f32_output) {
    const char *why = dm_cpu_bf16_missing();
    dm_onednn *d = why ? NULL : dm_onednn_create(&why);
    if (!d) {
        t_skip("%s", why);
        return;
    }
    static const int S[][5] = {{64, 64, 64, 0, 0}, {129, 65, 33, 0, 1}, {256, 768, 256, 0, 0},
                               {768, 256, 256, 0, 1}, {70, 300, 90, 1, 0}};
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        int M = S[i][0], N = S[i][1], K = S[i][2], ta = S[i][3], tb = S[i][4];
        int lda = ta ? M : K, ldb = tb ? K : N;
        float *a = t_alloc((size_t)M * K), *b = t_alloc((size_t)K * N), *c = t_alloc((size_t)M * N);
        uint16_t *ab = malloc((size_t)M * K * 2), *bb = malloc((size_t)K * N * 2);
        uint16_t *want = malloc((size_t)M * N * 2), *got = malloc((size_t)M * N * 2);
        t_fill_normal(a, (size_t)M * K, 40 + i, 1.0f);
        t_fill_normal(b, (size_t)K * N, 50 + i, 1.0f);
        dm_bf16_from_f32(ab, a, (size_t)M * K);
        dm_bf16_from_f32(bb, b, (size_t)K * N);
        float alpha = 0.75f;
        dm_onednn_gemm_bf16(d, ta, tb, M, N, K, alpha, ab, lda, bb, ldb, 0.0f, c, N);
        dm_bf16_from_f32(want, c, (size_t)M * N);
        dm_onednn_gemm_bf16_c16(d, ta, tb, M, N, K, alpha, ab, lda, bb, ldb, got, N);
        CHECKF(memcmp(got, want, (size_t)M * N * 2) == 0, "%dx%dx%d tiled: bf16 out != bf16(f32 out)",
               M, N, K);
        /* the whole product on this thread (NS's stack path) */
        CHECK(dm_onednn_gemm_bf16_here(d, 0, ta, tb, M, N, K, alpha, ab, lda, bb, ldb, 0.0f, c,
                                       N, 0) == 0);
        dm_bf16_from_f32(want, c, (size_t)M * N);
        CHECK(dm_onednn_gemm_bf16_here(d, 0, ta, tb, M, N, K, alpha, ab, lda, bb, ldb, 0.0f, got,
                                       N, 1) == 0);
        CHECKF(memcmp(got, want, (size_t)M * N * 2) == 0, "%dx%dx%d here: bf16 out != bf16(f32 out)",
               M, N, K);
        free(a), free(b), free(c), free(ab), free(bb), free(want), free(got);
    }
    dm_onednn_free(d);
}

/* The first-order error of rounding the operands of C = A B (A [M,K], B [K,N], entry
 * (m,k) of A at A[m*sam + k*sak], of B at B[k*sbk + n*sbn]): for each output, the sum
 * over k of (a b)^2 (ea^2 + eb^2), ea, eb the relative rounding errors; returned as the
 * RMS over outputs relative to the RMS of C. */
static double predicted(const float *A, size_t sam, size_t sak, const float *B, size_t sbk,
                        size_t sbn, int M, int K, int N) {
    size_t na = (size_t)(M - 1) * sam + (size_t)(K - 1) * sak + 1; /* the extents */
    size_t nb = (size_t)(K - 1) * sbk + (size_t)(N - 1) * sbn + 1;
    float *ra = t_alloc(na), *rb = t_alloc(nb); /* the rounded operands */
    dm_bf16_round(ra, A, na);
    dm_bf16_round(rb, B, nb);
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double v = 0, c = 0;
            for (int k = 0; k < K; k++) {
                size_t ia = m * sam + k * sak, ib = k * sbk + n * sbn;
                double a = A[ia], b = B[ib], p = a * b;
                double ea = a != 0 ? (ra[ia] - a) / a : 0, eb = b != 0 ? (rb[ib] - b) / b : 0;
                v += p * p * (ea * ea + eb * eb);
                c += p;
            }
            num += v;
            den += c * c;
        }
    free(ra);
    free(rb);
    return sqrt(num / den);
}

/* bf16 against f32: the reference bf16 path runs everywhere, so this holds on any CPU */
TEST(bf16_matmul_error_as_predicted) {
    dm_ops ops, f32;
    bf16_ops(&ops);
    ops.bf16_why = "pretend: the reference bf16 path";
    dm_config c;
    dm_config_default(&c);
    c.gemm = DM_GEMM_OPENBLAS;
    c.precision = DM_PRECISION_FP32;
    dm_ops_init(&f32, &c);
    for (size_t s = 0; s < 4; s++) {
        int N = SHAPES[s][0], K = SHAPES[s][1], O = SHAPES[s][2];
        float *in = t_alloc((size_t)N * K), *W = t_alloc((size_t)O * K), *b = t_alloc(O);
        float *dy = t_alloc((size_t)N * O);
        t_fill_normal(in, (size_t)N * K, 11 + s, 1.0f);
        t_fill_normal(W, (size_t)O * K, 12 + s, 0.1f);
        t_fill_normal(dy, (size_t)N * O, 14 + s, 1.0f);
        mm_out a = mm_alloc(N, K, O), r = mm_alloc(N, K, O);
        mm_all(&ops, in, W, b, dy, N, K, O, &a);
        mm_all(&f32, in, W, b, dy, N, K, O, &r);
        /* out = in W^T; din = dy W; dW = dy^T in */
        double p[3] = {predicted(in, K, 1, W, 1, K, N, K, O), predicted(dy, O, 1, W, K, 1, N, O, K),
                       predicted(dy, 1, O, in, K, 1, O, N, K)};
        double e[3] = {t_rel_rms_ff(a.out, r.out, (size_t)N * O),
                       t_rel_rms_ff(a.din, r.din, (size_t)N * K),
                       t_rel_rms_ff(a.dW, r.dW, (size_t)O * K)};
        printf("  %dx%dx%d: bf16 vs f32 out %.3g (predicted %.3g) din %.3g (%.3g) dW %.3g (%.3g)\n",
               N, K, O, e[0], p[0], e[1], p[1], e[2], p[2]);
        for (int i = 0; i < 3; i++)
            CHECKF(e[i] >= 0.7 * p[i] && e[i] <= 1.3 * p[i],
                   "%dx%dx%d product %d: error %.3g, predicted %.3g", N, K, O, i, e[i], p[i]);
        free(in); free(W); free(b); free(dy);
        mm_free(&a);
        mm_free(&r);
    }
    dm_ops_free(&ops);
    dm_ops_free(&f32);
}

/* ---- the whole model in bf16 ---- */

static dm_config small_cfg(void) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 64;
    c.n_layer = 2;
    c.n_head = 2;
    c.head_dim = 32;
    c.gate_rank = 16;
    c.chunk_size = 16;
    c.warmup_steps = 5;
    c.steps = 50;
    return c;
}

static void text_tokens(uint8_t *t, size_t n, size_t shift) {
    static const char txt[] =
        "In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep. And the Spirit of God "
        "moved upon the face of the waters. And God said, Let there be light: and there was ";
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)txt[(i * 7 + shift) % (sizeof txt - 1)];
}

/* a model whose products run in bf16: the hardware kernel where the CPU has it, else the
 * reference bf16 path (precision=bf16 semantics, set on the op layer) */
static dm_model *model_in(const dm_config *c, int bf16) {
    char err[256];
    dm_config f = *c;
    f.precision = DM_PRECISION_FP32;
    dm_model *m = dm_model_create(&f, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (m && bf16) m->ops.precision = DM_PRECISION_BF16;
    return m;
}

static float loss_grads(dm_model *m, const uint8_t *tok, int B, int T) {
    float l = dm_model_forward(m, tok, B, T, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    return l;
}

/* worst per-tensor cosine similarity of two gradient buffers of model m's layout */
static double worst_cosine(const dm_model *m, const float *a, const float *b, const char **name) {
    double worst = 2;
    for (int i = 0; i < dm_model_num_tensors(m); i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        double ab = 0, aa = 0, bb = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double x = a[t->offset + j], y = b[t->offset + j];
            ab += x * y;
            aa += x * x;
            bb += y * y;
        }
        double cs = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
        if (cs < worst) {
            worst = cs;
            *name = t->name;
        }
    }
    return worst;
}

/* fp32 and bf16 on the same weights: their losses on one batch, and the worst per-tensor
 * cosine of their gradients */
static void compare_on(dm_model *f, dm_model *h, const uint8_t *tok, int B, int T,
                       const char *when) {
    size_t np = dm_model_num_params(f);
    float *gf = t_alloc(np);
    memcpy(dm_model_params(h), dm_model_params(f), np * sizeof(float));
    float lf = loss_grads(f, tok, B, T);
    memcpy(gf, dm_model_grads(f), np * sizeof(float));
    float lh = loss_grads(h, tok, B, T);
    const char *worst_t = "";
    double cs = worst_cosine(f, gf, dm_model_grads(h), &worst_t);
    printf("  %s: loss fp32 %.6f bf16 %.6f (rel %.2g); worst gradient cosine %.6f (%s)\n", when,
           lf, lh, fabs(lh - lf) / lf, cs, worst_t);
    CHECKF(fabs(lh - lf) <= 1e-2 * lf, "%s: loss fp32 %.6f vs bf16 %.6f", when, lf, lh);
    CHECKF(cs >= 0.999, "%s: gradient cosine %.6f at %s", when, cs, worst_t);
    free(gf);
}

/* bf16 within 1e-2 relative of fp32 in the loss and every tensor's gradient within cosine
 * 0.999 of the fp32 one, on the same weights (at init, and at the fp32 model's weights
 * after 50 steps); and after 50 steps of training each from the same init on batches of
 * the bundled corpus, beside fp32 over the other GEMM backend (the spread that rounding
 * order alone makes) */
TEST(bf16_model_close_to_fp32) {
    dm_config c = small_cfg(), co = c;
    co.gemm = c.gemm == DM_GEMM_OPENBLAS ? DM_GEMM_ONEDNN : DM_GEMM_OPENBLAS;
    int B = 8, T = 64;
    char err[256];
    dm_corpus corpus;
    CHECKF(dm_corpus_load(&corpus, DM_SOURCE_DIR "/data/kjv.txt.gz", err, sizeof err) == 0, "%s",
           err);
    uint8_t *tok = malloc((size_t)B * (T + 1));
    dm_model *f = model_in(&c, 0), *h = model_in(&c, 1), *g = model_in(&co, 0);
    if (!f || !h || !g) return;
    dm_optim *of = dm_optim_create(f, &c, err, sizeof err), *oh = dm_optim_create(h, &c, err, sizeof err);
    dm_optim *og = dm_optim_create(g, &co, err, sizeof err);
    dm_corpus_batch(&corpus, 1, 1000, B, T, tok);
    compare_on(f, h, tok, B, T, "at init");
    float lf = 0, lh = 0, lg = 0;
    for (int s = 0; s < 50; s++) {
        dm_corpus_batch(&corpus, 1, s, B, T, tok);
        lf = loss_grads(f, tok, B, T);
        dm_optim_step(of, f, s);
        lh = loss_grads(h, tok, B, T);
        dm_optim_step(oh, h, s);
        lg = loss_grads(g, tok, B, T);
        dm_optim_step(og, g, s);
    }
    printf("  50 steps each: loss fp32 %.6f bf16 %.6f (rel %.2g); fp32 on the other GEMM "
           "backend %.6f (rel %.2g)\n", lf, lh, fabs(lh - lf) / lf, lg, fabs(lg - lf) / lf);
    CHECKF(fabs(lh - lf) <= 1e-2 * lf, "after 50 steps: fp32 %.6f vs bf16 %.6f", lf, lh);
    char table[8192];
    dm_model_dispatch_table(h, table, sizeof table);
    const char *line = strstr(table, "matmul.fwd");
    printf("  %.*s\n", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    CHECK(line && strstr(line, "-bf16")); /* the bf16 products ran */
    dm_corpus_batch(&corpus, 1, 1000, B, T, tok);
    compare_on(f, h, tok, B, T, "at the fp32 weights after 50 steps");
    dm_corpus_free(&corpus);
    free(tok);
    dm_optim_free(of);
    dm_optim_free(oh);
    dm_optim_free(og);
    dm_model_free(f);
    dm_model_free(h);
    dm_model_free(g);
}

/* The guard: precision=auto declines to fp32 where the CPU lacks bf16 (pretended with
 * DM_CPU_NO_BF16), with the reason counted; precision=bf16 there is an error at start;
 * with the feature, auto runs every product on the bf16 kernel. */
TEST(bf16_guard_auto_and_explicit) {
    dm_config c = small_cfg();
    uint8_t tok[2 * 41];
    text_tokens(tok, sizeof tok, 1);
    char err[256] = "", rep[4096];
    setenv("DM_CPU_NO_BF16", "1", 1);
    c.precision = DM_PRECISION_BF16;
    dm_model *m = dm_model_create(&c, err, sizeof err);
    printf("  precision=bf16, no bf16: %s\n", err);
    CHECK(m == NULL && strstr(err, "precision=bf16: cpu lacks avx512_bf16") &&
          strstr(err, "use precision=auto or fp32"));
    c.precision = DM_PRECISION_AUTO;
    m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (!m) return;
    loss_grads(m, tok, 2, 40);
    dm_model_dispatch_report(m, rep, sizeof rep);
    printf("  precision=auto, no bf16: %.160s\n", strstr(rep, "[") ? strstr(rep, "[") : rep);
    CHECK(strstr(rep, "matmul onednn-bf16: 25 (cpu lacks avx512_bf16") != NULL);
    CHECK(strstr(rep, "reference-bf16") == NULL);
    CHECK(m->ops.ran[DM_OP_MATMUL][DM_FWD][0] == 0 && m->ops.ran[DM_OP_MATMUL][DM_FWD][1] == 0);
    dm_model_free(m);
    unsetenv("DM_CPU_NO_BF16");
    m = dm_model_create(&c, err, sizeof err);
    if (m->ops.bf16_why) {
        t_skip("%s (the auto-with-bf16 half)", m->ops.bf16_why);
        dm_model_free(m);
        return;
    }
    loss_grads(m, tok, 2, 40);
    CHECK(m->ops.ran[DM_OP_MATMUL][DM_FWD][0] == 25 && m->ops.ran[DM_OP_MATMUL][DM_BWD_W][0] == 25);
    dm_model_free(m);
}

/* The precision record (ops/precision.h) is decided once, at model creation, and every
 * reader agrees with it: the model's bf16 weight copy, its plan (the arena's bf16 copies),
 * the memory report of the model and the plan made without one, the op layer, Muon's
 * Newton-Schulz context, and the line bench and the run's summary print. precision=auto
 * and ns_precision=auto on a CPU pretended to lack bf16 (DM_CPU_NO_BF16), then on this CPU
 * as it is; the refusals of precision=bf16 and ns_precision=bf16 where bf16 is missing are
 * one text. */
TEST(precision_record_readers_agree) {
    char err[256] = "";
    const int B = 2, T = 32;
    for (int pretend = 1; pretend >= 0; pretend--) {
        if (pretend) setenv("DM_CPU_NO_BF16", "1", 1);
        else unsetenv("DM_CPU_NO_BF16");
        dm_config c = small_cfg();
        c.precision = DM_PRECISION_AUTO;
        c.ns_precision = DM_PRECISION_AUTO;
        dm_model *m = dm_model_create(&c, err, sizeof err);
        CHECKF(m != NULL, "%s", err);
        if (!m) break;
        const dm_precision rec = *dm_model_precision(m), *r = &rec;
        printf("  %s: matmuls %s, Newton-Schulz %s (%s)\n", pretend ? "pretended" : "this CPU",
               r->matmul_bf16 ? "bf16" : "fp32", r->ns_bf16 ? "bf16" : "fp32",
               r->why ? r->why : r->ns_why ? r->ns_why : "bf16 available");
        if (pretend)
            CHECK(!r->matmul_bf16 && !r->ns_bf16 && r->why && strstr(r->why, "DM_CPU_NO_BF16") &&
                  r->ns_why == r->why);
        CHECK(r->matmul_bf16 == !r->why);
        CHECK((dm_cpu_ctx_of(&m->ops)->wts_bf16 != NULL) == r->matmul_bf16); /* the copy */
        CHECK((m->plan.side > 0) == r->matmul_bf16); /* the copies' room */
        CHECK(dm_ops_bf16_active(&m->ops) == r->matmul_bf16);
        CHECK(dm_model_reserve(m, B, T, err, sizeof err) == 0);
        dm_memory mem, plan;
        CHECK(dm_model_memory(m, &mem) == 0);
        CHECK((mem.params_bf16 > 0) == r->matmul_bf16);
        CHECK(dm_memory_plan(&c, B, T, 1, &plan, err, sizeof err) == 0);
        CHECK(plan.params_bf16 == mem.params_bf16);
        dm_config f = c;
        f.precision = DM_PRECISION_FP32;
        size_t a_auto = dm_model_arena_bytes(&c, B, T, 1);
        size_t a_fp32 = dm_model_arena_bytes(&f, B, T, 1);
        CHECKF(r->matmul_bf16 ? a_auto > a_fp32 : a_auto == a_fp32,
               "arena %zu bytes at auto, %zu at fp32", a_auto, a_fp32);
        dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
        CHECKF(o != NULL, "%s", err);
        if (o) CHECK((o->muon ? o->muon->ns_bf16 : 0) == r->ns_bf16);
        char line[256]; /* what bench and the run's summary print */
        dm_precision_describe(r, line, sizeof line);
        CHECKF(strstr(line, r->matmul_bf16 ? "matmuls bf16" : "matmuls fp32") &&
               strstr(line, r->ns_bf16 ? "Newton-Schulz bf16" : "Newton-Schulz fp32") &&
               (!r->why || strstr(line, r->why)), "%s", line);
        dm_optim_free(o);
        dm_model_free(m);
        if (r->why && !pretend) t_skip("the half with hardware bf16: %s", r->why);
        if (!r->why) continue;
        /* where bf16 is missing, asking for it is refused at creation, in one text */
        static const char *KEY[2] = {"precision", "ns_precision"};
        for (int k = 0; k < 2; k++) {
            dm_config b = small_cfg();
            if (k == 0) b.precision = DM_PRECISION_BF16;
            else b.ns_precision = DM_PRECISION_BF16;
            char want[256];
            snprintf(want, sizeof want, "%s=bf16: %s; use %s=auto or fp32", KEY[k], r->why, KEY[k]);
            err[0] = 0;
            dm_model *x = dm_model_create(&b, err, sizeof err);
            CHECKF(x == NULL && strcmp(err, want) == 0, "%s=bf16: got \"%s\"", KEY[k], err);
            dm_model_free(x);
        }
    }
    unsetenv("DM_CPU_NO_BF16");
}

/* bf16 gives the same bits on 1, 2, 3 and 8 threads */
TEST(bf16_determinism_threads) {
    static const int NT[] = {2, 1, 3, 8};
    dm_config c = small_cfg();
    uint8_t tok[4 * 65];
    text_tokens(tok, sizeof tok, 5);
    size_t np = 0;
    float *g0 = NULL, l0 = 0;
    int saved = omp_get_max_threads();
    for (int i = 0; i < 4; i++) {
        c.threads = NT[i]; /* the model's policy sets its pool */
        dm_model *m = model_in(&c, 1);
        if (!m) break;
        CHECK(omp_get_max_threads() == NT[i]);
        float l = loss_grads(m, tok, 4, 64);
        if (i == 0) {
            np = dm_model_num_params(m);
            g0 = t_alloc(np);
            memcpy(g0, dm_model_grads(m), np * sizeof(float));
            l0 = l;
        } else {
            CHECKF(memcmp(&l, &l0, sizeof l) == 0, "%d threads: loss %.9g vs %.9g", NT[i], l, l0);
            CHECKF(memcmp(dm_model_grads(m), g0, np * sizeof(float)) == 0,
                   "%d vs 2 threads: gradients differ", NT[i]);
        }
        dm_model_free(m);
    }
    dm_set_threads(saved);
    printf("  bf16 loss %.9g: the same bits at 1, 2, 3 and 8 threads\n", l0);
    free(g0);
}

/* The bf16 copies a model makes (the producers' copies of activations and gradients, the
 * copies rounded once, the model's bf16 weights refreshed after each step) hold exactly
 * bf16 of their tensors when the products read them: a model whose products read the
 * copies (the reference bf16 path standing in for the CPU's kernel: DM_CPU_BF16_REFERENCE,
 * with DM_CPU_NO_BF16 so that it stands in on any CPU) against the same model whose
 * products round every operand themselves (the reference bf16 path as the oracle, no
 * copies made), 3 steps of Muon each: every loss and the weights after them the same bits.
 * The byte KDA model without and with balanced checkpointing (copies made again by the
 * recompute), a GDN model, and a model of tokens (vocabulary 300: the fused head). And
 * the copies are where the products read them: in a step without checkpointing the only
 * passes that round apart from a producer (the atlas's round_bf16) are KDA's low-rank
 * hiddens f1, z1 (matmul outputs) and the gradients dr (2 a layer) and dbeta, which no
 * op with a room makes: 5 a layer for KDA, 1 for GDN; and the fused head's dlogits, once
 * a chunk. */
TEST(bf16_copies_read_as_made) {
    setenv("DM_CPU_NO_BF16", "1", 1);
    setenv("DM_CPU_BF16_REFERENCE", "1", 1);
    for (int k = 0; k < 4; k++) {
        const char *what = k == 0 ? "kda" : k == 1 ? "kda, balanced checkpointing"
                         : k == 2 ? "gdn" : "kda, vocabulary 300";
        dm_config c = small_cfg(), f = small_cfg();
        if (k == 1) c.checkpointing = f.checkpointing = DM_CKPT_BALANCED;
        if (k == 2) c.mixer = f.mixer = DM_MIXER_GDN;
        if (k == 3) c.vocab = f.vocab = 300, c.tie_embeddings = f.tie_embeddings = 0;
        f.precision = DM_PRECISION_FP32;
        char err[256];
        dm_model *a = dm_model_create(&c, err, sizeof err);
        dm_model *b = dm_model_create(&f, err, sizeof err);
        CHECKF(a && b, "%s: %s", what, err);
        if (!a || !b) break;
        b->ops.precision = DM_PRECISION_BF16; /* the oracle: no copies, every operand rounded */
        const dm_policy *p = a->ops.policy;
        CHECKF(p && p->prec.matmul_bf16 && p->prec.matmul_via, "%s: the policy's matmuls are "
               "not bf16 on the stand-in", what);
        memcpy(dm_model_params(b), dm_model_params(a), dm_model_num_params(a) * sizeof(float));
        dm_optim *oa = dm_optim_create(a, &c, err, sizeof err);
        dm_optim *ob = dm_optim_create(b, &c, err, sizeof err);
        CHECKF(oa && ob, "%s: %s", what, err);
        int B = 2, T = 40, same = 1;
        uint8_t txt[2 * 41];
        uint16_t ids[2 * 41];
        float la = 0, lb = 0;
        dm_atlas *atlas = calloc(1, sizeof *atlas);
        for (int s = 0; s < 3 && oa && ob; s++) {
            dm_model_set_atlas(a, s == 2 ? atlas : NULL); /* the last step's passes */
            text_tokens(txt, sizeof txt, (size_t)s * 11);
            for (size_t i = 0; i < sizeof txt; i++) ids[i] = (uint16_t)(txt[i] + (i % 3) * 20);
            const void *tok = k == 3 ? (const void *)ids : (const void *)txt;
            la = loss_grads(a, tok, B, T);
            lb = loss_grads(b, tok, B, T);
            same &= memcmp(&la, &lb, sizeof la) == 0;
            dm_optim_step(oa, a, s);
            dm_optim_step(ob, b, s);
        }
        dm_model_set_atlas(a, NULL);
        long rounds = 0, want = (c.mixer == DM_MIXER_KDA ? 5 : 1) * (long)c.n_layer;
        int R = dm_plan_head_rows(&c, (size_t)B * T);
        if (R) want += (B * T + R - 1) / R;
        for (int i = 0; i < atlas->n_ops; i++)
            if (!strcmp(atlas->op[i].name, "round_bf16")) rounds += atlas->op[i].calls;
        if (k != 1) /* balanced reruns f1 and z1 */
            CHECKF(rounds == want, "%s: %ld rounding passes a step, want %ld", what, rounds, want);
        free(atlas);
        size_t np = dm_model_num_params(a);
        int wsame = memcmp(dm_model_params(a), dm_model_params(b), np * sizeof(float)) == 0;
        char table[8192];
        dm_model_dispatch_table(a, table, sizeof table);
        const char *line = strstr(table, "matmul.fwd");
        printf("  %s: loss %.9g vs %.9g after 3 steps; weights %s; %ld rounding passes a "
               "step; %.*s\n", what, la, lb, wsame ? "the same bits" : "differ", rounds,
               line ? (int)strcspn(line, "\n") : 0, line ? line : "");
        CHECKF(same && wsame, "%s: copies read %.9g, operands rounded %.9g; weights %s", what,
               la, lb, wsame ? "same" : "differ");
        CHECKF(line && strstr(line, "reference-bf16"), "%s: the products did not run bf16", what);
        dm_optim_free(oa), dm_optim_free(ob);
        dm_model_free(a), dm_model_free(b);
    }
    unsetenv("DM_CPU_BF16_REFERENCE");
    unsetenv("DM_CPU_NO_BF16");
}

/* The precision a call asks travels in its arguments (dm_op_def.asked), not in the op
 * layer: on one op layer whose setting is fp32, a matmul call asking bf16 runs a bf16
 * implementation (the reference bf16 path) and gives the bits of the bf16 entry point on
 * a bf16 op layer; on that bf16 layer a call asking fp32 runs fp32 and gives the bits of
 * the fp32 layer's; and what runs is counted under the implementation of its precision. */
TEST(precision_asked_by_the_call) {
    int N = 37, K = 48, O = 20;
    float *in = t_alloc((size_t)N * K), *W = t_alloc((size_t)O * K);
    float *y[4];
    for (int i = 0; i < 4; i++) y[i] = t_alloc((size_t)N * O);
    t_fill_normal(in, (size_t)N * K, 5, 1.0f);
    t_fill_normal(W, (size_t)O * K, 6, 0.2f);
    dm_config c;
    dm_config_default(&c);
    c.gemm = DM_GEMM_OPENBLAS;
    dm_ops f, h;
    c.precision = DM_PRECISION_FP32;
    dm_ops_init(&f, &c);
    bf16_ops(&h);
    h.gemm = DM_GEMM_OPENBLAS;
    h.bf16_why = f.bf16_why = "pretend: the reference bf16 path";
    dm_op_matmul_fwd(&f, dm_bm(y[0]), dm_bm(in), dm_bm(W), NULL, N, K, O); /* fp32 */
    dm_op_matmul_fwd(&h, dm_bm(y[1]), dm_bm(in), dm_bm(W), NULL, N, K, O); /* bf16 */
    dm_matmul_args a = {.out = y[2], .in = in, .W = W, .N = N, .K = K, .O = O,
                        .prec = DM_PRECISION_BF16};
    dm_op_run(&f, DM_OP_MATMUL, DM_FWD, &a); /* bf16 asked on the fp32 layer */
    a.out = y[3], a.prec = DM_PRECISION_FP32;
    dm_op_run(&h, DM_OP_MATMUL, DM_FWD, &a); /* fp32 asked on the bf16 layer */
    size_t n = (size_t)N * O;
    CHECK(memcmp(y[2], y[1], n * sizeof(float)) == 0);
    CHECK(memcmp(y[3], y[0], n * sizeof(float)) == 0);
    CHECK(memcmp(y[0], y[1], n * sizeof(float)) != 0); /* bf16 and fp32 differ here */
    /* counted: each layer ran one call of each precision (implementations 1: the bf16
     * reference path, 3: openblas; cpu/matmul.c's table) */
    CHECK(!strcmp(dm_op_impl_name(DM_OP_MATMUL, 1), "reference-bf16") &&
          !strcmp(dm_op_impl_name(DM_OP_MATMUL, 3), "openblas"));
    CHECKF(f.ran[DM_OP_MATMUL][DM_FWD][1] == 1 && f.ran[DM_OP_MATMUL][DM_FWD][3] == 1 &&
               h.ran[DM_OP_MATMUL][DM_FWD][1] == 1 && h.ran[DM_OP_MATMUL][DM_FWD][3] == 1,
           "fp32 layer %ld/%ld, bf16 layer %ld/%ld", f.ran[DM_OP_MATMUL][DM_FWD][1],
           f.ran[DM_OP_MATMUL][DM_FWD][3], h.ran[DM_OP_MATMUL][DM_FWD][1],
           h.ran[DM_OP_MATMUL][DM_FWD][3]);
    dm_ops_free(&f), dm_ops_free(&h);
    free(in), free(W);
    for (int i = 0; i < 4; i++) free(y[i]);
}

/* The memory plan counts the bf16 products' operand scratch (dm_memory.products, "at
 * most"): after a step of a model whose products run bf16 (the reference bf16 path standing
 * in, so on any CPU; the byte model and a vocabulary of 300, the fused head), what the cpu
 * backend grew for rounded operands and douts is more than nothing and within the figure;
 * in fp32 the figure is 0. */
TEST(bf16_operand_scratch_within_plan) {
    setenv("DM_CPU_NO_BF16", "1", 1);
    setenv("DM_CPU_BF16_REFERENCE", "1", 1);
    for (int k = 0; k < 3; k++) {
        dm_config c = small_cfg();
        c.precision = k == 2 ? DM_PRECISION_FP32 : DM_PRECISION_BF16;
        if (k == 1) c.vocab = 300, c.tie_embeddings = 0;
        char err[256];
        dm_model *m = dm_model_create(&c, err, sizeof err);
        CHECKF(m != NULL, "%s", err);
        if (!m) break;
        uint8_t txt[2 * 41];
        uint16_t ids[2 * 41];
        text_tokens(txt, sizeof txt, 3);
        for (size_t i = 0; i < sizeof txt; i++) ids[i] = (uint16_t)(txt[i] + (i % 3) * 20);
        loss_grads(m, k == 1 ? (const void *)ids : (const void *)txt, 2, 40);
        dm_memory mem;
        CHECK(dm_model_memory(m, &mem) == 0);
        const dm_cpu_ctx *cx = dm_cpu_ctx_of(&m->ops);
        size_t used = cx->bcap + cx->dcap * sizeof(uint16_t);
        printf("  %s: operand scratch grown %zu bytes, planned at most %zu\n",
               k == 0 ? "bytes, bf16" : k == 1 ? "vocabulary 300, bf16" : "bytes, fp32", used,
               mem.products);
        if (k < 2) CHECKF(used > 0 && used <= mem.products, "grown %zu, planned %zu", used,
                          mem.products);
        else CHECK(mem.products == 0);
        dm_model_free(m);
    }
    unsetenv("DM_CPU_BF16_REFERENCE");
    unsetenv("DM_CPU_NO_BF16");
}
