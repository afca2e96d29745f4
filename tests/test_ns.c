/* test_ns.c — batched Newton–Schulz (src/backends/cpu/kernels/ns.h): head-wise batching, per-slice
 * normalization, singular-value bands (docs/muon.md sections 4-5), zero slices. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "backends/cpu/kernels/ns.h"
#include "base/rng.h"

/* LAPACK from libopenblas (Fortran symbol; LAPACKE headers may be absent). The trailing
 * size_t arguments are gfortran's hidden CHARACTER lengths. */
extern void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a,
                    const int *lda, double *s, double *u, const int *ldu, double *vt,
                    const int *ldvt, double *work, const int *lwork, int *info, size_t,
                    size_t);

/* singular values (descending) of the row-major X[rows, cols]; sv: min(rows, cols) */
static void svd_values(double *sv, const float *X, int rows, int cols) {
    size_t len = (size_t)rows * cols;
    double *a = t_allocd(len);
    t_to_double(a, X, len); /* row-major X = column-major X^T [cols, rows]: same SVs */
    int m = cols, n = rows, lda = cols, one = 1, info = 0, lwork = -1;
    double dummy = 0, wq = 0;
    dgesvd_("N", "N", &m, &n, a, &lda, sv, &dummy, &one, &dummy, &one, &wq, &lwork, &info, 1,
            1);
    lwork = (int)wq + 1;
    double *work = t_allocd((size_t)lwork);
    dgesvd_("N", "N", &m, &n, a, &lda, sv, &dummy, &one, &dummy, &one, work, &lwork, &info, 1,
            1);
    CHECKF(info == 0, "dgesvd info %d", info);
    free(work);
    free(a);
}

/* X[rows, cols] = scale * U diag(sig) V^T with random orthonormal U, V; sig: min(rows,cols) */
static void with_spectrum(float *X, int rows, int cols, const double *sig, double scale,
                          uint64_t seed) {
    int m = rows < cols ? rows : cols;
    double *U = t_allocd((size_t)rows * m), *V = t_allocd((size_t)cols * m);
    t_orthonormal_cols(U, rows, m, seed, 77);
    t_orthonormal_cols(V, cols, m, seed + 1000, 77);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0;
            for (int k = 0; k < m; k++) s += U[(size_t)i * m + k] * sig[k] * V[(size_t)j * m + k];
            X[(size_t)i * cols + j] = (float)(scale * s);
        }
    free(U);
    free(V);
}

/* normalized spectrum: m-1 values log-spaced in [xlo, xtop], plus a top value that makes
 * sum x^2 = 1, so x = sigma/||X||_F spans [xlo, x_top] exactly */
static void spectrum(double *sig, int m, double xlo, double xtop) {
    double ss = 0;
    for (int k = 1; k < m; k++) {
        sig[k] = exp(log(xtop) + (log(xlo) - log(xtop)) * (k - 1) / (double)(m - 2));
        ss += sig[k] * sig[k];
    }
    sig[0] = sqrt(1.0 - ss);
}

/* the scalar map p^T(x) each singular value goes through (x before the safety factor) */
static double ns_scalar(dm_ns_sched s, double x) {
    x /= dm_ns_sched_safety(s);
    for (int t = 0; t < dm_ns_sched_steps(s); t++) {
        double abc[3];
        dm_ns_sched_coeffs(s, t, abc);
        double x2 = x * x;
        x = x * (abc[0] + x2 * (abc[1] + x2 * abc[2]));
    }
    return x;
}

