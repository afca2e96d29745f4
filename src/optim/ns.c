/* ns.c — batched Newton–Schulz (see ns.h for shapes, threading and the contract). */
#include "optim/ns.h"

#include <omp.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

/* KJ / Moonlight quintic: p'(0) = 3.4445 maximized, output band, not convergence. */
static const double ns_quintic5[5][3] = {
    {3.4445, -4.7750, 2.0315}, {3.4445, -4.7750, 2.0315}, {3.4445, -4.7750, 2.0315},
    {3.4445, -4.7750, 2.0315}, {3.4445, -4.7750, 2.0315},
};
/* Polar Express (arXiv 2505.16932), modded-nanogpt train_gpt.py table
 * ("num_iters=5, safety_factor=2e-2, cushion=2"); used with X0 = G/(1.02 ||G||_F). */
static const double ns_polar5[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};

const char *dm_ns_sched_name(dm_ns_sched s) {
    return s == DM_NS_POLAR5 ? "polar5" : "quintic5";
}

int dm_ns_sched_parse(const char *name, dm_ns_sched *s) {
    if (!name) return -1;
    if (strcmp(name, "quintic5") == 0) { *s = DM_NS_QUINTIC5; return 0; }
    if (strcmp(name, "polar5") == 0) { *s = DM_NS_POLAR5; return 0; }
    return -1;
}

int dm_ns_sched_steps(dm_ns_sched s) { (void)s; return 5; }

double dm_ns_sched_safety(dm_ns_sched s) { return s == DM_NS_POLAR5 ? 1.02 : 1.0; }

void dm_ns_sched_coeffs(dm_ns_sched s, int step, double abc[3]) {
    const double(*t)[3] = s == DM_NS_POLAR5 ? ns_polar5 : ns_quintic5;
    if (step < 0) step = 0;
    if (step > 4) step = 4;
    abc[0] = t[step][0];
    abc[1] = t[step][1];
    abc[2] = t[step][2];
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

size_t dm_ns_slice_work(int rows, int cols) {
    size_t m = (size_t)imin(rows, cols);
    return (size_t)rows * (size_t)cols + 2 * m * m;
}

size_t dm_ns_work(int n, int rows, int cols) {
    return (size_t)(n > 0 ? n : 0) * dm_ns_slice_work(rows, cols);
}

double dm_ns_flops(int n, int rows, int cols, dm_ns_sched s) {
    double m = imin(rows, cols), k = imax(rows, cols);
    return (double)n * dm_ns_sched_steps(s) * (4.0 * m * m * k + 2.0 * m * m * m);
}

double dm_frob_norm(const float *x, size_t len) {
    /* 8 partial sums in a fixed order: vectorizes, and does not depend on threads */
    double p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; j++) p[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < len; i++) p[0] += (double)x[i] * (double)x[i];
    double s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    return __builtin_sqrt(s);
}

/* serial: one single-threaded sgemm per product (the caller runs slices in parallel);
 * else dm_gemm's shape-fixed tiles over the threads. Either way the bits depend only on
 * the data, the shape and `serial`, never on the thread count. */
