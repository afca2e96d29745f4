/* optim_ref.c — the references of the optimizer's kernels (optim_ref.h). */
#include "ref/optim_ref.h"

#include <math.h>
#include <string.h>

void dm_adamw_ref(float *po, float *m1o, float *m2o, const float *p, const float *g,
                  const float *m1, const float *m2, size_t n, float lr, float decay, float b1,
                  float b2, float eps, float c1, float c2, float gscale, int cautious) {
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * gscale;
        double a = b1 * (double)m1[i] + (1.0 - b1) * gi;
        double v = b2 * (double)m2[i] + (1.0 - b2) * gi * gi;
        m1o[i] = (float)a;
        m2o[i] = (float)v;
        double d = cautious && a * p[i] < 0 ? 1.0 : decay;
        po[i] = (float)((double)p[i] * d - lr * (a * c1) / (sqrt(v * c2) + eps));
    }
}

void dm_momentum_ref(float *momo, float *u, const float *mom, const float *g, size_t n,
                     float beta, float gscale) {
    for (size_t j = 0; j < n; j++) {
        double gj = (double)g[j] * gscale, m = beta * (double)mom[j] + (1.0 - beta) * gj;
        momo[j] = (float)m;
        if (u) u[j] = (float)((1.0 - beta) * gj + beta * m);
    }
}

void dm_muon_apply_ref(float *wo, const float *w, const float *x, size_t n, float decay,
                       float step, int cautious) {
    for (size_t j = 0; j < n; j++) {
        double d = cautious && (double)x[j] * w[j] < 0 ? 1.0 : decay;
        wo[j] = (float)((double)w[j] * d - (double)step * x[j]);
    }
}

double dm_grad_norm2_ref(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

void dm_grad_add_ref(float *acco, const float *acc, const float *g, size_t n, int first) {
    for (size_t i = 0; i < n; i++) acco[i] = first ? g[i] : (float)((double)acc[i] + g[i]);
}

void dm_grad_mean_ref(float *out, const float *acc, size_t n, int A) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)acc[i] / A);
}

/* ---- Newton–Schulz and the Stiefel retraction's products ---- */

/* A[m, m] = X X^T (rows <= cols) or X^T X, X [rows, cols] */
static void gram_ref(float *A, const float *X, int rows, int cols, int serial) {
    (void)serial;
    int wide = rows <= cols, m = wide ? rows : cols, k = wide ? cols : rows;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int r = 0; r < k; r++)
                s += wide ? (double)X[(size_t)i * cols + r] * X[(size_t)j * cols + r]
                          : (double)X[(size_t)r * cols + i] * X[(size_t)r * cols + j];
            A[(size_t)i * m + j] = (float)s;
        }
}

/* B = a I + b A + c A^2 (A symmetric: A^2[i][j] = sum_k A[i][k] A[j][k]); then Y = B X
 * (rows <= cols) or X B^T */
static void poly_ref(float *Y, const float *X, const float *A, float *B, int rows, int cols,
                     float a, float b, float c, int serial) {
    (void)serial;
    int wide = rows <= cols, m = wide ? rows : cols;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int k = 0; k < m; k++) s += (double)A[(size_t)i * m + k] * A[(size_t)j * m + k];
            B[(size_t)i * m + j] =
                (float)((double)c * s + (double)b * A[(size_t)i * m + j] + (i == j ? a : 0.0));
        }
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < cols; q++) {
            double s = 0;
            for (int k = 0; k < m; k++)
                s += wide ? (double)B[(size_t)r * m + k] * X[(size_t)k * cols + q]
                          : (double)X[(size_t)r * cols + k] * B[(size_t)q * m + k];
            Y[(size_t)r * cols + q] = (float)s;
        }
}

const dm_ns_blocks dm_ns_ref_blocks = {gram_ref, poly_ref};

void dm_ns_ref_step(float *Y, const float *X, int n, int rows, int cols, dm_ns_sched s,
                    int t, float *x0, float *ab) {
    if (n <= 0 || rows <= 0 || cols <= 0) return;
    size_t len = (size_t)rows * cols, mm = (size_t)(rows < cols ? rows : cols);
    mm *= mm;
    double abc[3];
    dm_ns_sched_coeffs(s, t, abc);
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        const float *x = X + i * len;
        float *y = Y + i * len, *A = ab + i * 2 * mm, *B = A + mm;
        double norm = 0;
        for (size_t j = 0; j < len; j++) norm += (double)x[j] * x[j];
        if (norm == 0.0) { /* polar(0) := 0, and zeros stay zeros */
            memset(y, 0, len * sizeof(float));
            continue;
        }
        if (t == 0) {
            double inv = 1.0 / (dm_ns_sched_safety(s) * sqrt(norm));
            for (size_t j = 0; j < len; j++) x0[i * len + j] = (float)((double)x[j] * inv);
            x = x0 + i * len;
        }
        gram_ref(A, x, rows, cols, 1);
        poly_ref(y, x, A, B, rows, cols, (float)abc[0], (float)abc[1], (float)abc[2], 1);
    }
}

void dm_retract_sphere_ref(float *out, const float *W, const float *R, int n, int rows,
                           int cols) {
    size_t len = (size_t)rows * cols;
    for (int i = 0; i < n; i++) {
        const float *w = W + i * len;
        double norm = 0;
        for (size_t j = 0; j < len; j++) norm += (double)w[j] * w[j];
        norm = sqrt(norm);
        for (size_t j = 0; j < len; j++)
            out[i * len + j] = R[i] > 0 && norm > 0 ? (float)((double)w[j] * R[i] / norm) : w[j];
    }
}