/* [min, max] of p^T over x in [lo, hi] (dense log grid) */
static void scalar_band(dm_ns_sched s, double lo, double hi, double *bmin, double *bmax) {
    *bmin = INFINITY;
    *bmax = -INFINITY;
    const int N = 200000;
    for (int i = 0; i <= N; i++) {
        double y = ns_scalar(s, exp(log(lo) + (log(hi) - log(lo)) * i / N));
        if (y < *bmin) *bmin = y;
        if (y > *bmax) *bmax = y;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void ns1(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s) {
    float *work = t_alloc(dm_ns_work(n, rows, cols));
    dm_ns(out, G, n, rows, cols, s, work);
    free(work);
}

/* one batched call over the stack == a loop of single-slice calls, bitwise */
static void batched_vs_loop(int n, int rows, int cols, dm_ns_sched s, uint64_t seed) {
    size_t len = (size_t)rows * cols;
    float *G = t_alloc(n * len), *ob = t_alloc(n * len), *ol = t_alloc(n * len);
    for (int h = 0; h < n; h++) /* heads with very different gradient scales */
        t_fill_normal(G + h * len, len, seed + h, (float)pow(10.0, (h % 3) - 1));
    ns1(ob, G, n, rows, cols, s);
    float *work = t_alloc(dm_ns_slice_work(rows, cols));
    /* the per-head loop on the same kernel path (single-threaded GEMMs) */
    for (int h = 0; h < n; h++) dm_ns_slice(ol + h * len, G + h * len, rows, cols, s, work, 1);
    CHECKF(memcmp(ob, ol, n * len * sizeof(float)) == 0,
           "%s [%d,%d,%d]: batched != per-slice loop (rel rms %.3g)", dm_ns_sched_name(s), n,
           rows, cols, t_rel_rms_ff(ob, ol, n * len));
    /* the public one-matrix call per head: the same bits for small slices; a lone big
     * slice tiles its GEMMs over the threads, equal to rounding */
    for (int h = 0; h < n; h++) dm_ns(ol + h * len, G + h * len, 1, rows, cols, s, work);
    if (!dm_ns_slice_threaded(rows, cols))
        CHECKF(memcmp(ob, ol, n * len * sizeof(float)) == 0, "%s [%d,%d,%d]: dm_ns(n=1) loop differs",
               dm_ns_sched_name(s), n, rows, cols);
    else
        CHECKF(t_rel_rms_ff(ol, ob, n * len) <= 1e-6, "%s [%d,%d,%d]: lone big slices off by %.3g",
               dm_ns_sched_name(s), n, rows, cols, t_rel_rms_ff(ol, ob, n * len));
    CHECK(t_all_finite(ob, n * len));
    /* in place gives the same bits */
    memcpy(ol, G, n * len * sizeof(float));
    ns1(ol, ol, n, rows, cols, s);
    CHECKF(memcmp(ob, ol, n * len * sizeof(float)) == 0, "in-place differs");
    free(work);
    free(G);
    free(ob);
    free(ol);
}

TEST(headwise_batched_ns_matches_per_head) {
    for (int s = 0; s < 2; s++) {
        batched_vs_loop(4, 64, 256, (dm_ns_sched)s, 11);  /* W_q/W_k of the d2 model */
        batched_vs_loop(12, 64, 768, (dm_ns_sched)s, 14); /* a wider model */
        batched_vs_loop(3, 96, 40, (dm_ns_sched)s, 12);   /* tall slices */
        batched_vs_loop(5, 32, 32, (dm_ns_sched)s, 13);   /* square */
    }
    /* big slices ([128, 1024]: a lone one tiles its GEMMs over the threads) */
    batched_vs_loop(3, 128, 1024, DM_NS_QUINTIC5, 15);
    /* non-contiguous slices through dm_ns_many == the contiguous stack, bitwise */
    const int n = 4, rows = 64, cols = 256;
    size_t len = (size_t)rows * cols;
    float *G = t_alloc(n * len), *ob = t_alloc(n * len), *scat = t_alloc(2 * n * len);
    t_fill_normal(G, n * len, 16, 0.3f);
    ns1(ob, G, n, rows, cols, DM_NS_POLAR5);
    float *o[4];
    const float *g[4];
    for (int h = 0; h < n; h++) { /* reversed, gapped, in place */
        o[h] = scat + (size_t)(2 * (n - 1 - h) + 1) * len;
        memcpy(o[h], G + h * len, len * sizeof(float));
        g[h] = o[h];
    }
    float *work = t_alloc(dm_ns_work(n, rows, cols));
    dm_ns_many(o, g, n, rows, cols, DM_NS_POLAR5, work);
    for (int h = 0; h < n; h++)
        CHECKF(memcmp(o[h], ob + h * len, len * sizeof(float)) == 0, "dm_ns_many slice %d", h);
    free(work);
    free(G);
    free(ob);
    free(scat);
}

TEST(ns_bitwise_across_threads) {
    /* every path (slice-parallel, and a lone big slice's shape-fixed GEMM tiles) is
     * bitwise thread-count invariant */
    int saved = omp_get_max_threads();
    struct { int n, rows, cols; } cs[] = {
        {4, 64, 256}, {1, 64, 256}, {16, 64, 768}, {1, 256, 768}, {1, 768, 256}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        size_t len = (size_t)cs[c].n * cs[c].rows * cs[c].cols;
        float *G = t_alloc(len), *o1 = t_alloc(len), *o2 = t_alloc(len);
        t_fill_normal(G, len, 30 + c, 0.02f);
        omp_set_num_threads(1);
        ns1(o1, G, cs[c].n, cs[c].rows, cs[c].cols, DM_NS_QUINTIC5);
        omp_set_num_threads(saved > 1 ? saved : 2);
        ns1(o2, G, cs[c].n, cs[c].rows, cs[c].cols, DM_NS_QUINTIC5);
        double d = t_rel_rms_ff(o2, o1, len);
        printf("  [%d,%d,%d] 1 vs %d threads: %s, rel rms %.3g\n", cs[c].n, cs[c].rows,
               cs[c].cols, saved > 1 ? saved : 2,
               memcmp(o1, o2, len * sizeof(float)) ? "differs" : "bitwise equal", d);
        CHECKF(memcmp(o1, o2, len * sizeof(float)) == 0, "[%d,%d,%d] differs across threads",
               cs[c].n, cs[c].rows, cs[c].cols);
        free(G);
        free(o1);
        free(o2);
    }
    omp_set_num_threads(saved);
}

TEST(ns_per_slice_normalization) {
    const int n = 4, rows = 64, cols = 256;
    size_t len = (size_t)rows * cols;
    for (int s = 0; s < 2; s++) {
        float *G = t_alloc(n * len), *o1 = t_alloc(n * len), *o2 = t_alloc(n * len);
        t_fill_normal(G, n * len, 40 + s, 0.01f);
        ns1(o1, G, n, rows, cols, (dm_ns_sched)s);
        for (size_t i = 0; i < len; i++) G[2 * len + i] *= 100.0f; /* one head's gradient */
        ns1(o2, G, n, rows, cols, (dm_ns_sched)s);
        for (int h = 0; h < n; h++) {
            if (h == 2) continue;
            CHECKF(memcmp(o1 + h * len, o2 + h * len, len * sizeof(float)) == 0,
                   "%s: head %d changed when head 2 was scaled", dm_ns_sched_name((dm_ns_sched)s), h);
        }
        double d = t_rel_rms_ff(o2 + 2 * len, o1 + 2 * len, len);
        printf("  %s: scaled head changed by rel rms %.3g\n", dm_ns_sched_name((dm_ns_sched)s), d);
        CHECKF(d < 1e-5, "scaled head changed by %.3g (more than rounding)", d);
        /* the stacked output keeps per-head norms equal (whole-stack norm would not) */
        double nh[4];
        for (int h = 0; h < n; h++) nh[h] = dm_frob_norm(o2 + h * len, len);
        for (int h = 1; h < n; h++) CHECKF(fabs(nh[h] / nh[0] - 1) < 0.02, "head norms %g %g", nh[0], nh[h]);
        free(G);
        free(o1);
        free(o2);
    }
}

TEST(ns_zero_slice_gives_zero) {
    for (int s = 0; s < 2; s++) {
        const int n = 3, rows = 32, cols = 64;
        size_t len = (size_t)rows * cols;
        float *G = t_alloc(n * len), *o = t_alloc(n * len);
        t_fill_normal(G, n * len, 50, 1.0f);
        memset(G + len, 0, len * sizeof(float));
        ns1(o, G, n, rows, cols, (dm_ns_sched)s);
        CHECK(t_all_finite(o, n * len));
        int zero = 1;
        for (size_t i = 0; i < len; i++) zero &= o[len + i] == 0.0f;
        CHECKF(zero, "zero slice did not give zeros");
        /* single zero matrices, wide and tall; NaN-free */
        float *Z = t_alloc(48 * 20), *oz = t_alloc(48 * 20);
        for (int i = 0; i < 48 * 20; i++) oz[i] = NAN;
        ns1(oz, Z, 1, 48, 20, (dm_ns_sched)s);
        for (int i = 0; i < 48 * 20; i++) zero &= oz[i] == 0.0f;
        ns1(oz, Z, 1, 20, 48, (dm_ns_sched)s);
        for (int i = 0; i < 48 * 20; i++) zero &= oz[i] == 0.0f;
        CHECKF(zero, "zero matrix did not give zeros");
        /* a tiny (1e-30, even subnormal) gradient is orthogonalized like a normal one:
         * the epsilon does not swamp it (docs/muon.md section 3) */
        float *T = t_alloc(len), *ot = t_alloc(len);
        const float tiny[2] = {1e-30f, 1e-41f};
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < len; i++) T[i] = G[i] * tiny[k];
            ns1(ot, T, 1, rows, cols, (dm_ns_sched)s);
            double d = t_rel_rms_ff(ot, o, len);
            printf("  %s: gradient x %g: rel diff %.3g\n", dm_ns_sched_name((dm_ns_sched)s),
                   tiny[k], d);
            CHECKF(t_all_finite(ot, len) && d < (k == 0 ? 1e-5 : 1e-3),
                   "tiny scale %g: rel diff %.3g", tiny[k], d);
        }
        free(T);
        free(ot);
        free(Z);
        free(oz);
        free(G);
        free(o);
    }
}

