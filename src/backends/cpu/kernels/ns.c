/* ns.c — batched Newton–Schulz (see ns.h for shapes, threading and the contract). */
#include "backends/cpu/kernels/ns.h"

#include <omp.h>
#include <string.h>

#include <stdlib.h>

#include "base/minmax.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"

/* elements from which a lone big slice's elementwise steps run over the threads (its
 * GEMMs do; the steps are elementwise, so the bits do not change) */
#define NS_PAR_MIN 65536

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

/* How a slice's GEMMs run. serial: each on the calling thread (the caller runs slices in
 * parallel), else tiled over the threads. dnn: NULL for f32 (OpenBLAS); else bf16
 * operands through oneDNN (ns_slice_bf16). Either way the bits depend only on the data,
 * the shape and the mode, never on the thread count. */
typedef struct {
    int serial;
    dm_onednn *dnn;
} ns_env;

static void gemm(const ns_env *e, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (e->serial) dm_gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else dm_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* a bf16 product into C in f32 (cbf16 = 0) or bf16 (cbf16 = 1, beta 0) */
static void gemm_bf16(const ns_env *e, int ta, int tb, int M, int N, int K, float alpha,
                      const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                      void *C, int ldc, int cbf16) {
    if (!e->serial && cbf16)
        dm_onednn_gemm_bf16_c16(e->dnn, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else if (!e->serial)
        dm_onednn_gemm_bf16(e->dnn, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else if (dm_onednn_gemm_bf16_here(e->dnn, omp_get_thread_num(), ta, tb, M, N, K, alpha, A,
                                      lda, B, ldb, beta, C, ldc, cbf16))
        abort(); /* ns_run builds every primitive before its parallel loop: unreachable */
}

/* A = X X^T (or X^T X when tall) */
static void ns_gram(const ns_env *e, float *A, const float *X, int rows, int cols) {
    int wide = rows <= cols, m = wide ? rows : cols;
    gemm(e, !wide, wide, m, m, wide ? cols : rows, 1.0f, X, cols, X, cols, 0.0f, A, m);
}

/* B = a I + b A + c A^2, then Y = B X (or X B^T when tall) */
static void ns_poly(const ns_env *e, float *Y, const float *X, const float *A, float *B,
                    int rows, int cols, float a, float b, float c) {
    int m = imin(rows, cols), wide = rows <= cols;
    size_t mm = (size_t)m * m;
#pragma omp parallel for schedule(static) if (!e->serial && mm >= NS_PAR_MIN)
    for (size_t i = 0; i < mm; i++) B[i] = b * A[i];
    for (int i = 0; i < m; i++) B[(size_t)i * m + i] += a;
    gemm(e, 0, 0, m, m, m, c, A, m, A, m, 1.0f, B, m);
    if (wide) gemm(e, 0, 0, rows, cols, m, 1.0f, B, m, X, cols, 0.0f, Y, cols);
    else gemm(e, 0, 1, rows, cols, m, 1.0f, X, cols, B, m, 0.0f, Y, cols);
}

void dm_ns_gram(float *A, const float *X, int rows, int cols, int serial) {
    ns_env e = {serial, NULL};
    ns_gram(&e, A, X, rows, cols);
}

void dm_ns_poly(float *Y, const float *X, const float *A, float *B, int rows, int cols,
                float a, float b, float c, int serial) {
    ns_env e = {serial, NULL};
    ns_poly(&e, Y, X, A, B, rows, cols, a, b, c);
}

/* bf16 copies of one slice beyond dm_ns_slice_work: X [rows*cols], A and B [m*m], each
 * 64-byte aligned, in floats (ns_slice_bf16 now uses X and A of them; the size stays) */
static size_t bf16_floats(int rows, int cols) {
    size_t m = (size_t)imin(rows, cols), x = ((size_t)rows * cols + 31) & ~(size_t)31;
    return (x + 2 * ((m * m + 31) & ~(size_t)31)) / 2;
}

/* ||G||_F == 0: polar(0) := 0 (a padded or untouched slice), never 0/0. No additive
 * epsilon (docs/muon.md section 3): a nonzero float slice has norm >= 1.4e-45, so 1/norm
 * is finite in double and the output is exactly scale invariant even for a 1e-30
 * gradient. NaN/Inf inputs give NaN outputs (the caller checks finiteness). */
static int ns_zero(float *out, double norm, size_t len) {
    if (norm != 0.0) return 0;
    memset(out, 0, len * sizeof(float));
    return 1;
}

static void ns_slice(const ns_env *env, float *out, const float *G, int rows, int cols,
                     dm_ns_sched s, float *work) {
    size_t len = (size_t)rows * cols;
    if (len == 0) return;
    int m = imin(rows, cols), steps = dm_ns_sched_steps(s);
    float *A = work + len, *B = A + (size_t)m * m;
    ns_env e = *env;
    double norm = dm_frob_norm(G, len);
    if (ns_zero(out, norm, len)) return;
    /* Ping-pong between out and work so the last step lands in out: X0 goes to work
     * when the step count is odd, to out when even (safe when out == G: elementwise). */
    float *buf[2] = {out, work};
    int cur = steps & 1;
    double inv = 1.0 / (dm_ns_sched_safety(s) * norm);
    float *X0 = buf[cur];
#pragma omp parallel for schedule(static) if (!e.serial && len >= NS_PAR_MIN)
    for (size_t i = 0; i < len; i++) X0[i] = (float)((double)G[i] * inv);
    for (int t = 0; t < steps; t++) {
        double abc[3];
        dm_ns_sched_coeffs(s, t, abc);
        ns_gram(&e, A, buf[cur], rows, cols);
        ns_poly(&e, buf[cur ^ 1], buf[cur], A, B, rows, cols, (float)abc[0], (float)abc[1],
                (float)abc[2]);
        cur ^= 1;
    }
}

/* 1 when x[len] is all zeros (a zero slice stays zero: ns_zero) */
static int all_zero(const float *x, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (x[i] != 0.0f) return 0;
    return 1;
}

/* Step t of ns_slice on one slice: Y = X_{t+1} from X = X_t, or at t = 0 from X = G
 * through X0 (in x0). Exactly ns_slice's arithmetic on each step; ab: A and B. */
static void ns_step_slice(const ns_env *e, float *Y, const float *X, int rows, int cols,
                          dm_ns_sched s, int t, float *x0, float *ab) {
    size_t len = (size_t)rows * cols;
    if (len == 0) return;
    int m = imin(rows, cols);
    float *A = ab, *B = A + (size_t)m * m;
    if (t == 0) {
        double norm = dm_frob_norm(X, len);
        if (ns_zero(Y, norm, len)) return;
        double inv = 1.0 / (dm_ns_sched_safety(s) * norm);
#pragma omp parallel for schedule(static) if (!e->serial && len >= NS_PAR_MIN)
        for (size_t i = 0; i < len; i++) x0[i] = (float)((double)X[i] * inv);
        X = x0;
    } else if (all_zero(X, len)) { /* a zero G gave a zero X1 */
        memset(Y, 0, len * sizeof(float));
        return;
    }
    double abc[3];
    dm_ns_sched_coeffs(s, t, abc);
    ns_gram(e, A, X, rows, cols);
    ns_poly(e, Y, X, A, B, rows, cols, (float)abc[0], (float)abc[1], (float)abc[2]);
}

void dm_ns_step(float *Y, const float *X, int n, int rows, int cols, dm_ns_sched s, int t,
                float *x0, float *ab, int stack) {
    if (n <= 0 || rows <= 0 || cols <= 0) return;
    size_t len = (size_t)rows * cols, mm = (size_t)imin(rows, cols) * imin(rows, cols);
    if (dm_ns_tiled(n, rows, cols, stack)) {
        ns_env e = {0, NULL};
        ns_step_slice(&e, Y, X, rows, cols, s, t, x0, ab);
        return;
    }
    ns_env e = {1, NULL};
    int nt = omp_get_max_threads(), use = nt < n ? nt : n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use)
    for (int i = 0; i < n; i++)
        ns_step_slice(&e, Y + i * len, X + i * len, rows, cols, s, t, x0 + i * len,
                      ab + i * 2 * mm);
}

/* The same with bf16 operands. Every value a product reads is rounded to bf16 once, where
 * it is made; X and the polynomial's linear term stay f32 until then:
 *   X0 = bf16(G / (safety ||G||))           one pass over G after its norm
 *   repeat:  A  = X X^T (f32)                  [X^T X when tall]
 *            Ab = bf16(A)
 *            A <- c Ab Ab + b A, in place      (oneDNN: output scale c, sum post-op b)
 *            A_ii += a;  Bb = bf16(A)
 *            X <- bf16(Bb X)                   (oneDNN writes bf16: no f32 X, no pass)
 *   the last step writes Bb X in f32 to out.
 * Scratch: work[0, len/2) holds the second bf16 X (the products ping-pong between two),
 * work[len, len + m^2) A, and past dm_ns_slice_work the first bf16 X, Ab and Bb. */
static void ns_slice_bf16(const ns_env *e, float *out, const float *G, int rows, int cols,
                          dm_ns_sched s, float *work) {
    size_t len = (size_t)rows * cols;
    if (len == 0) return;
    int m = imin(rows, cols), wide = rows <= cols, steps = dm_ns_sched_steps(s);
    size_t mm = (size_t)m * m;
    float *A = work + len;
    uint16_t *xb[2], *ab, *bb;
    xb[0] = (uint16_t *)(work + dm_ns_slice_work(rows, cols));
    xb[1] = (uint16_t *)work;
    ab = xb[0] + ((len + 31) & ~(size_t)31);
    bb = ab + ((mm + 31) & ~(size_t)31);
    double norm = dm_frob_norm(G, len);
    if (ns_zero(out, norm, len)) return;
    dm_bf16_from_f32_scaled(xb[0], G, 1.0 / (dm_ns_sched_safety(s) * norm), len);
    for (int t = 0; t < steps; t++) {
        double abc[3];
        dm_ns_sched_coeffs(s, t, abc);
        const uint16_t *x = xb[t & 1];
        gemm_bf16(e, !wide, wide, m, m, wide ? cols : rows, 1.0f, x, cols, x, cols, 0.0f, A, m,
                  0);
        dm_bf16_from_f32(ab, A, mm);
        gemm_bf16(e, 0, 0, m, m, m, (float)abc[2], ab, m, ab, m, (float)abc[1], A, m, 0);
        for (int i = 0; i < m; i++) A[(size_t)i * m + i] += (float)abc[0];
        dm_bf16_from_f32(bb, A, mm);
        int last = t == steps - 1;
        void *y = last ? (void *)out : (void *)xb[(t + 1) & 1];
        if (wide) gemm_bf16(e, 0, 0, rows, cols, m, 1.0f, bb, m, x, cols, 0.0f, y, cols, !last);
        else gemm_bf16(e, 0, 1, rows, cols, m, 1.0f, x, cols, bb, m, 0.0f, y, cols, !last);
    }
}

static void ns_slice_any(const ns_env *e, float *out, const float *G, int rows, int cols,
                         dm_ns_sched s, float *work) {
    if (e->dnn) ns_slice_bf16(e, out, G, rows, cols, s, work);
    else ns_slice(e, out, G, rows, cols, s, work);
}

void dm_ns_slice(float *out, const float *G, int rows, int cols, dm_ns_sched s, float *work,
                 int serial) {
    ns_env e = {serial, NULL};
    ns_slice(&e, out, G, rows, cols, s, work);
}

int dm_ns_slice_threaded(int rows, int cols) {
    double m = imin(rows, cols), k = imax(rows, cols);
    return 4.0 * m * m * k + 2.0 * m * m * m >= DM_NS_THREAD_MIN_FLOPS;
}

/* The oneDNN primitives of every product a slice of this shape runs on one thread (the
 * Gram matrix, A^2 with each step's b and c, B X into bf16 and into f32), built before a
 * parallel loop that then only reads them: 0, or 1 when oneDNN declines one. */
static int ns_prepare_bf16(dm_onednn *dnn, int rows, int cols, dm_ns_sched s) {
    int m = imin(rows, cols), wide = rows <= cols, bad = 0;
    bad |= dm_onednn_prepare_bf16_here(dnn, !wide, wide, m, m, wide ? cols : rows, 1.0f, cols,
                                       cols, 0.0f, m, 0);
    for (int t = 0; t < dm_ns_sched_steps(s); t++) {
        double abc[3];
        dm_ns_sched_coeffs(s, t, abc);
        bad |= dm_onednn_prepare_bf16_here(dnn, 0, 0, m, m, m, (float)abc[2], m, m,
                                           (float)abc[1], m, 0);
    }
    for (int c16 = 0; c16 < 2; c16++) {
        if (wide)
            bad |= dm_onednn_prepare_bf16_here(dnn, 0, 0, rows, cols, m, 1.0f, m, cols, 0.0f,
                                               cols, c16);
        else
            bad |= dm_onednn_prepare_bf16_here(dnn, 0, 1, rows, cols, m, 1.0f, cols, m, 0.0f,
                                               cols, c16);
    }
    return bad;
}

/* Slice i is outp[i] / Gp[i] when the tables are given, else base + i * rows * cols.
 * Scratch: one slot of the slice's work per running thread (a slot is reused from slice to
 * slice, so it stays in cache; every scratch value is written before it is read, so the
 * bits do not depend on which slot a slice gets). In bf16 (dnn), the oneDNN primitives of
 * the shape are built first (ns_prepare_bf16), so the parallel loop only reads them; should
 * that fail, the stack's first slice runs alone first and builds them as it goes (a slice
 * that can run nowhere aborts there, as before). */
static void ns_run(float *const *outp, const float *const *Gp, float *outb, const float *Gb,
                   int n, int rows, int cols, dm_ns_sched s, float *work, dm_onednn *dnn,
                   int stack) {
    if (n <= 0 || rows <= 0 || cols <= 0) return;
    size_t len = (size_t)rows * cols;
    size_t ws = dm_ns_slice_work(rows, cols) + (dnn ? bf16_floats(rows, cols) : 0);
#define NS_OUT(i) (outp ? outp[i] : outb + (size_t)(i) * len)
#define NS_IN(i) (Gp ? Gp[i] : Gb + (size_t)(i) * len)
    if (dm_ns_tiled(n, rows, cols, stack)) {
        /* a lone big slice: its GEMMs tile over the threads */
        ns_env e = {0, dnn};
        ns_slice_any(&e, NS_OUT(0), NS_IN(0), rows, cols, s, work);
    } else {
        /* slices in parallel, each with single-threaded GEMMs (sgemm stays out of the
         * way: one pool). Dynamic: a core slowed by another process does not hold the
         * others back; the bits do not depend on which thread runs a slice. */
        ns_env e = {1, dnn};
        int first = 0;
        if (dnn && ns_prepare_bf16(dnn, rows, cols, s))
            ns_slice_any(&e, NS_OUT(0), NS_IN(0), rows, cols, s, work), first = 1;
        int nt = omp_get_max_threads(), use = nt < n - first ? nt : n - first;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use > 0 ? use : 1)
        for (int i = first; i < n; i++)
            ns_slice_any(&e, NS_OUT(i), NS_IN(i), rows, cols, s,
                         work + omp_get_thread_num() * ws);
    }
#undef NS_OUT
#undef NS_IN
}

void dm_ns_many(float *const *out, const float *const *G, int n, int rows, int cols,
                dm_ns_sched s, float *work) {
    ns_run(out, G, NULL, NULL, n, rows, cols, s, work, NULL, 0);
}

void dm_ns(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
           float *work) {
    ns_run(NULL, NULL, out, G, n, rows, cols, s, work, NULL, 0);
}

size_t dm_ns_work_bf16(int n, int rows, int cols) {
    return (size_t)(n > 0 ? n : 0) * (dm_ns_slice_work(rows, cols) + bf16_floats(rows, cols));
}

void dm_ns_bf16(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
                float *work, dm_onednn *dnn) {
    ns_run(NULL, NULL, out, G, n, rows, cols, s, work, dnn, 0);
}

void dm_ns_stack(float *const *out, const float *const *G, int n, int rows, int cols,
                 dm_ns_sched s, float *work, dm_onednn *dnn) {
    ns_run(out, G, NULL, NULL, n, rows, cols, s, work, dnn, 1);
}

void dm_ns_run(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
               float *work, dm_onednn *dnn, int stack) {
    ns_run(NULL, NULL, out, G, n, rows, cols, s, work, dnn, stack);
}

int dm_ns_tiled(int n, int rows, int cols, int stack) {
    return !stack && n == 1 && dm_ns_slice_threaded(rows, cols); /* as ns_run */
}
