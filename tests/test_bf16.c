/* test_bf16.c — bf16 mixed precision (issue 11): the rounding to bf16, and the bf16 matmul
 * through the op layer — oneDNN's bf16 kernel against the reference bf16 path (the same
 * rounded operands through the f32 GEMM) in all three products, and bf16 against f32
 * within the error the rounding of the operands predicts. Cases that need hardware bf16
 * are skipped, with the reason, on a CPU without it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "ops/ops.h"

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
    dm_op_matmul_fwd(ops, r->out, in, W, b, N, K, O);
    memset(r->dW, 0, (size_t)O * K * sizeof(float));
    memset(r->db, 0, (size_t)O * sizeof(float));
    dm_op_matmul_bwd(ops, r->din, r->dW, r->db, dy, in, W, N, K, O, 0);
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

/* The first-order error of rounding the operands of C = A B (A [M,K], B [K,N], entry
 * (m,k) of A at A[m*sam + k*sak], of B at B[k*sbk + n*sbn]): for each output, the sum
 * over k of (a b)^2 (ea^2 + eb^2), ea, eb the relative rounding errors; returned as the
 * RMS over outputs relative to the RMS of C. */
static double predicted(const float *A, size_t sam, size_t sak, const float *B, size_t sbk,
                        size_t sbn, int M, int K, int N) {
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double v = 0, c = 0;
            for (int k = 0; k < K; k++) {
                float a = A[m * sam + k * sak], b = B[k * sbk + n * sbn], ra, rb;
                dm_bf16_round(&ra, &a, 1);
                dm_bf16_round(&rb, &b, 1);
                double ea = a ? (ra - (double)a) / a : 0, eb = b ? (rb - (double)b) / b : 0;
                double p = (double)a * b;
                v += p * p * (ea * ea + eb * eb);
                c += p;
            }
            num += v;
            den += c * c;
        }
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