/* documented bands (docs/muon.md sections 4-5), checked against our own scalar computation */
static void check_doc_bands(void) {
    struct { dm_ns_sched s; double xlo, lo, hi; } b[] = {
        {DM_NS_QUINTIC5, 1e-2, 0.6818, 1.1344}, /* doc: [0.68, 1.13] */
        {DM_NS_QUINTIC5, 1e-3, 0.4705, 1.2024}, /* doc: [0.47, 1.20] */
        {DM_NS_POLAR5, 1e-2, 0.8589, 1.1411},
        {DM_NS_POLAR5, 1e-3, 0.8466, 1.1411}, /* doc: [0.85, 1.14]; 0.8466 with the 1.02 */
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        double lo, hi;
        scalar_band(b[i].s, b[i].xlo, 1.0, &lo, &hi);
        printf("  scalar band %s, x in [%g, 1]: [%.4f, %.4f]\n", dm_ns_sched_name(b[i].s),
               b[i].xlo, lo, hi);
        CHECKF(fabs(lo - b[i].lo) < 1e-3 && fabs(hi - b[i].hi) < 1e-3,
               "%s band [%g,1]: [%.4f, %.4f], expected [%.4f, %.4f]", dm_ns_sched_name(b[i].s),
               b[i].xlo, lo, hi, b[i].lo, b[i].hi);
    }
}

