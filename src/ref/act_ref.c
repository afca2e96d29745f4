/* act_ref.c — reference activations (SiLU, sigmoid, SwiGLU) and the forget gate: the
 * textbook formulas in double with libm's exp / log1p, one element at a time. Each element
 * is read before it is written, so the backward may run in place (dx == dy). */
#include <math.h>

#include "ref/ref.h"

/* logistic in double without overflow: exp of -|x| only */
static double sig(double x) {
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* log(1 + e^u) without overflow */
static double softplus(double u) { return (u > 0 ? u : 0.0) + log1p(exp(-fabs(u))); }

/* y = x sigmoid(x);  dx = dy s (1 + x (1 - s)) */
void dm_silu_ref_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] * sig(x[i]));
}
void dm_silu_ref_bwd(float *dx, const float *dy, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double s = sig(x[i]);
        dx[i] = (float)(dy[i] * s * (1.0 + x[i] * (1.0 - s)));
    }
}

/* y = sigmoid(x);  dx = dy y (1 - y), from the output y */
void dm_sigmoid_ref_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = (float)sig(x[i]);
}
void dm_sigmoid_ref_bwd(float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = (float)((double)dy[i] * y[i] * (1.0 - y[i]));
}

/* h = silu(a) b;  da = dh b s (1 + a (1 - s)),  db = dh silu(a) */
void dm_swiglu_ref_fwd(float *h, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = (float)(a[i] * sig(a[i]) * b[i]);
}
void dm_swiglu_ref_bwd(float *da, float *db, const float *dh, const float *a, const float *b,
                       size_t n) {
    for (size_t i = 0; i < n; i++) {
        double ai = a[i], bi = b[i], g = dh[i], s = sig(ai);
        da[i] = (float)(g * bi * s * (1.0 + ai * (1.0 - s)));
        db[i] = (float)(g * ai * s);
    }
}

/* f, g: [N,H,Cg]; u = f + dt_bias[h,c]; A = exp(A_log[h])
 *   lb == 0: g = -A softplus(u)        lb < 0: g = lb sigmoid(A u) */
void dm_gate_ref_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int N,
                     int H, int Cg, float lb) {
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int c = 0; c < Cg; c++) {
                size_t i = ((size_t)n * H + h) * Cg + c;
                double A = exp((double)A_log[h]), u = (double)f[i] + dt_bias[(size_t)h * Cg + c];
                g[i] = (float)(lb == 0.0f ? -A * softplus(u) : lb * sig(A * u));
            }
}

/* df = dg dg/du (overwrites); ddt_bias[h,c] += sum_n df; dA_log[h] += sum_{n,c} dg dg/dA_log
 *   lb == 0: dg/du = -A sigmoid(u),  dg/dA_log = -A softplus(u)
 *   lb <  0: dg/du = lb s (1-s) A,   dg/dA_log = lb s (1-s) A u,   s = sigmoid(A u) */
void dm_gate_ref_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                     const float *A_log, const float *dt_bias, int N, int H, int Cg, float lb) {
    for (int h = 0; h < H; h++) {
        double A = exp((double)A_log[h]), sA = 0;
        for (int c = 0; c < Cg; c++) {
            double sdt = 0;
            for (int n = 0; n < N; n++) {
                size_t i = ((size_t)n * H + h) * Cg + c;
                double u = (double)f[i] + dt_bias[(size_t)h * Cg + c], d = dg[i], du, dA;
                if (lb == 0.0f) {
                    du = -A * sig(u);
                    dA = -A * softplus(u);
                } else {
                    double s = sig(A * u);
                    du = lb * s * (1.0 - s) * A;
                    dA = du * u;
                }
                df[i] = (float)(d * du);
                sdt += d * du;
                sA += d * dA;
            }
            ddt_bias[(size_t)h * Cg + c] = (float)(ddt_bias[(size_t)h * Cg + c] + sdt);
        }
        dA_log[h] = (float)(dA_log[h] + sA);
    }
}
