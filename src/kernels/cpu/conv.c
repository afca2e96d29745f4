/* conv.c — depthwise causal convolution along time, zero left padding, no bias. */
#include "kernels/cpu/kernels.h"

#define CONV_PAR_MIN 16384 /* elements below which a parallel region does not pay */
#define CONV_CB 16         /* channel block of the weight gradient */
#define CONV_TB 8          /* taps handled per pass of the weight gradient */

/* x, y: [B,T,C]; w: [C,W]
 * y[b,t,c] = sum_{i<W} w[c,i] * x[b, t-W+1+i, c]   (x = 0 before t = 0; the last tap
 * w[c,W-1] multiplies the current token). Taps summed in order i = 0..W-1. */
void dm_conv_fwd(float *y, const float *x, const float *w, int B, int T, int C, int W) {
    long rows = (long)B * T;
#pragma omp parallel for schedule(static) if (rows * C >= CONV_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        int t = (int)(r % T);
        int i0 = W - 1 - t > 0 ? W - 1 - t : 0; /* first tap inside the sequence */
        float *yr = y + (size_t)r * C;
        const float *xr = x + (size_t)r * C;    /* row of the current token */
        for (int c = 0; c < C; c++) yr[c] = 0.0f;
        for (int i = i0; i < W; i++) {
            const float *xs = xr + (long)(i - W + 1) * C;
            for (int c = 0; c < C; c++) yr[c] += w[(size_t)c * W + i] * xs[c];
        }
    }
}

/* dy: [B,T,C]
 * dx[b,s,c]  = sum_{i: s+W-1-i < T} w[c,i] * dy[b, s+W-1-i, c]     (overwrites)
 * dw[c,i]   += sum_{b,t} dy[b,t,c] * x[b, t-W+1+i, c]   (channels in parallel, rows in order) */
void dm_conv_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 int B, int T, int C, int W) {
    long rows = (long)B * T;
    int par = rows * C >= CONV_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (long r = 0; r < rows; r++) {
        int s = (int)(r % T);
        int i0 = s + W - T > 0 ? s + W - T : 0; /* taps whose output lies inside the sequence */
        float *dxr = dx + (size_t)r * C;
        const float *dyr = dy + (size_t)r * C;  /* row of output token s */
        for (int c = 0; c < C; c++) dxr[c] = 0.0f;
        for (int i = i0; i < W; i++) {
            const float *dys = dyr + (long)(W - 1 - i) * C;
            for (int c = 0; c < C; c++) dxr[c] += w[(size_t)c * W + i] * dys[c];
        }
    }
    int nb = (C + CONV_CB - 1) / CONV_CB;
#pragma omp parallel for schedule(static) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CONV_CB, c1 = c0 + CONV_CB < C ? c0 + CONV_CB : C, nc = c1 - c0;
        for (int ia = 0; ia < W; ia += CONV_TB) {
            int ib = ia + CONV_TB < W ? ia + CONV_TB : W;
            float acc[CONV_TB][CONV_CB] = {{0}};
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const float *dyr = dy + ((size_t)b * T + t) * C + c0;
                    for (int i = ia; i < ib; i++) {
                        int src = t - W + 1 + i;
                        if (src < 0) continue;
                        const float *xr = x + ((size_t)b * T + src) * C + c0;
                        float *a = acc[i - ia];
                        for (int c = 0; c < nc; c++) a[c] += dyr[c] * xr[c];
                    }
                }
            for (int c = 0; c < nc; c++)
                for (int i = ia; i < ib; i++) dw[(size_t)(c0 + c) * W + i] += acc[i - ia][c];
        }
    }
}
