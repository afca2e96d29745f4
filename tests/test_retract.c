/* test_retract.c — sphere and Stiefel retractions (src/backends/cpu/kernels/retract.h, docs/muon.md section 7). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backends/cpu/kernels/retract.h"
#include "base/rng.h"

/* ||X X^T - I||_F (X^T X when tall) for X = W / s, in double */
static double stiefel_defect(const float *W, int rows, int cols, double s) {
    int tall = rows > cols, m = tall ? cols : rows, k = tall ? rows : cols;
    double sum = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double d = 0;
            for (int t = 0; t < k; t++) {
                double a = tall ? W[(size_t)t * cols + i] : W[(size_t)i * cols + t];
                double b = tall ? W[(size_t)t * cols + j] : W[(size_t)j * cols + t];
                d += a * b;
            }
            d = d / (s * s) - (i == j);
            sum += d * d;
        }
    return sqrt(sum);
}


/* W = s U diag(sig) V^T and P = s U V^T (the exact retraction target) */
static void make_perturbed(float *W, float *P, int rows, int cols, double s, double smin,
                           double smax, uint64_t seed) {
    int m = rows < cols ? rows : cols;
    double *U = t_allocd((size_t)rows * m), *V = t_allocd((size_t)cols * m), *sig = t_allocd(m);
    t_orthonormal_cols(U, rows, m, seed, 78);
    t_orthonormal_cols(V, cols, m, seed + 500, 78);
    dm_rng g;
    dm_rng_seed(&g, seed, 79);
    for (int k = 0; k < m; k++) sig[k] = smin + (smax - smin) * dm_rng_uniform(&g);
    sig[0] = smax;
    sig[m - 1] = smin;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double w = 0, p = 0;
            for (int k = 0; k < m; k++) {
                double uv = U[(size_t)i * m + k] * V[(size_t)j * m + k];
                w += uv * sig[k];
                p += uv;
            }
            W[(size_t)i * cols + j] = (float)(s * w);
            if (P) P[(size_t)i * cols + j] = (float)(s * p);
        }
    free(U);
    free(V);
    free(sig);
}

static int stiefel(float *W, const float *s, int n, int rows, int cols, float *resid) {
    float *work = t_alloc(dm_retract_stiefel_work(n, rows, cols));
    int bad = dm_retract_stiefel(W, s, n, rows, cols, work, resid);
    free(work);
    return bad;
}

TEST(retract_stiefel_orthonormal) {
    struct { int rows, cols; double smin, smax; } cs[] = {
        {64, 256, 0.9, 1.1},   /* wide, mildly perturbed (quintic path) */
        {256, 64, 0.9, 1.1},   /* tall */
        {64, 256, 0.2, 3.0},   /* wide, strongly perturbed: sigma/s up to 3 (PE8 path) */
        {256, 64, 0.2, 3.0},   /* tall, strongly perturbed */
        {96, 96, 0.05, 2.5},   /* square */
        {768, 256, 0.5, 1.6},  /* the MLP shape, past the quintic's 1.53 limit */
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int rows = cs[c].rows, cols = cs[c].cols;
        size_t len = (size_t)rows * cols;
        float *W0 = t_alloc(len), *W = t_alloc(len), *P = t_alloc(len), R, s, resid;
        t_fill_normal(W0, len, 100 + c, 0.02f);
        dm_retract_init(&R, &s, W0, 1, rows, cols);
        make_perturbed(W, P, rows, cols, s, cs[c].smin, cs[c].smax, 200 + c);
        double before = stiefel_defect(W, rows, cols, s);
        int bad = stiefel(W, &s, 1, rows, cols, &resid);
        double after = stiefel_defect(W, rows, cols, s);
        double perr = t_rel_rms_ff(W, P, len);
        printf("  [%3d,%3d] sigma/s in [%.2f, %.2f]: ||WW^T/s^2 - I||_F %.3g -> %.3g "
               "(kernel's fp32 %.3g), vs s*UV^T rel %.3g\n",
               rows, cols, cs[c].smin, cs[c].smax, before, after, resid, perr);
        CHECK(bad == 0);
        CHECKF(after <= 1e-4, "[%d,%d] defect %.3g > 1e-4", rows, cols, after);
        CHECKF(perr <= 1e-5, "[%d,%d] not the polar factor: rel %.3g", rows, cols, perr);
        /* the Frobenius norm is the init norm: s * sqrt(min(m, n)) = R */
        double nrm = 0;
        for (size_t i = 0; i < len; i++) nrm += (double)W[i] * W[i];
        CHECKF(fabs(sqrt(nrm) / R - 1) < 1e-5, "norm %g vs R %g", sqrt(nrm), R);
        free(W0);
        free(W);
        free(P);
    }
    /* a square Gaussian init (the step-0 retraction of W_o): its smallest singular values
     * are ~1e-4 of the Frobenius norm, below Polar Express's design range */
    for (int k = 0; k < 2; k++) {
        int d = k ? 256 : 96;
        size_t len = (size_t)d * d;
        float *W = t_alloc(len), R, s, resid;
        t_fill_normal(W, len, 150 + k, 0.02f);
        dm_retract_init(&R, &s, W, 1, d, d);
        int bad = stiefel(W, &s, 1, d, d, &resid);
        double after = stiefel_defect(W, d, d, s);
        printf("  [%3d,%3d] Gaussian init: ||WW^T/s^2 - I||_F -> %.3g\n", d, d, after);
        CHECK(bad == 0);
        CHECKF(after <= 1e-4, "[%d,%d] Gaussian: defect %.3g", d, d, after);
        free(W);
    }
    /* head-wise stack: each slice its own scale */
    const int n = 4, rows = 64, cols = 256;
    size_t len = (size_t)rows * cols;
    float *W = t_alloc(n * len), s[4] = {0.02f, 0.5f, 3.0f, 1e-3f}, resid[4];
    for (int h = 0; h < n; h++)
        make_perturbed(W + h * len, NULL, rows, cols, s[h], h == 2 ? 0.3 : 0.8,
                       h == 2 ? 2.8 : 1.2, 300 + h);
    CHECK(stiefel(W, s, n, rows, cols, resid) == 0);
    for (int h = 0; h < n; h++) {
        double d = stiefel_defect(W + h * len, rows, cols, s[h]);
        CHECKF(d <= 1e-4 && resid[h] <= 1e-4, "head %d defect %.3g (kernel %.3g)", h, d, resid[h]);
    }
    free(W);
}