static void gemm(int serial, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (serial) dm_gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else dm_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void dm_ns_gram(float *A, const float *X, int rows, int cols, int serial) {
    if (rows <= cols) /* A[rows, rows] = X X^T */
        gemm(serial, 0, 1, rows, rows, cols, 1.0f, X, cols, X, cols, 0.0f, A, rows);
    else /* A[cols, cols] = X^T X */
        gemm(serial, 1, 0, cols, cols, rows, 1.0f, X, cols, X, cols, 0.0f, A, cols);
}

void dm_ns_poly(float *Y, const float *X, const float *A, float *B, int rows, int cols,
                float a, float b, float c, int serial) {
    int m = imin(rows, cols);
    size_t mm = (size_t)m * m;
    /* B = b A + a I, then B += c A A */
    for (size_t i = 0; i < mm; i++) B[i] = b * A[i];
    for (int i = 0; i < m; i++) B[(size_t)i * m + i] += a;
    gemm(serial, 0, 0, m, m, m, c, A, m, A, m, 1.0f, B, m);
    if (rows <= cols) /* Y[m, cols] = B X */
        gemm(serial, 0, 0, rows, cols, m, 1.0f, B, m, X, cols, 0.0f, Y, cols);
    else /* Y[rows, m] = X B^T (the transpose of B X^T) */
        gemm(serial, 0, 1, rows, cols, m, 1.0f, X, cols, B, m, 0.0f, Y, cols);
}

void dm_ns_slice(float *out, const float *G, int rows, int cols, dm_ns_sched s, float *work,
                 int serial) {
    size_t len = (size_t)rows * cols;
    if (len == 0) return;
    int m = imin(rows, cols), steps = dm_ns_sched_steps(s);
    float *A = work + len, *B = A + (size_t)m * m;
    double norm = dm_frob_norm(G, len);
    if (norm == 0.0) { /* polar(0) := 0 (a padded or untouched slice), never 0/0 */
        memset(out, 0, len * sizeof(float));
        return;
    }
    /* No additive epsilon (docs/muon.md section 3): a nonzero float slice has norm >= 1.4e-45,
     * so 1/norm is finite in double and the output is exactly scale invariant even for a
     * 1e-30 gradient. NaN/Inf inputs give NaN outputs (the caller checks finiteness). */
    /* Ping-pong between out and work so the last step lands in out: X0 goes to work
     * when the step count is odd, to out when even (safe when out == G: elementwise). */
    float *buf[2] = {out, work};
    int cur = steps & 1;
    double inv = 1.0 / (dm_ns_sched_safety(s) * norm);
    float *X0 = buf[cur];
    for (size_t i = 0; i < len; i++) X0[i] = (float)((double)G[i] * inv);
    for (int t = 0; t < steps; t++) {
        double abc[3];
        dm_ns_sched_coeffs(s, t, abc);
        dm_ns_gram(A, buf[cur], rows, cols, serial);
        dm_ns_poly(buf[cur ^ 1], buf[cur], A, B, rows, cols, (float)abc[0], (float)abc[1],
                   (float)abc[2], serial);
        cur ^= 1;
    }
}

int dm_ns_slice_threaded(int rows, int cols) {
    double m = imin(rows, cols), k = imax(rows, cols);
    return 4.0 * m * m * k + 2.0 * m * m * m >= DM_NS_THREAD_MIN_FLOPS;
}

/* Slice i is outp[i] / Gp[i] when the tables are given, else base + i * rows * cols.
 * Scratch: one slot of dm_ns_slice_work per running thread (a slot is reused from slice to
 * slice, so it stays in cache; every scratch value is written before it is read, so the
 * bits do not depend on which slot a slice gets). */
static void ns_run(float *const *outp, const float *const *Gp, float *outb, const float *Gb,
                   int n, int rows, int cols, dm_ns_sched s, float *work) {
    if (n <= 0 || rows <= 0 || cols <= 0) return;
    size_t len = (size_t)rows * cols, ws = dm_ns_slice_work(rows, cols);
#define NS_OUT(i) (outp ? outp[i] : outb + (size_t)(i) * len)
#define NS_IN(i) (Gp ? Gp[i] : Gb + (size_t)(i) * len)
    if (n == 1 && dm_ns_slice_threaded(rows, cols)) {
        /* a lone big slice: its GEMMs tile over the threads (dm_gemm) */
        dm_ns_slice(NS_OUT(0), NS_IN(0), rows, cols, s, work, 0);
    } else {
        /* slices in parallel, each with single-threaded GEMMs (sgemm stays out of the
         * way: one pool). Dynamic: a core slowed by another process does not hold the
         * others back; the bits do not depend on which thread runs a slice. */
        int nt = omp_get_max_threads(), use = nt < n ? nt : n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use)
        for (int i = 0; i < n; i++)
            dm_ns_slice(NS_OUT(i), NS_IN(i), rows, cols, s, work + omp_get_thread_num() * ws, 1);
    }
#undef NS_OUT
#undef NS_IN
}

void dm_ns_many(float *const *out, const float *const *G, int n, int rows, int cols,
                dm_ns_sched s, float *work) {
    ns_run(out, G, NULL, NULL, n, rows, cols, s, work);
}

void dm_ns(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
           float *work) {
    ns_run(NULL, NULL, out, G, n, rows, cols, s, work);
}
