/* norm_ref.c — the COMPOSED references of RMSNorm and of the per-head gated RMSNorm:
 * each op written as the chain of elementary steps an autodiff framework would record
 * (mean of squares, rsqrt, scale, weight, gate), forward and backward step by step, with
 * the intermediates in scratch. The fused kernels (rmsnorm.c, gatednorm.c) do each in one
 * pass per row; the dispatch guard (dispatch.c) checks one against the other. Slow on
 * purpose: clear, serial, no tricks. */
#include <math.h>
#include <string.h>

#include "ref/ref.h"

/* steps shared by both norms, on rows of length C:
 *   ms[n] = mean_c x^2;   r[n] = (ms + eps)^(-1/2);   xhat = x * r   */
static void norm_rows_fwd(float *xhat, float *r, const float *x, int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        double ms = 0;
        for (int c = 0; c < C; c++) ms += (double)x[(size_t)n * C + c] * x[(size_t)n * C + c];
        ms /= C;
        r[n] = (float)(1.0 / sqrt(ms + eps));
        for (int c = 0; c < C; c++) xhat[(size_t)n * C + c] = x[(size_t)n * C + c] * r[n];
    }
}

/* backward of the same chain: given dxhat, dx = dxhat*r + x * dms * 2/C with
 * dr = sum_c dxhat*x,  dms = dr * (-1/2) (ms+eps)^(-3/2) = -dr r^3 / 2 */
static void norm_rows_bwd(float *dx, int accumulate, const float *dxhat, const float *x,
                          const float *r, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *g = dxhat + (size_t)n * C;
        double dr = 0;
        for (int c = 0; c < C; c++) dr += (double)g[c] * xr[c];
        double dms = -0.5 * dr * (double)r[n] * r[n] * r[n];
        for (int c = 0; c < C; c++) {
            float v = (float)(g[c] * r[n] + xr[c] * dms * 2.0 / C);
            if (accumulate) dx[(size_t)n * C + c] += v;
            else dx[(size_t)n * C + c] = v;
        }
    }
}

/* RMSNorm: y = xhat * w.  scratch: [N*C] (xhat) */
void dm_rmsnorm_ref_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                        float eps, float *scratch) {
    norm_rows_fwd(scratch, rstd, x, N, C, eps);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) y[(size_t)n * C + c] = scratch[(size_t)n * C + c] * w[c];
}

/* dw += sum_n dy*xhat;  dxhat = dy*w;  dx += chain(dxhat).  scratch: [2*N*C] */
void dm_rmsnorm_ref_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int N, int C, float *scratch) {
    float *xhat = scratch, *dxhat = scratch + (size_t)N * C;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) xhat[(size_t)n * C + c] = x[(size_t)n * C + c] * rstd[n];
    for (int c = 0; c < C; c++) {
        double acc = 0;
        for (int n = 0; n < N; n++) acc += (double)dy[(size_t)n * C + c] * xhat[(size_t)n * C + c];
        dw[c] += (float)acc;
    }
    for (size_t i = 0; i < (size_t)N * C; i++) dxhat[i] = dy[i] * w[i % (size_t)C];
    norm_rows_bwd(dx, 1, dxhat, x, rstd, N, C);
}

static float gate_act(float z, int act) {
    float s = 1.0f / (1.0f + expf(-z));
    return act == DM_GATE_SWISH ? z * s : s;
}

static float gate_act_grad(float z, int act) {
    float s = 1.0f / (1.0f + expf(-z));
    return act == DM_GATE_SWISH ? s * (1.0f + z * (1.0f - s)) : s * (1.0f - s);
}

/* gated: y = xhat * w * act(z).  scratch: [R*D] */
void dm_gatednorm_ref_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                          int R, int D, float eps, int act, float *scratch) {
    norm_rows_fwd(scratch, rstd, o, R, D, eps);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) {
            size_t i = (size_t)r * D + d;
            y[i] = scratch[i] * w[d] * gate_act(z[i], act);
        }
}

/* dz = dy * xhat*w * act'(z);  dw += sum dy*xhat*act(z);  dxhat = dy*w*act(z);
 * do = chain(dxhat).  scratch: [2*R*D] */
void dm_gatednorm_ref_bwd(float *do_, float *dz, float *dw, const float *dy, const float *o,
                          const float *z, const float *w, const float *rstd, int R, int D,
                          int act, float *scratch) {
    float *xhat = scratch, *dxhat = scratch + (size_t)R * D;
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) xhat[(size_t)r * D + d] = o[(size_t)r * D + d] * rstd[r];
    for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int r = 0; r < R; r++) {
            size_t i = (size_t)r * D + d;
            acc += (double)dy[i] * xhat[i] * gate_act(z[i], act);
        }
        dw[d] += (float)acc;
    }
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) {
            size_t i = (size_t)r * D + d;
            dz[i] = dy[i] * xhat[i] * w[d] * gate_act_grad(z[i], act);
            dxhat[i] = dy[i] * w[d] * gate_act(z[i], act);
        }
    norm_rows_bwd(do_, 0, dxhat, o, rstd, R, D);
}
