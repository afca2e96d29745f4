/* gate.c — the forget gate in log space (KDA: per head and key channel; GDN: per head). */
#include <math.h>
#include <stdint.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define GATE_PAR_MIN 8192 /* elements below which a parallel region does not pay */
#define GATE_CB 64        /* channel block of the backward (parameter-gradient columns) */

/* With e = exp(-|u|) (shared by both):
 * softplus(u) = log(1 + e^u) = max(u, 0) + log1p(e), never overflows; above u = 20 it is
 * exactly u in float (log1p(e) < 2.1e-9, under half an ulp of u), so no branch is needed,
 * and without one gcc vectorizes the loop (a division skipped for large u is control flow
 * it does not vectorize);
 * sigmoid(u)  = 1/(1+e) for u >= 0, e/(1+e) otherwise */
static inline float softplus_e(float u, float e) {
    return (u > 0.0f ? u : 0.0f) + log1p01(e);
}
static inline float sigm_e(float u, float e) {
    return (u >= 0.0f ? 1.0f : e) / (1.0f + e); /* one division (see sigm) */
}

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
    dm_gate_bwd_yb(df, NULL, dA_log, ddt_bias, dg, f, A_log, dt_bias, N, H, Cg, lb);
}

void dm_gate_bwd_yb(float *df, uint16_t *dfb, float *dA_log, float *ddt_bias, const float *dg,
                    const float *f, const float *A_log, const float *dt_bias, int N, int H,
                    int Cg, float lb) {
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
            if (n + 8 < N) {
                prefetch_floats(dg + o + (size_t)8 * H * Cg, nc);
                prefetch_floats(f + o + (size_t)8 * H * Cg, nc);
            }
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
            if (dfb) dm_bf16_run(dfb + o, df + o, (size_t)nc);
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
