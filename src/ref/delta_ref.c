/* delta_ref.c — the reference delta-rule core (KDA / GDN): token-serial forward and
 * reverse-time backward. docs/kda.md sections 4 and 5; contract in ref/ref.h.
 *
 * Shapes (token-major, as in dm_delta_dims):
 *   q, k : [B,T,H,dk]      v, o, dO : [B,T,H,dv]
 *   g    : [B,T,H,dk] (KDA) or [B,T,H] (GDN, scalar_gate)      beta : [B,T,H]
 *   h0, hT, dhT, dh0 : [B,H,dk,dv]
 * Per (b,h) pair, with S a [dk,dv] state (rows = key channels, contiguous in dv):
 *   S' = Diag(exp(g_t)) S_{t-1};  e = v_t - S'^T k_t;  S_t = S' + beta_t k_t e^T;
 *   o_t = scale * S_t^T q_t.
 * The value columns of S evolve independently (the gate and the update act on rows), so
 * the forward may process dv in column tiles without changing a single bit.
 *
 * Parallelism: (b,h) pairs over threads, each pair serial, every reduction in a fixed
 * order inside one thread: results are bitwise independent of nthreads.
 * Inner loops run along dv (contiguous); dot products along dv use `omp simd reduction`,
 * whose order is fixed at compile time (deterministic, no -ffast-math needed).
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "ref/ref.h"

/* The forward keeps its state tile on the stack: [dk, w] with dk*w <= REF_TILE_CAP (no
 * allocation, no scratch argument). Callers must keep dk <= REF_MAX_DK = 4096
 * (ops/delta_api.c checks it). */
#define REF_TILE_CAP 16384
#define REF_MAX_DK 4096
#define REF_MAX_W 1024

static inline size_t idx_k(const dm_delta_dims *d, int b, int t, int h) {
    return (((size_t)b * d->T + t) * d->H + h) * (size_t)d->dk;
}
static inline size_t idx_v(const dm_delta_dims *d, int b, int t, int h) {
    return (((size_t)b * d->T + t) * d->H + h) * (size_t)d->dv;
}
static inline size_t idx_s(const dm_delta_dims *d, int b, int t, int h) {
    return ((size_t)b * d->T + t) * d->H + h; /* beta, scalar g */
}

/* a[0..dk) = exp(g_t) for token (b,t,h): per channel (KDA) or broadcast (GDN). */
static inline void gate_exp(const dm_delta_dims *d, const float *g, int b, int t, int h,
                            float *restrict a) {
    if (d->scalar_gate) {
        float at = expf(g[idx_s(d, b, t, h)]);
        for (int i = 0; i < d->dk; i++) a[i] = at;
    } else {
        const float *gt = g + idx_k(d, b, t, h);
        for (int i = 0; i < d->dk; i++) a[i] = expf(gt[i]);
    }
}

static inline float dotv(const float *restrict x, const float *restrict y, int n) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) s += x[j] * y[j];
    return s;
}

/* One token of the recurrence on a state tile of w columns (row stride w):
 *   S <- Diag(a) S;  u = beta (v - S^T k);  S <- S + k u^T.
 * Shared by the forward and the backward's recompute so both produce the same bits.
 *   S: [dk, w] in place;  a, k: [dk];  v: [w];  u: [w] out (scratch). */
static inline void step_state(float *restrict S, const float *restrict a,
                              const float *restrict k, const float *restrict v, float beta,
                              float *restrict u, int dk, int w) {
    for (int j = 0; j < w; j++) u[j] = v[j];
    for (int i = 0; i < dk; i++) {
        float *restrict Si = S + (size_t)i * w;
        const float ai = a[i], ki = k[i];
        for (int j = 0; j < w; j++) {
            Si[j] *= ai;
            u[j] -= ki * Si[j];
        }
    }
    for (int j = 0; j < w; j++) u[j] *= beta;
    for (int i = 0; i < dk; i++) {
        float *restrict Si = S + (size_t)i * w;
        const float ki = k[i];
        for (int j = 0; j < w; j++) Si[j] += ki * u[j];
    }
}