TEST(ns_singular_values_in_band) {
    check_doc_bands();
    /* kind: 0 Gaussian, 1 spectrum x in [xlo, 0.12] + top value (sum x^2 = 1).
     * cls: band class asserted (1e-2 or 1e-3: x_min >= cls), 0 = predicted band only. */
    struct { int rows, cols, kind; double xlo, cls; } cs[] = {
        {128, 128, 1, 1e-2, 1e-2}, /* square */
        {64, 256, 0, 0, 1e-2},     /* wide Gaussian (x in ~[0.06, 0.19]) */
        {256, 64, 0, 0, 1e-2},     /* tall Gaussian */
        {64, 256, 1, 1e-3, 1e-3},  /* ill-conditioned, sigma_min/sigma_max ~ 1e-3, wide */
        {160, 48, 1, 1e-3, 1e-3},  /* ill-conditioned, tall */
        {96, 96, 0, 0, 0},         /* square Gaussian: x_min ~ n^-1.5 and below */
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int rows = cs[c].rows, cols = cs[c].cols, m = rows < cols ? rows : cols;
        size_t len = (size_t)rows * cols;
        float *G = t_alloc(len), *O = t_alloc(len);
        double *sin = t_allocd(m), *sout = t_allocd(m), *pred = t_allocd(m);
        if (cs[c].kind == 0) {
            t_fill_normal(G, len, 60 + c, 0.02f);
        } else {
            spectrum(sin, m, cs[c].xlo, 0.12);
            with_spectrum(G, rows, cols, sin, 3.7, 70 + c);
        }
        svd_values(sin, G, rows, cols);
        double fn = dm_frob_norm(G, len);
        double xmin = sin[m - 1] / fn, xmax = sin[0] / fn;
        for (int s = 0; s < 2; s++) {
            dm_ns_sched sc = (dm_ns_sched)s;
            ns1(O, G, 1, rows, cols, sc);
            svd_values(sout, O, rows, cols);
            for (int k = 0; k < m; k++) pred[k] = ns_scalar(sc, sin[k] / fn);
            qsort(pred, m, sizeof(double), cmp_double);
            qsort(sout, m, sizeof(double), cmp_double);
            double err = 0;
            for (int k = 0; k < m; k++) err = fmax(err, fabs(pred[k] - sout[k]));
            double plo, phi;
            scalar_band(sc, xmin, xmax, &plo, &phi);
            printf("  %-8s [%3d,%3d] x in [%.2e, %.3f]: SV out [%.4f, %.4f], predicted "
                   "[%.4f, %.4f], max |SV - p(x)| %.2e\n",
                   dm_ns_sched_name(sc), rows, cols, xmin, xmax, sout[0], sout[m - 1], plo,
                   phi, err);
            /* each singular value goes through the scalar polynomial (up to fp32 rounding) */
            CHECKF(err < 2e-3, "%s [%d,%d]: SVs differ from p(x) by %.3g", dm_ns_sched_name(sc),
                   rows, cols, err);
            CHECKF(sout[0] >= plo - 2e-3 && sout[m - 1] <= phi + 2e-3,
                   "%s [%d,%d]: SVs [%.4f, %.4f] outside predicted [%.4f, %.4f]",
                   dm_ns_sched_name(sc), rows, cols, sout[0], sout[m - 1], plo, phi);
            if (cs[c].cls > 0) {
                CHECKF(xmin >= cs[c].cls * 0.999, "case %zu: x_min %.3g below class", c, xmin);
                double lo, hi;
                scalar_band(sc, cs[c].cls, 1.0, &lo, &hi);
                CHECKF(sout[0] >= lo - 5e-3 && sout[m - 1] <= hi + 5e-3,
                       "%s [%d,%d]: SVs [%.4f, %.4f] outside band [%.4f, %.4f] for x >= %g",
                       dm_ns_sched_name(sc), rows, cols, sout[0], sout[m - 1], lo, hi,
                       cs[c].cls);
            }
        }
        free(G);
        free(O);
        free(sin);
        free(sout);
        free(pred);
    }
}

