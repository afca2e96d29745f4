/* gatednorm.c — per-head RMSNorm with an output gate: sigmoid (KDA) or swish (GDN). */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vmath.h"

#define GN_PAR_MIN 16384 /* elements below which a parallel region does not pay */
#define GN_CB 16         /* column block of the weight gradient */

/* o, z, y: [R,D]; w: [D]; rstd: [R]
 * y = o * rstd[r] * w * act(z),  rstd = 1/sqrt(mean_d o^2 + eps),  act = sigmoid | silu */
void dm_gatednorm_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                      int R, int D, float eps, int act) {
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
    }
}

/* dy: [R,D].  With n = o*rstd, a = act(z), gn = dy*w*a:
 * do_[R,D] = rstd*gn - o * rstd^3/D * sum_d(gn*o)          (overwrites)
 * dz[R,D]  = dy * n * w * act'(z)                           (overwrites)
 * dw[D]   += sum_r dy * n * a                 (columns in parallel, rows in order)
 * Pass 1 (rows) writes do_ and leaves sigmoid(z) in dz; pass 2 (column blocks) reads it
 * back to finish dz and sum dw, so each exp is taken once. */
void dm_gatednorm_bwd(float *do_, float *dz, float *dw, const float *dy, const float *o,
                      const float *z, const float *w, const float *rstd, int R, int D,
                      int act) {
    int par = (long)R * D >= GN_PAR_MIN, swish = act == DM_GATE_SWISH;
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < R; r++) {
        size_t off = (size_t)r * D;
        const float *or_ = o + off, *zr = z + off, *dyr = dy + off;
        float *sr = dz + off, *dor = do_ + off;
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
                for (int j = 0; j < 8; j++) s[j] += dyr[d + j] * w[d + j] * sr[d + j] * or_[d + j];
            for (int j = 0; d < D; d++, j++) s[j] += dyr[d] * w[d] * sr[d] * or_[d];
        }
        float k = rstd[r], q = sum8(s) * k * k * k / (float)D;
        if (swish)
            for (d = 0; d < D; d++) dor[d] = k * (dyr[d] * w[d] * (zr[d] * sr[d])) - q * or_[d];
        else
            for (d = 0; d < D; d++) dor[d] = k * (dyr[d] * w[d] * sr[d]) - q * or_[d];
    }
    int nb = (D + GN_CB - 1) / GN_CB;
#pragma omp parallel for schedule(static) if (par)
    for (int b = 0; b < nb; b++) {
        int d0 = b * GN_CB, nd = d0 + GN_CB < D ? GN_CB : D - d0;
        float acc[GN_CB] = {0};
        for (int r = 0; r < R; r++) {
            size_t off = (size_t)r * D + d0;
            const float *or_ = o + off, *zr = z + off, *dyr = dy + off, *wd = w + d0;
            float *dzr = dz + off, k = rstd[r];
            if (swish)
                for (int d = 0; d < nd; d++) {
                    float sg = dzr[d], zn = zr[d], g = dyr[d] * or_[d] * k;
                    acc[d] += g * (zn * sg);
                    dzr[d] = g * wd[d] * (sg * (1.0f + zn * (1.0f - sg)));
                }
            else
                for (int d = 0; d < nd; d++) {
                    float sg = dzr[d], g = dyr[d] * or_[d] * k;
                    acc[d] += g * sg;
                    dzr[d] = g * wd[d] * (sg * (1.0f - sg));
                }
        }
        for (int d = 0; d < nd; d++) dw[d0 + d] += acc[d];
    }
}