/* Forward of one (b,h) pair. */
static void fwd_pair(const dm_delta_dims *d, int b, int h, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     float *o, float *hT) {
    const int T = d->T, dk = d->dk, dv = d->dv;
    float S[REF_TILE_CAP]; /* [dk, w] state tile */
    float a[REF_MAX_DK];   /* exp(g_t) */
    float u[REF_MAX_W];    /* beta * error */
    float acc[REF_MAX_W];  /* S^T q */
    int w = REF_TILE_CAP / dk;
    if (w > dv) w = dv;
    if (w > REF_MAX_W) w = REF_MAX_W;
    const size_t soff = ((size_t)b * d->H + h) * (size_t)dk * dv;
    /* With one tile exp(g) is computed once per token/channel; wider states (dk*dv >
     * REF_TILE_CAP) recompute it per tile. */
    for (int j0 = 0; j0 < dv; j0 += w) {
        const int wn = dv - j0 < w ? dv - j0 : w;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < wn; j++)
                S[(size_t)i * wn + j] = h0 ? h0[soff + (size_t)i * dv + j0 + j] : 0.f;
        for (int t = 0; t < T; t++) {
            const float *qt = q + idx_k(d, b, t, h), *kt = k + idx_k(d, b, t, h);
            const float *vt = v + idx_v(d, b, t, h) + j0;
            gate_exp(d, g, b, t, h, a);
            step_state(S, a, kt, vt, beta[idx_s(d, b, t, h)], u, dk, wn);
            for (int j = 0; j < wn; j++) acc[j] = 0.f;
            for (int i = 0; i < dk; i++) {
                const float *restrict Si = S + (size_t)i * wn;
                const float qi = qt[i];
                for (int j = 0; j < wn; j++) acc[j] += qi * Si[j];
            }
            float *restrict ot = o + idx_v(d, b, t, h) + j0;
            for (int j = 0; j < wn; j++) ot[j] = d->scale * acc[j];
        }
        if (hT)
            for (int i = 0; i < dk; i++)
                memcpy(hT + soff + (size_t)i * dv + j0, S + (size_t)i * wn,
                       (size_t)wn * sizeof(float));
    }
}

void dm_delta_ref_fwd(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, const float *h0, float *o, float *hT,
                      int nthreads) {
    const int npair = d->B * d->H;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int p = 0; p < npair; p++) fwd_pair(d, p / d->H, p % d->H, q, k, v, g, beta, h0, o, hT);
}

/* Per-thread slice of the backward scratch, in floats (rounded to 16 = 64 bytes):
 *   P  [T, dk, dv]  states before each token, P_t = S_{t-1} (P_0 = h0)
 *   Sp [dk, dv]     S' of the current token
 *   dS [dk, dv]     gradient of the state
 *   a [dk], e [dv], de [dv], u [dv] */
static size_t bwd_slice(const dm_delta_dims *d) {
    const size_t s = (size_t)d->dk * d->dv;
    size_t n = ((size_t)d->T + 2) * s + (size_t)d->dk + 3 * (size_t)d->dv;
    return (n + 15) & ~(size_t)15;
}

size_t dm_delta_ref_bwd_work(const dm_delta_dims *d, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return (size_t)nthreads * bwd_slice(d);
}

