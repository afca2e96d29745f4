/* rmsnorm.c — RMSNorm over the last dimension with a learned weight. */
#include <math.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define RMS_PAR_MIN 16384 /* elements below which a parallel region does not pay */

/* x, y: [N,C]; w: [C]; rstd: [N]
 * y = x * rstd[n] * w,  rstd[n] = 1/sqrt(mean_c x^2 + eps) */
void dm_rmsnorm_fwd_yb(float *y, uint16_t *yb, float *rstd, const float *x, const float *w,
                       int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= RMS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = y + (size_t)n * C;
        float r = 1.0f / sqrtf(dot8(xr, xr, C) / (float)C + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) yr[c] = xr[c] * r * w[c];
        if (yb) dm_bf16_run(yb + (size_t)n * C, yr, (size_t)C);
    }
}

void dm_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                    float eps) {
    dm_rmsnorm_fwd_yb(y, NULL, rstd, x, w, N, C, eps);
}

/* dx[N,C] += rstd*w*dy - x * rstd^3/C * sum_c(dy*w*x)   (accumulates: residual stream)
 * dw[C]   += sum_n dy * x * rstd[n]
 * One pass over the rows in RMS_CHUNKS fixed chunks (in parallel), each summing its rows'
 * dw terms in row order into its own partial; the partials are added in chunk order, so
 * the result does not depend on the thread count. (A second pass over column blocks read
 * dy and x again, 16 floats of every row, and was slower: docs/kernels.md.) C above
 * RMS_MAXC sums dw in one chunk, straight into dw. */
#define RMS_CHUNKS 16
#define RMS_MAXC 1024
void dm_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                    const float *rstd, int N, int C) {
    dm_rmsnorm_bwd_yb(dx, NULL, dw, dy, x, w, rstd, N, C);
}

void dm_rmsnorm_bwd_yb(float *dx, uint16_t *dxb, float *dw, const float *dy, const float *x,
                       const float *w, const float *rstd, int N, int C) {
    int par = (long)N * C >= RMS_PAR_MIN;
    int chunks = C <= RMS_MAXC ? RMS_CHUNKS : 1, per = (N + chunks - 1) / chunks;
    float part[RMS_CHUNKS][RMS_MAXC];
#pragma omp parallel for schedule(static) if (par && chunks > 1)
    for (int ch = 0; ch < chunks; ch++) {
        float *restrict acc = chunks > 1 ? part[ch] : dw;
        if (chunks > 1)
            for (int c = 0; c < C; c++) acc[c] = 0.0f;
        int n1 = (ch + 1) * per < N ? (ch + 1) * per : N;
        for (int n = ch * per; n < n1; n++) {
            const float *restrict xr = x + (size_t)n * C, *restrict dyr = dy + (size_t)n * C;
            float *restrict dxr = dx + (size_t)n * C;
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int c = 0;
            for (; c + 8 <= C; c += 8)
                for (int j = 0; j < 8; j++) s[j] += dyr[c + j] * w[c + j] * xr[c + j];
            for (int j = 0; c < C; c++, j++) s[j] += dyr[c] * w[c] * xr[c];
            float dot = sum8(s);
            float r = rstd[n];
            float k = dot * r * r * r / (float)C;
            for (int e = 0; e < C; e++) {
                dxr[e] += r * w[e] * dyr[e] - k * xr[e];
                acc[e] += dyr[e] * xr[e] * r;
            }
            if (dxb) dm_bf16_run(dxb + (size_t)n * C, dxr, (size_t)C);
        }
    }
    if (chunks > 1)
        for (int ch = 0; ch < chunks; ch++)
            for (int c = 0; c < C; c++) dw[c] += part[ch][c];
}