TEST(ns_schedule_names_and_flops) {
    dm_ns_sched s;
    CHECK(dm_ns_sched_parse("quintic5", &s) == 0 && s == DM_NS_QUINTIC5);
    CHECK(dm_ns_sched_parse("polar5", &s) == 0 && s == DM_NS_POLAR5);
    CHECK(dm_ns_sched_parse("ns7", &s) == -1);
    CHECK(strcmp(dm_ns_sched_name(DM_NS_POLAR5), "polar5") == 0);
    /* 5 * (4 m^2 k + 2 m^3), m = 64, k = 256, 4 heads; tall = transposed */
    CHECK(dm_ns_flops(4, 64, 256, DM_NS_QUINTIC5) == 4.0 * 5 * (4.0 * 64 * 64 * 256 + 2.0 * 64 * 64 * 64));
    CHECK(dm_ns_flops(1, 768, 256, DM_NS_POLAR5) == dm_ns_flops(1, 256, 768, DM_NS_POLAR5));
    CHECK(dm_ns_work(4, 64, 256) == 4 * (64 * 256 + 2 * 64 * 64));
}

/* ---- Newton-Schulz with bf16 operands (ns_precision=bf16) ---- */

static int ns1_bf16(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s) {
    static dm_onednn *dnn;
    const char *why = dm_cpu_bf16_missing();
    if (!why && !dnn) dnn = dm_onednn_create(&why);
    if (why) {
        t_skip("%s", why);
        return 1;
    }
    float *work = t_alloc(dm_ns_work_bf16(n, rows, cols));
    dm_ns_bf16(out, G, n, rows, cols, s, work, dnn);
    free(work);
    return 0;
}

/* NS on one wide slice with every GEMM operand rounded to bf16 and the f32 GEMM (the
 * reference bf16 path), written out from the definition (ns.h, dm_ns_bf16) */