TEST(retract_stiefel_degenerate_no_nan) {
    /* zero and rank-deficient slices cannot reach the manifold: counted, never NaN;
     * a slice with s = 0 (zero init) is skipped, left bitwise as it was */
    const int n = 3, rows = 32, cols = 48;
    size_t len = (size_t)rows * cols;
    float *W = t_alloc(n * len), *keep = t_alloc(len), s[3] = {1.0f, 1.0f, 0.0f}, resid[3];
    for (int j = 0; j < cols; j++) W[len + j] = 1.0f; /* slice 1 rank 1; slice 0 zero */
    t_fill_normal(W + 2 * len, len, 7, 1.0f);
    memcpy(keep, W + 2 * len, len * sizeof(float));
    int bad = stiefel(W, s, n, rows, cols, resid);
    CHECK(bad == 2);
    CHECK(t_all_finite(W, n * len));
    CHECK(memcmp(keep, W + 2 * len, len * sizeof(float)) == 0);
    free(W);
    free(keep);
}

TEST(retract_sphere_keeps_norm) {
    const int n = 4, rows = 64, cols = 256;
    size_t len = (size_t)rows * cols;
    float *W0 = t_alloc(n * len), *W = t_alloc(n * len), R[4], s[4];
    t_fill_normal(W0, n * len, 400, 0.02f);
    for (size_t i = 0; i < len; i++) W0[len + i] *= 10.0f; /* per-slice radii differ */
    dm_retract_init(R, s, W0, n, rows, cols);
    for (int h = 0; h < n; h++) {
        double r = 0;
        for (size_t i = 0; i < len; i++) r += (double)W0[h * len + i] * W0[h * len + i];
        CHECKF(fabs(R[h] / sqrt(r) - 1) < 1e-6, "R %g vs %g", R[h], sqrt(r));
        CHECKF(fabs(s[h] * 8.0 / R[h] - 1) < 1e-6, "s %g, R %g", s[h], R[h]); /* sqrt(64) */
    }
    /* drift the weights (a few optimizer steps), then retract */
    t_fill_normal(W, n * len, 401, 0.01f);
    for (size_t i = 0; i < n * len; i++) W[i] = 1.3f * W0[i] + W[i];
    float *dir = t_alloc(n * len);
    memcpy(dir, W, n * len * sizeof(float));
    R[3] = 0; /* slice 3: zero init → skipped */
    dm_retract_sphere(W, R, n, rows, cols);
    for (int h = 0; h < n; h++) {
        double nrm = 0, dot = 0, nd = 0;
        for (size_t i = 0; i < len; i++) {
            nrm += (double)W[h * len + i] * W[h * len + i];
            dot += (double)W[h * len + i] * dir[h * len + i];
            nd += (double)dir[h * len + i] * dir[h * len + i];
        }
        if (h == 3) {
            CHECK(memcmp(W + h * len, dir + h * len, len * sizeof(float)) == 0);
            continue;
        }
        CHECKF(fabs(sqrt(nrm) / R[h] - 1) < 1e-6, "slice %d norm %g vs R %g", h, sqrt(nrm), R[h]);
        CHECKF(fabs(dot / sqrt(nrm * nd) - 1) < 1e-6, "slice %d direction changed", h);
    }
    /* a zero slice with R > 0 stays zero, no NaN */
    float Z[12] = {0}, Rz = 2.0f;
    dm_retract_sphere(Z, &Rz, 1, 3, 4);
    for (int i = 0; i < 12; i++) CHECK(Z[i] == 0.0f);
    free(W0);
    free(W);
    free(dir);
}