/* Backward of one (b,h) pair (docs/kda.md section 5), scratch = this thread's slice. */
static void bwd_pair(const dm_delta_dims *d, int b, int h, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     const float *dO, const float *dhT, float *dq, float *dk_, float *dv_,
                     float *dg, float *dbeta, float *dh0, float *work) {
    const int T = d->T, dk = d->dk, dv = d->dv;
    const size_t ss = (size_t)dk * dv;
    const size_t soff = ((size_t)b * d->H + h) * ss;
    const float scale = d->scale;
    float *restrict P = work;
    float *restrict Sp = P + (size_t)T * ss;
    float *restrict dS = Sp + ss;
    float *restrict a = dS + ss;
    float *restrict e = a + dk;
    float *restrict de = e + dv;
    float *restrict u = de + dv;

    /* 1. recompute the states before each token: P_0 = h0, P_{t+1} = step(P_t) */
    if (h0) memcpy(P, h0 + soff, ss * sizeof(float));
    else memset(P, 0, ss * sizeof(float));
    for (int t = 0; t + 1 < T; t++) {
        float *Pn = P + (size_t)(t + 1) * ss;
        memcpy(Pn, P + (size_t)t * ss, ss * sizeof(float));
        gate_exp(d, g, b, t, h, a);
        step_state(Pn, a, k + idx_k(d, b, t, h), v + idx_v(d, b, t, h),
                   beta[idx_s(d, b, t, h)], u, dk, dv);
    }

    /* 2. reverse time */
    if (dhT) memcpy(dS, dhT + soff, ss * sizeof(float));
    else memset(dS, 0, ss * sizeof(float));
    for (int t = T - 1; t >= 0; t--) {
        const float *restrict Pt = P + (size_t)t * ss;
        const float *restrict qt = q + idx_k(d, b, t, h);
        const float *restrict kt = k + idx_k(d, b, t, h);
        const float *restrict vt = v + idx_v(d, b, t, h);
        const float *restrict dOt = dO + idx_v(d, b, t, h);
        const float bt = beta[idx_s(d, b, t, h)];
        float *restrict dqt = dq + idx_k(d, b, t, h);
        float *restrict dkt = dk_ + idx_k(d, b, t, h);
        gate_exp(d, g, b, t, h, a);

        /* S' = Diag(a) P_t;  e = v - S'^T k */
        for (int j = 0; j < dv; j++) e[j] = vt[j];
        for (int i = 0; i < dk; i++) {
            float *restrict Si = Sp + (size_t)i * dv;
            const float *restrict Pi = Pt + (size_t)i * dv;
            const float ai = a[i], ki = kt[i];
            for (int j = 0; j < dv; j++) {
                Si[j] = ai * Pi[j];
                e[j] -= ki * Si[j];
            }
        }
        const float edo = dotv(e, dOt, dv); /* S_t dO = S' dO + beta k (e.dO) */

        /* dS += scale q dO^T;  de = beta dS^T k;  dq = scale S_t dO;  (dS e) */
        for (int j = 0; j < dv; j++) de[j] = 0.f;
        float dbt = 0.f;
        for (int i = 0; i < dk; i++) {
            float *restrict dSi = dS + (size_t)i * dv;
            const float *restrict Si = Sp + (size_t)i * dv;
            const float sqi = scale * qt[i], ki = kt[i];
            for (int j = 0; j < dv; j++) {
                dSi[j] += sqi * dOt[j];
                de[j] += ki * dSi[j];
            }
            const float dse = dotv(dSi, e, dv);
            dqt[i] = scale * (dotv(Si, dOt, dv) + bt * ki * edo);
            dkt[i] = bt * dse;
            dbt += ki * dse;
        }
        dbeta[idx_s(d, b, t, h)] = dbt;
        float *restrict dvt = dv_ + idx_v(d, b, t, h);
        for (int j = 0; j < dv; j++) {
            de[j] *= bt;
            dvt[j] = de[j];
        }

        /* dk -= S' de;  dS' = dS - k de^T;  dg = rowsum(dS' * S');  dS = Diag(a) dS' */
        float dgs = 0.f;
        float *restrict dgt = d->scalar_gate ? NULL : dg + idx_k(d, b, t, h);
        for (int i = 0; i < dk; i++) {
            float *restrict dSi = dS + (size_t)i * dv;
            const float *restrict Si = Sp + (size_t)i * dv;
            const float ki = kt[i], ai = a[i];
            dkt[i] -= dotv(Si, de, dv);
            for (int j = 0; j < dv; j++) dSi[j] -= ki * de[j];
            const float dgi = dotv(dSi, Si, dv);
            if (dgt) dgt[i] = dgi;
            else dgs += dgi;
            for (int j = 0; j < dv; j++) dSi[j] *= ai;
        }
        if (!dgt) dg[idx_s(d, b, t, h)] = dgs;
    }
    if (dh0) memcpy(dh0 + soff, dS, ss * sizeof(float));
}

void dm_delta_ref_bwd(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, const float *h0, const float *dO,
                      const float *dhT, float *dq, float *dk, float *dv, float *dg,
                      float *dbeta, float *dh0, float *work, int nthreads) {
    const int npair = d->B * d->H;
    if (nthreads < 1) nthreads = 1;
    const size_t slice = bwd_slice(d);
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int p = 0; p < npair; p++)
        bwd_pair(d, p / d->H, p % d->H, q, k, v, g, beta, h0, dO, dhT, dq, dk, dv, dg, dbeta,
                 dh0, work + (size_t)omp_get_thread_num() * slice);
}
