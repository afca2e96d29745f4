/* oracle.c — double-precision reference forwards for the kernels in src/kernels/kernels.h
 * (all but o_delta, which is in oracle_delta.c). Plain loops straight from the formulas,
 * written without looking at the float kernels: no tricks, no shared code. */
#include "oracle.h"

#include <math.h>

static double o_sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* log(1 + e^x), exact in double on both sides (log(1 + e^x) would round to 0 below -37) */
static double o_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

void o_embed(double *out, const uint8_t *tok, const double *table, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[n * C + c] = table[tok[n] * C + c];
}

void o_rmsnorm(double *y, const double *x, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double ms = 0;
        for (int c = 0; c < C; c++) ms += x[n * C + c] * x[n * C + c];
        ms /= C;
        double r = 1.0 / sqrt(ms + eps);
        for (int c = 0; c < C; c++) y[n * C + c] = x[n * C + c] * r * w[c];
    }
}

void o_matmul(double *out, const double *in, const double *W, const double *bias, int N,
              int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < I; i++) s += in[n * I + i] * W[o * I + i];
            out[n * O + o] = s;
        }
}

void o_silu(double *y, const double *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] * o_sig(x[i]);
}

void o_sigmoid(double *y, const double *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = o_sig(x[i]);
}

void o_swiglu(double *h, const double *a, const double *b, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = a[i] * o_sig(a[i]) * b[i];
}

void o_conv(double *y, const double *x, const double *w, int B, int T, int C, int W) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int i = 0; i < W; i++) {
                    int src = t - W + 1 + i;
                    if (src >= 0) s += w[c * W + i] * x[(b * T + src) * C + c];
                }
                y[(b * T + t) * C + c] = s;
            }
}

void o_l2norm(double *y, const double *x, int R, int D, double eps) {
    for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int d = 0; d < D; d++) ss += x[r * D + d] * x[r * D + d];
        double k = 1.0 / sqrt(ss + eps);
        for (int d = 0; d < D; d++) y[r * D + d] = x[r * D + d] * k;
    }
}

void o_gate(double *g, const double *f, const double *A_log, const double *dt_bias, int N,
            int H, int Cg, double lb) {
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int c = 0; c < Cg; c++) {
                int i = (n * H + h) * Cg + c;
                double u = f[i] + dt_bias[h * Cg + c];
                double A = exp(A_log[h]);
                g[i] = lb == 0.0 ? -A * o_softplus(u) : lb * o_sig(A * u);
            }
}

void o_gatednorm(double *y, const double *o, const double *z, const double *w, int R, int D,
                 double eps, int act) {
    for (int r = 0; r < R; r++) {
        double ms = 0;
        for (int d = 0; d < D; d++) ms += o[r * D + d] * o[r * D + d];
        double k = 1.0 / sqrt(ms / D + eps);
        for (int d = 0; d < D; d++) {
            double zz = z[r * D + d];
            double a = act == 1 ? zz * o_sig(zz) : o_sig(zz); /* 1: swish, 0: sigmoid */
            y[r * D + d] = o[r * D + d] * k * w[d] * a;
        }
    }
}

double o_xent(const double *logits, const uint8_t *targets, int N, int V) {
    double total = 0;
    for (int n = 0; n < N; n++) {
        const double *x = logits + (size_t)n * V;
        double m = x[0];
        for (int v = 1; v < V; v++) if (x[v] > m) m = x[v];
        double s = 0;
        for (int v = 0; v < V; v++) s += exp(x[v] - m);
        total += m + log(s) - x[targets[n]];
    }
    return total / N;
}