static void ns_bf16_reference(float *X, const float *G, int rows, int cols, dm_ns_sched s) {
    int m = rows;
    size_t len = (size_t)rows * cols;
    float *A = t_alloc((size_t)m * m), *B = t_alloc((size_t)m * m);
    float *xr = t_alloc(len), *ar = t_alloc((size_t)m * m), *br = t_alloc((size_t)m * m);
    double inv = 1.0 / (dm_ns_sched_safety(s) * dm_frob_norm(G, len));
    for (size_t i = 0; i < len; i++) X[i] = (float)((double)G[i] * inv);
    dm_bf16_round(xr, X, len);
    for (int t = 0; t < dm_ns_sched_steps(s); t++) {
        double c[3];
        dm_ns_sched_coeffs(s, t, c);
        dm_gemm(0, 1, m, m, cols, 1.0f, xr, cols, xr, cols, 0.0f, A, m);
        dm_bf16_round(ar, A, (size_t)m * m);
        for (int i = 0; i < m * m; i++) B[i] = (float)c[1] * A[i];
        dm_gemm(0, 0, m, m, m, (float)c[2], ar, m, ar, m, 1.0f, B, m);
        for (int i = 0; i < m; i++) B[i * m + i] += (float)c[0];
        dm_bf16_round(br, B, (size_t)m * m);
        dm_gemm(0, 0, m, cols, m, 1.0f, br, m, xr, cols, 0.0f, X, cols);
        dm_bf16_round(xr, X, len); /* the next step's operand (oneDNN writes it in bf16) */
    }
    free(A); free(B); free(xr); free(ar); free(br);
}

/* bf16 NS: the stack equals the per-slice loop and 1 thread equals 2, bitwise; its
 * singular values stay in quintic5's band for x >= 1e-2, [0.6818, 1.1344], widened by 1%
 * at each end (measured below: at most 0.6%). Printed beside: its distance to fp32 and to
 * the reference bf16 NS (the same roundings through the f32 GEMM). Both are percents, not
 * rounding noise, and not asserted: the quintic has slope 3.4 near 0, and each step rounds
 * A and the polynomial to bf16, so a sum-order difference of 1e-7 flips a rounding here
 * and there, and the steps amplify it (the reference differs from fp32 by as much). */
TEST(ns_bf16_matches_reference_and_band) {
    /* cls 1: x_min >= 1e-2 (Gaussian slices of these aspect ratios), the band is asserted;
     * cls 0: a square Gaussian, x_min below 1e-2, determinism only */
    struct { int n, rows, cols, cls; } cs[] = {
        {4, 64, 256, 1}, {3, 96, 40, 1}, {1, 256, 768, 1}, {2, 128, 128, 0}};
    if (dm_cpu_bf16_missing()) {
        t_skip("%s", dm_cpu_bf16_missing());
        return;
    }
    int saved = omp_get_max_threads();
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int n = cs[c].n, rows = cs[c].rows, cols = cs[c].cols, m = rows < cols ? rows : cols;
        size_t len = (size_t)rows * cols;
        float *G = t_alloc(n * len), *o = t_alloc(n * len), *o2 = t_alloc(n * len);
        float *f = t_alloc(n * len);
        double *sb = t_allocd(m), *sf = t_allocd(m);
        t_fill_normal(G, n * len, 80 + c, 0.02f);
        omp_set_num_threads(1);
        if (ns1_bf16(o, G, n, rows, cols, DM_NS_QUINTIC5)) goto done;
        omp_set_num_threads(saved > 1 ? saved : 2);
        ns1_bf16(o2, G, n, rows, cols, DM_NS_QUINTIC5);
        CHECKF(memcmp(o, o2, n * len * sizeof(float)) == 0, "[%d,%d,%d] bf16 differs across threads",
               n, rows, cols);
        for (int h = 0; h < n; h++) ns1_bf16(o2 + h * len, G + h * len, 1, rows, cols, DM_NS_QUINTIC5);
        if (!dm_ns_slice_threaded(rows, cols))
            CHECKF(memcmp(o, o2, n * len * sizeof(float)) == 0,
                   "[%d,%d,%d] bf16 batched != per-slice loop", n, rows, cols);
        double dr = -1;
        if (rows <= cols) { /* the reference, written for wide slices */
            for (int h = 0; h < n; h++)
                ns_bf16_reference(o2 + h * len, G + h * len, rows, cols, DM_NS_QUINTIC5);
            dr = t_rel_rms_ff(o, o2, n * len);
        }
        ns1(f, G, n, rows, cols, DM_NS_QUINTIC5);
        double d = t_rel_rms_ff(o, f, n * len), lo = 1e9, hi = 0, flo = 1e9, fhi = 0;
        for (int h = 0; h < n; h++) {
            svd_values(sb, o + h * len, rows, cols);
            svd_values(sf, f + h * len, rows, cols);
            for (int k = 0; k < m; k++) {
                lo = fmin(lo, sb[k]), hi = fmax(hi, sb[k]);
                flo = fmin(flo, sf[k]), fhi = fmax(fhi, sf[k]);
            }
        }
        printf("  [%d,%d,%d] bf16 vs reference bf16 %.2g, vs fp32 %.3g; singular values "
               "bf16 [%.4f, %.4f], fp32 [%.4f, %.4f]\n", n, rows, cols, dr, d, lo, hi, flo, fhi);
        CHECKF(t_all_finite(o, n * len), "[%d,%d,%d] bf16 NS not finite", n, rows, cols);
        if (cs[c].cls)
            CHECKF(lo >= 0.6818 * 0.99 && hi <= 1.1344 * 1.01,
                   "[%d,%d,%d] bf16 singular values [%.4f, %.4f] beyond [0.6818, 1.1344] +- 1%%",
                   n, rows, cols, lo, hi);
    done:
        free(G); free(o); free(o2); free(f); free(sb); free(sf);
        omp_set_num_threads(saved);
    }
}

