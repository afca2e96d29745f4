/* rmsnorm.c — RMSNorm over the last dimension with a learned weight. */
#include <math.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vmath.h"

#define RMS_PAR_MIN 16384 /* elements below which a parallel region does not pay */
#define RMS_CB 64         /* column block for the weight gradient */

/* x, y: [N,C]; w: [C]; rstd: [N]
 * y = x * rstd[n] * w,  rstd[n] = 1/sqrt(mean_c x^2 + eps) */
void dm_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                    float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= RMS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = y + (size_t)n * C;
        float r = 1.0f / sqrtf(dot8(xr, xr, C) / (float)C + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) yr[c] = xr[c] * r * w[c];
    }
}

/* dx[N,C] += rstd*w*dy - x * rstd^3/C * sum_c(dy*w*x)   (accumulates: residual stream)
 * dw[C]   += sum_n dy * x * rstd[n]                      (columns in parallel, rows in order) */
void dm_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                    const float *rstd, int N, int C) {
    int par = (long)N * C >= RMS_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
        float *dxr = dx + (size_t)n * C;
        float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= C; c += 8)
            for (int j = 0; j < 8; j++) s[j] += dyr[c + j] * w[c + j] * xr[c + j];
        for (int j = 0; c < C; c++, j++) s[j] += dyr[c] * w[c] * xr[c];
        float dot = sum8(s);
        float r = rstd[n];
        float k = dot * r * r * r / (float)C;
        for (c = 0; c < C; c++) dxr[c] += r * w[c] * dyr[c] - k * xr[c];
    }
    int nb = (C + RMS_CB - 1) / RMS_CB;
#pragma omp parallel for schedule(static) if (par)
    for (int b = 0; b < nb; b++) {
        int c0 = b * RMS_CB, c1 = c0 + RMS_CB < C ? c0 + RMS_CB : C;
        float acc[RMS_CB] = {0};
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
            if (n + 8 < N) {
                prefetch_floats(xr + (size_t)8 * C + c0, c1 - c0);
                prefetch_floats(dyr + (size_t)8 * C + c0, c1 - c0);
            }
            float r = rstd[n];
            for (int c = c0; c < c1; c++) acc[c - c0] += dyr[c] * xr[c] * r;
        }
        for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
    }
}
