/* gatednorm.c — per-head RMSNorm with an output gate: sigmoid (KDA) or swish (GDN). */
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define GN_PAR_MIN 16384 /* elements below which a parallel region does not pay */
#define GN_CB 16         /* column block of the weight gradient */

/* e^x in plain C that gcc vectorizes (libm's expf does not vectorize without -ffast-math).
 * Cephes polynomial after x = n ln2 + r; 2^n applied as 2^n1 * 2^n2 so that underflow to
 * denormals and overflow to inf round correctly; no float-to-int conversion (n is read
 * from the bits of the rounded sum). Max error 0.98 ulp over [-104, 89]; e^x = inf above
 * 88.72, 0 below -103.9, NaN stays NaN. Identical copy in act.c, gate.c, gatednorm.c, xent.c
 * (no shared header yet). */
static inline float exp_v(float x) {
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    union { float f; uint32_t u; } bt = {t}, s1, s2;
    uint32_t ni = bt.u - 0x4B400000u; /* n as two's complement, |n| <= 151 */
    float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t n1 = (uint32_t)((int32_t)ni >> 1), n2 = ni - n1; /* both in the normal range */
    s1.u = (n1 + 127u) << 23;
    s2.u = (n2 + 127u) << 23;
    return p * s1.f * s2.f;
}

/* stable logistic: one exp of -|x|, never overflows */
static inline float sigm(float x) {
    float e = exp_v(-fabsf(x));
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

static inline float sum8(const float s[8]) {
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* o, z, y: [R,D]; w: [D]; rstd: [R]
 * y = o * rstd[r] * w * act(z),  rstd = 1/sqrt(mean_d o^2 + eps),  act = sigmoid | silu */
void dm_gatednorm_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                      int R, int D, float eps, int act) {
#pragma omp parallel for schedule(static) if ((long)R * D >= GN_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *or_ = o + (size_t)r * D, *zr = z + (size_t)r * D;
        float *yr = y + (size_t)r * D;
        float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int d = 0;
        for (; d + 8 <= D; d += 8)
            for (int j = 0; j < 8; j++) s[j] += or_[d + j] * or_[d + j];
        for (int j = 0; d < D; d++, j++) s[j] += or_[d] * or_[d];
        float k = 1.0f / sqrtf(sum8(s) / (float)D + eps);
        rstd[r] = k;
        if (act == DM_GATE_SWISH)
            for (d = 0; d < D; d++) yr[d] = or_[d] * k * w[d] * (zr[d] * sigm(zr[d]));
        else
            for (d = 0; d < D; d++) yr[d] = or_[d] * k * w[d] * sigm(zr[d]);
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