/* dm_ns_stack (the sharded Muon's call): any subset of a stack's slices, by pointer, in
 * any order, even one alone, gives each slice the bits it gets inside the whole stack —
 * also for a big shape, whose lone slice would otherwise tile its GEMMs (and differ);
 * fp32, and bf16 where the CPU has it */
TEST(ns_stack_subset_matches_stack) {
    struct { int n, rows, cols; } cs[] = {{4, 64, 256}, {3, 128, 1024}};
    for (int precision = 0; precision < 2; precision++) {
        struct dm_onednn *dnn = NULL;
        if (precision) {
            const char *why = dm_cpu_bf16_missing();
            dnn = why ? NULL : dm_onednn_create(&why);
            if (!dnn) {
                printf("  bf16 not checked: %s\n", why ? why : "no oneDNN");
                continue;
            }
        }
        for (int c = 0; c < 2; c++) {
            int n = cs[c].n, rows = cs[c].rows, cols = cs[c].cols;
            size_t len = (size_t)rows * cols;
            float *G = t_alloc(n * len), *whole = t_alloc(n * len), *part = t_alloc(2 * len);
            size_t wn = dnn ? dm_ns_work_bf16(n, rows, cols) : dm_ns_work(n, rows, cols);
            float *work = t_alloc(wn);
            t_fill_normal(G, n * len, 40 + c, 0.02f);
            if (dnn) dm_ns_bf16(whole, G, n, rows, cols, DM_NS_QUINTIC5, work, dnn);
            else dm_ns(whole, G, n, rows, cols, DM_NS_QUINTIC5, work);
            /* the last slice alone, then the last and the first, reversed */
            for (int k = 1; k <= 2; k++) {
                float *o[2];
                const float *g[2];
                for (int j = 0; j < k; j++) {
                    int s = j == 0 ? n - 1 : 0;
                    o[j] = part + j * len;
                    memcpy(o[j], G + s * len, len * sizeof(float));
                    g[j] = o[j];
                }
                dm_ns_stack(o, g, k, rows, cols, DM_NS_QUINTIC5, work, dnn);
                for (int j = 0; j < k; j++) {
                    int s = j == 0 ? n - 1 : 0;
                    CHECKF(memcmp(o[j], whole + s * len, len * sizeof(float)) == 0,
                           "%s [%d,%d]: slice %d of %d by dm_ns_stack differs from the stack's",
                           dnn ? "bf16" : "fp32", rows, cols, s, k);
                }
            }
            printf("  %s [%d, %d, %d]: subsets of 1 and 2 slices equal the stack's bits\n",
                   dnn ? "bf16" : "fp32", n, rows, cols);
            free(G);
            free(whole);
            free(part);
            free(work);
        }
        dm_onednn_free(dnn);
    }
}
