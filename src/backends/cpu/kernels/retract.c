/* retract.c — sphere and Stiefel retractions (see retract.h). */
#include "backends/cpu/kernels/retract.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "base/minmax.h"
#include "backends/cpu/kernels/ns.h"

#define PE_SAFETY DM_PE8_SAFETY
#define QUINTIC_MAX DM_RETRACT_QUINTIC_MAX
#define PE_ROUNDS DM_PE8_ROUNDS

void dm_retract_init(float *R, float *s, const float *W0, int n, int rows, int cols) {
    size_t len = (size_t)rows * cols;
    double root = sqrt((double)imin(rows, cols));
    for (int i = 0; i < n; i++) {
        double r = len ? dm_frob_norm(W0 + i * len, len) : 0.0;
        if (R) R[i] = (float)r;
        if (s) s[i] = root > 0 ? (float)(r / root) : 0.0f;
    }
}

void dm_retract_sphere_run(float *out, const float *W, const float *R, int n, int rows,
                           int cols) {
    size_t len = (size_t)rows * cols;
    if (n <= 0 || len == 0) return;
#pragma omp parallel for schedule(static) if (n > 1 && !omp_in_parallel())
    for (int i = 0; i < n; i++) {
        const float *w = W + i * len;
        float *o = out + i * len;
        double norm = R[i] > 0 ? dm_frob_norm(w, len) : 0.0;
        /* R <= 0 (zero init), or max(||W||, tiny) with tiny -> 0 (zeros stay zeros): as is */
        if (norm == 0.0) {
            if (o != w) memcpy(o, w, len * sizeof(float));
            continue;
        }
        double f = (double)R[i] / norm; /* finite: a nonzero float slice has norm >= 1e-45 */
        for (size_t j = 0; j < len; j++) o[j] = (float)((double)w[j] * f);
    }
}

void dm_retract_sphere(float *W, const float *R, int n, int rows, int cols) {
    dm_retract_sphere_run(W, W, R, n, rows, cols);
}

size_t dm_retract_stiefel_work(int n, int rows, int cols) { return dm_ns_work(n, rows, cols); }

/* ||A - I||_F of A[m, m], in double */
static double gram_defect(const float *A, int m) {
    double sum = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double d = (double)A[(size_t)i * m + j] - (i == j ? 1.0 : 0.0);
            sum += d * d;
        }
    return sqrt(sum);
}

static void scale(float *dst, const float *src, size_t len, double f) {
    for (size_t j = 0; j < len; j++) dst[j] = (float)((double)src[j] * f);
}

/* Gershgorin bound on lambda_max(A) (max absolute row sum), A[m, m]: >= sigma_max(X)^2 */
static double gershgorin(const float *A, int m) {
    double g = 0;
    for (int i = 0; i < m; i++) {
        double r = 0;
        for (int j = 0; j < m; j++) r += fabs((double)A[(size_t)i * m + j]);
        if (r > g) g = r;
    }
    return g;
}

static const dm_ns_blocks FAST = {dm_ns_gram, dm_ns_poly};

/* one slice, W = s polar(W0) (W == W0: in place); returns the final ||A - I||_F (fp32
 * Gram) */
