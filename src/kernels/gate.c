/* gate.c — the forget gate in log space (KDA: per head and key channel; GDN: per head). */
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define GATE_PAR_MIN 8192 /* elements below which a parallel region does not pay */
#define GATE_CB 16        /* channel block of the backward (parameter-gradient columns) */

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

/* log(1 + t) for t in [0, 1] (vectorizes): 2 atanh(s), s = t / (2 + t) in [0, 1/3], series
 * to s^15; no cancellation for small t. Max error 2.8 ulp. */
static inline float log1p01(float t) {
    float s = t / (2.0f + t), z = s * s;
    float p = 1.0f / 15.0f;
    p = p * z + 1.0f / 13.0f;
    p = p * z + 1.0f / 11.0f;
    p = p * z + 1.0f / 9.0f;
    p = p * z + 1.0f / 7.0f;
    p = p * z + 1.0f / 5.0f;
    p = p * z + 1.0f / 3.0f;
    p = p * z + 1.0f;
    return 2.0f * s * p;
}

/* With e = exp(-|u|) (shared by both):
 * softplus(u) = log(1 + e^u) = max(u, 0) + log1p(e), never overflows (u > 20: exactly u);
 * sigmoid(u)  = 1/(1+e) for u >= 0, e/(1+e) otherwise */
static inline float softplus_e(float u, float e) {
    return u > 20.0f ? u : (u > 0.0f ? u : 0.0f) + log1p01(e);
}
static inline float sigm_e(float u, float e) {
    return u >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline float sigm(float x) { return sigm_e(x, exp_v(-fabsf(x))); }

/* f, g: [N,H,Cg]; A_log: [H]; dt_bias: [H,Cg];  u = f + dt_bias[h,c]
 *   lb == 0: g = -exp(A_log[h]) * softplus(u)
 *   lb <  0: g = lb * sigmoid(exp(A_log[h]) * u) */
void dm_gate_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int N,
                 int H, int Cg, float lb) {
#pragma omp parallel for schedule(static) if ((long)N * H * Cg >= GATE_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t o = ((size_t)n * H + h) * Cg;
            const float *db = dt_bias + (size_t)h * Cg;
            float A = expf(A_log[h]);
            if (lb == 0.0f)
                for (int c = 0; c < Cg; c++) {
                    float u = f[o + c] + db[c];
                    g[o + c] = -A * softplus_e(u, exp_v(-fabsf(u)));
                }
            else
                for (int c = 0; c < Cg; c++) g[o + c] = lb * sigm(A * (f[o + c] + db[c]));
        }
}

/* dg: [N,H,Cg]
 * df[N,H,Cg] = dg * dg/du                               (overwrites)
 *   lb == 0: dg/du = -A sigmoid(u),          dg/dA_log = g
 *   lb <  0: dg/du = lb s (1-s) A,           dg/dA_log = lb s (1-s) A u,   s = sigmoid(A u)
 * ddt_bias[H,Cg] += sum_n df;   dA_log[H] += sum_{n,c} dg * dg/dA_log
 * Parallel over blocks of GATE_CB channels of one head; each block sums its rows in order
 * (in double), and the block partials of dA_log are added in block order (omp ordered), so
 * the result does not depend on the thread count. */
void dm_gate_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                 const float *A_log, const float *dt_bias, int N, int H, int Cg, float lb) {
    int nbh = (Cg + GATE_CB - 1) / GATE_CB; /* blocks per head */
    int nb = H * nbh;
#pragma omp parallel for schedule(static, 1) ordered if ((long)N * H * Cg >= GATE_PAR_MIN)
    for (int blk = 0; blk < nb; blk++) {
        int h = blk / nbh, c0 = (blk % nbh) * GATE_CB;
        int nc = c0 + GATE_CB < Cg ? GATE_CB : Cg - c0;
        const float *db = dt_bias + (size_t)h * Cg + c0;
        float A = expf(A_log[h]);
        double acc_dt[GATE_CB] = {0}, acc_A[GATE_CB] = {0};
        for (int n = 0; n < N; n++) {
            size_t o = ((size_t)n * H + h) * Cg + c0;
            if (lb == 0.0f)
                for (int c = 0; c < nc; c++) {
                    float u = f[o + c] + db[c], d = dg[o + c], e = exp_v(-fabsf(u));
                    float v = d * (-A * sigm_e(u, e));
                    df[o + c] = v;
                    acc_dt[c] += v;
                    acc_A[c] += d * (-A * softplus_e(u, e));
                }
            else
                for (int c = 0; c < nc; c++) {
                    float u = f[o + c] + db[c], d = dg[o + c];
                    float s = sigm(A * u);
                    float v = d * (lb * s * (1.0f - s) * A);
                    df[o + c] = v;
                    acc_dt[c] += v;
                    acc_A[c] += v * u;
                }
        }
        double part = 0.0;
        for (int c = 0; c < nc; c++) {
            ddt_bias[(size_t)h * Cg + c0 + c] += (float)acc_dt[c];
            part += acc_A[c];
        }
#pragma omp ordered
        dA_log[h] += (float)part;
    }
}
