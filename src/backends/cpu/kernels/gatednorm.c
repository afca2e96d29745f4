/* gatednorm.c — per-head RMSNorm with an output gate: sigmoid (KDA) or swish (GDN). */
#include <math.h>
#include <stdint.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define GN_PAR_MIN 16384 /* elements below which a parallel region does not pay */

/* o, z, y: [R,D]; w: [D]; rstd: [R]
 * y = o * rstd[r] * w * act(z),  rstd = 1/sqrt(mean_d o^2 + eps),  act = sigmoid | silu */
void dm_gatednorm_fwd_yb(float *y, uint16_t *yb, float *rstd, const float *o, const float *z,
                         const float *w, int R, int D, float eps, int act) {
#pragma omp parallel for schedule(static) if ((long)R * D >= GN_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *or_ = o + (size_t)r * D, *zr = z + (size_t)r * D;
        float *yr = y + (size_t)r * D;
        float k = 1.0f / sqrtf(dot8(or_, or_, D) / (float)D + eps);
        rstd[r] = k;
        if (act == DM_GATE_SWISH)
            for (int d = 0; d < D; d++) yr[d] = or_[d] * k * w[d] * (zr[d] * sigm(zr[d]));
        else
            for (int d = 0; d < D; d++) yr[d] = or_[d] * k * w[d] * sigm(zr[d]);
        if (yb) dm_bf16_run(yb + (size_t)r * D, yr, (size_t)D);
    }
}

void dm_gatednorm_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                      int R, int D, float eps, int act) {
    dm_gatednorm_fwd_yb(y, NULL, rstd, o, z, w, R, D, eps, act);
}

/* dy: [R,D].  With n = o*rstd, a = act(z), gn = dy*w*a:
 * do_[R,D] = rstd*gn - o * rstd^3/D * sum_d(gn*o)          (overwrites)
 * dz[R,D]  = dy * n * w * act'(z)                           (overwrites)
 * dw[D]   += sum_r dy * n * a
 * One pass over the rows in GN_CHUNKS fixed chunks (in parallel): each chunk sums its
 * rows' dw terms in row order into its own partial, and the partials are added in chunk
 * order, so the result does not depend on the thread count. (Two passes — rows, then
 * column blocks of 16 walking rows 256 bytes apart, with sigmoid(z) parked in dz between
 * them — took about three times as long: docs/kernels.md.) D above GN_MAXD (wider than
 * any head the chunked core takes) sums dw in one chunk, straight into dw. */
#define GN_CHUNKS 16
#define GN_MAXD 256
void dm_gatednorm_bwd(float *do_, float *dz, float *dw, const float *dy, const float *o,
                      const float *z, const float *w, const float *rstd, int R, int D,
                      int act) {
    dm_gatednorm_bwd_yb(do_, dz, NULL, dw, dy, o, z, w, rstd, R, D, act);
}

void dm_gatednorm_bwd_yb(float *do_, float *dz, uint16_t *dzb, float *dw, const float *dy,
                         const float *o, const float *z, const float *w, const float *rstd,
                         int R, int D, int act) {
    int par = (long)R * D >= GN_PAR_MIN, swish = act == DM_GATE_SWISH;
    int chunks = D <= GN_MAXD ? GN_CHUNKS : 1, per = (R + chunks - 1) / chunks;
    float part[GN_CHUNKS][GN_MAXD];
#pragma omp parallel for schedule(static) if (par && chunks > 1)
    for (int ch = 0; ch < chunks; ch++) {
        float acc[GN_MAXD];
        for (int d = 0; d < D && d < GN_MAXD; d++) acc[d] = 0.0f;
        int r1 = (ch + 1) * per < R ? (ch + 1) * per : R;
        for (int r = ch * per; r < r1; r++) {
            size_t off = (size_t)r * D;
            const float *restrict or_ = o + off, *restrict zr = z + off, *restrict dyr = dy + off;
            float *restrict sr = dz + off, *restrict dor = do_ + off;
            for (int d = 0; d < D; d++) sr[d] = sigm(zr[d]);
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int d = 0;
            if (swish) {
                for (; d + 8 <= D; d += 8)
                    for (int j = 0; j < 8; j++)
                        s[j] += dyr[d + j] * w[d + j] * (zr[d + j] * sr[d + j]) * or_[d + j];
                for (int j = 0; d < D; d++, j++) s[j] += dyr[d] * w[d] * (zr[d] * sr[d]) * or_[d];
            } else {
                for (; d + 8 <= D; d += 8)
                    for (int j = 0; j < 8; j++)
                        s[j] += dyr[d + j] * w[d + j] * sr[d + j] * or_[d + j];
                for (int j = 0; d < D; d++, j++) s[j] += dyr[d] * w[d] * sr[d] * or_[d];
            }
            float k = rstd[r], q = sum8(s) * k * k * k / (float)D;
            if (swish)
                for (int e = 0; e < D; e++) {
                    float sg = sr[e], zn = zr[e], g = dyr[e] * or_[e] * k;
                    dor[e] = k * (dyr[e] * w[e] * (zn * sg)) - q * or_[e];
                    if (chunks > 1) acc[e] += g * (zn * sg);
                    else dw[e] += g * (zn * sg);
                    sr[e] = g * w[e] * (sg * (1.0f + zn * (1.0f - sg)));
                }
            else
                for (int e = 0; e < D; e++) {
                    float sg = sr[e], g = dyr[e] * or_[e] * k;
                    dor[e] = k * (dyr[e] * w[e] * sg) - q * or_[e];
                    if (chunks > 1) acc[e] += g * sg;
                    else dw[e] += g * sg;
                    sr[e] = g * w[e] * (sg * (1.0f - sg));
                }
            if (dzb) dm_bf16_run(dzb + off, sr, (size_t)D);
        }
        if (chunks > 1)
            for (int d = 0; d < D; d++) part[ch][d] = acc[d];
    }
    if (chunks > 1)
        for (int ch = 0; ch < chunks; ch++)
            for (int d = 0; d < D; d++) dw[d] += part[ch][d];
}