static double stiefel_slice(float *W, const float *W0, float s, int rows, int cols,
                            float *work, int serial, const dm_ns_blocks *bk) {
    size_t len = (size_t)rows * cols;
    int m = imin(rows, cols);
    float *A = work + len, *B = A + (size_t)m * m;
    float *buf[2] = {W, work};
    int cur = 0;
    scale(W, W0, len, 1.0 / (double)s); /* X = W / s */
    bk->gram(A, buf[cur], rows, cols, serial);
    double delta = gram_defect(A, m);
    /* far from the manifold: Polar Express, 8 steps, from X/(1.01 ||X||_F). Tiny singular
     * values (x < ~1e-3, e.g. a square Gaussian init) are not at 1 after one round: a
     * further round rescales by the Gershgorin bound (the large ones are ~1 by then, so
     * this keeps x <= 1 without shrinking the small ones by sqrt(m)) and multiplies each
     * small one by ~3e3 again. */
    for (int round = 0; round < PE_ROUNDS && delta > 0.5 && isfinite(delta); round++) {
        double bound = round == 0 ? dm_frob_norm(buf[cur], len) : sqrt(gershgorin(A, m));
        if (bound == 0.0) break; /* polar(0) undefined: leave the zeros */
        scale(buf[cur], buf[cur], len, 1.0 / (PE_SAFETY * bound));
        for (int t = 0; t < 8; t++) {
            float a, b, c;
            dm_pe8_coeffs(t, &a, &b, &c);
            bk->gram(A, buf[cur], rows, cols, serial);
            bk->poly(buf[cur ^ 1], buf[cur], A, B, rows, cols, a, b, c, serial);
            cur ^= 1;
        }
        bk->gram(A, buf[cur], rows, cols, serial);
        delta = gram_defect(A, m);
    }
    /* the convergent quintic (15/8, -5/4, 3/8): x -> 1 for x in (0, 1.53), cubically;
     * delta <= 0.5 means every x in [0.71, 1.22] */
    for (int it = 0; it < QUINTIC_MAX && delta > DM_RETRACT_STOP && delta <= 0.5; it++) {
        bk->poly(buf[cur ^ 1], buf[cur], A, B, rows, cols, 1.875f, -1.25f, 0.375f, serial);
        cur ^= 1;
        bk->gram(A, buf[cur], rows, cols, serial);
        double prev = delta;
        delta = gram_defect(A, m);
        /* converged to the fp32 floor (big m puts it above DM_RETRACT_STOP): a cubic step
         * that no longer halves the defect will not make progress */
        if (delta < 1e-3 && delta > 0.5 * prev) break;
    }
    scale(W, buf[cur], len, (double)s); /* W = s X */
    return delta;
}

/* slice W0 with constant s into W (W == W0: in place); returns 1 when it was retracted
 * but stayed above the tolerance */
static int stiefel_one(float *W, const float *W0, float s, int rows, int cols, float *work,
                       float *resid, int serial, const dm_ns_blocks *bk) {
    if (!(s > 0)) { /* zero init (or a bad constant): skipped, left as it is */
        if (W != W0) memcpy(W, W0, (size_t)rows * cols * sizeof(float));
        if (resid) *resid = 0.0f;
        return 0;
    }
    double d = stiefel_slice(W, W0, s, rows, cols, work, serial, bk);
    if (resid) *resid = (float)d;
    return !(d <= DM_RETRACT_TOL);
}

/* slices Wp[i] in place (or Wb[i] = retract(W0[i]), contiguous) in parallel, each with
 * single-threaded GEMMs */
static int stiefel_stack(float *const *Wp, float *Wb, const float *W0, const float *s, int n,
                         int rows, int cols, float *work, float *resid,
                         const dm_ns_blocks *bk) {
    size_t len = (size_t)rows * cols, ws = dm_ns_slice_work(rows, cols);
    int bad = 0, nt = omp_get_max_threads(), use = nt < n ? nt : n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use) reduction(+ : bad)
    for (int i = 0; i < n; i++)
        bad += stiefel_one(Wp ? Wp[i] : Wb + i * len, Wp ? Wp[i] : W0 + i * len, s[i], rows,
                           cols, work + omp_get_thread_num() * ws, resid ? resid + i : NULL, 1,
                           bk);
    return bad;
}

int dm_retract_stiefel_run(float *out, const float *W, const float *s, int n, int rows,
                           int cols, float *work, float *resid, int stack,
                           const dm_ns_blocks *bk) {
    if (n <= 0 || rows <= 0 || cols <= 0) return 0;
    if (!bk) bk = &FAST;
    /* threads as dm_ns (ns.h): a lone big slice tiles its GEMMs over the threads; else
     * slices in parallel with single-threaded GEMMs. Shape decides, never thread count. */
    if (dm_ns_tiled(n, rows, cols, stack))
        return stiefel_one(out, W, s[0], rows, cols, work, resid, 0, bk);
    return stiefel_stack(NULL, out, W, s, n, rows, cols, work, resid, bk);
}

int dm_retract_stiefel(float *W, const float *s, int n, int rows, int cols, float *work,
                       float *resid) {
    return dm_retract_stiefel_run(W, W, s, n, rows, cols, work, resid, 0, NULL);
}

int dm_retract_stiefel_stack(float *const *W, const float *s, int n, int rows, int cols,
                             float *work) {
    if (n <= 0 || rows <= 0 || cols <= 0) return 0;
    return stiefel_stack(W, NULL, NULL, s, n, rows, cols, work, NULL, &FAST);
}