TEST(retract_idempotent) {
    struct { int n, rows, cols; } cs[] = {{4, 64, 256}, {1, 256, 64}, {1, 128, 128}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int n = cs[c].n, rows = cs[c].rows, cols = cs[c].cols;
        size_t len = (size_t)n * rows * cols;
        float *W0 = t_alloc(len), *W1 = t_alloc(len), *W2 = t_alloc(len), R[4], s[4];
        t_fill_normal(W0, len, 500 + c, 0.02f);
        dm_retract_init(R, s, W0, n, rows, cols);
        for (size_t i = 0; i < len; i++) W1[i] = W0[i] * 1.7f + 0.003f * (float)((i * 7) % 5);
        /* sphere */
        dm_retract_sphere(W1, R, n, rows, cols);
        memcpy(W2, W1, len * sizeof(float));
        dm_retract_sphere(W2, R, n, rows, cols);
        double d = t_rel_rms_ff(W2, W1, len);
        CHECKF(d < 1e-6, "sphere R(R(W)) vs R(W): %.3g", d);
        /* stiefel */
        for (size_t i = 0; i < len; i++) W1[i] = W0[i] * 1.7f + 0.003f * (float)((i * 7) % 5);
        CHECK(stiefel(W1, s, n, rows, cols, NULL) == 0);
        memcpy(W2, W1, len * sizeof(float));
        CHECK(stiefel(W2, s, n, rows, cols, NULL) == 0);
        d = t_rel_rms_ff(W2, W1, len);
        printf("  [%d,%d,%d] stiefel R(R(W)) vs R(W): rel %.3g\n", n, rows, cols, d);
        CHECKF(d < 1e-6, "stiefel R(R(W)) vs R(W): %.3g", d);
        free(W0);
        free(W1);
        free(W2);
    }
}

/* dm_retract_stiefel_stack (the sharded Muon's call): a subset of a stack's slices by
 * pointer, even one alone, gets the bits it gets inside the whole stack; also for a big
 * shape, whose lone slice would otherwise tile its GEMMs */
TEST(retract_stiefel_stack_subset_matches_stack) {
    struct { int n, rows, cols; } cs[] = {{4, 64, 256}, {2, 256, 256}};
    for (int c = 0; c < 2; c++) {
        int n = cs[c].n, rows = cs[c].rows, cols = cs[c].cols;
        size_t len = (size_t)rows * cols;
        float *W = t_alloc(n * len), *one = t_alloc(len), s[4], sj[1];
        dm_rng r;
        dm_rng_seed(&r, 70 + c, 0);
        for (size_t i = 0; i < n * len; i++) W[i] = (float)(0.02 * dm_rng_normal(&r));
        float *orig = t_alloc(n * len), *work = t_alloc(dm_retract_stiefel_work(n, rows, cols));
        memcpy(orig, W, n * len * sizeof(float));
        dm_retract_init(NULL, s, W, n, rows, cols);
        CHECK(dm_retract_stiefel(W, s, n, rows, cols, work, NULL) == 0);
        memcpy(one, orig + (n - 1) * len, len * sizeof(float)); /* the last slice alone */
        sj[0] = s[n - 1];
        float *p[1] = {one};
        CHECK(dm_retract_stiefel_stack(p, sj, 1, rows, cols, work) == 0);
        CHECKF(memcmp(one, W + (n - 1) * len, len * sizeof(float)) == 0,
               "[%d,%d]: a slice alone by the stack path differs from the stack's", rows, cols);
        printf("  [%d, %d, %d]: the last slice alone equals the stack's bits\n", n, rows, cols);
        free(W);
        free(one);
        free(orig);
        free(work);
    }
}
