/* delta_tc.cu — the delta-rule core in chunks of 64 tokens, its products on the tensor
 * cores (bf16 operands, float sums; tc.cuh): the WY (UT) form of the chunked core, the
 * one fla uses, in five kernels. Per chunk, with G the cumulative log gates from the
 * chunk's start (per key channel; GDN's scalar broadcast), Lr_ts = sum_i k_ti k_si
 * exp(G_ti - G_si) (s < t) and T = (I + Diag(beta) Lr)^-1 (the UT transform):
 *   W = T (beta . K . exp(G)),  U0 = T (beta . V)                 (prep: a CTA per chunk)
 *   u = U0 - W S0,  S1 = Diag(exp(G_last)) S0 + Kd^T u             (state: a CTA per pair
 *                   and 16 value columns, serial over the chunks; Kd = K . exp(G_last - G))
 *   o = scale (Q . exp(G)) S0 + scale P u,  P_ts = sum_i q_ti k_si exp(G_ti - G_si), s <= t
 *                                                                   (out: a CTA per chunk)
 * The forward saves every chunk's start state S0 and u for the backward; the backward runs
 * the same chunks in reverse (docs/chunked.md section 6 in this form):
 *   du = scale P^T dO + Kd dh                                     (dlocal, then state)
 *   dh <- Diag(exp(G_last)) dh + scale (Q . exp(G))^T dO - W^T du   (state, in reverse)
 *   dR = T^T du; dA = dO u^T, dL = -dR u^T; dQs = dO S0^T, dKb = -dR S0^T, dKg = u dh^T
 *   and the gate's elementwise and pairwise terms in float, a thread per key channel (grads)
 * Products of bf16 operands: Lr's and P's blocks left of the diagonal (each factor scaled
 * against its row block's first row, so every exp is of a difference <= 0: nothing
 * overflows while the log gates are <= 0, as the model's are), and every product of the
 * chunk with a state or another chunk matrix. In float: the cumulative gates, the
 * diagonal 16 x 16 blocks of Lr and P, the triangular solve, the states, the gate terms. */
#include "kernels/cuda/delta.cuh"
#include "kernels/cuda/tc.cuh"

#define TC 64         /* tokens of a chunk */
#define TC_BV 16      /* value columns of a state kernel's CTA */
#define TC_THREADS 128
#define TC_MAX_DIM 128

/* The core's arrays in device memory, chunk by chunk (pair p = b H + h, chunk c, TC rows
 * a chunk, the last one padded with zero rows): the work's W, U0 [., dk / dv], T [., TC],
 * dU [., dv] (scale P^T dO, then du), dH [p, c, dk, dv] (the gradient of chunk c's end
 * state); the forward's saved S [p, c, dk, dv] (chunk-start states) and u [., dv]. */
struct tc_arrays {
    float *W, *U0, *T, *dU, *dH, *S, *u;
};
static __device__ __forceinline__ size_t tc_rows(int nc, int p, int c) {
    return ((size_t)p * nc + c) * TC;
}
static __device__ __forceinline__ size_t tc_state(const dm_delta_dims &d, int nc, int p, int c) {
    return ((size_t)p * nc + c) * d.dk * d.dv;
}
/* element e of a state kernel's block [dk, TC_BV] (columns j0..) in a state [dk, dv] */
static __device__ __forceinline__ size_t tc_col(int dv, int j0, int e) {
    return (size_t)(e / TC_BV) * dv + j0 + e % TC_BV;
}
/* a state kernel's block S from the state at src (NULL: zeros) / S to dst (NULL: nothing) */
static __device__ void tc_block_in(const float *src, int dk, int dv, int j0, float *S) {
    for (int e = threadIdx.x; e < dk * TC_BV; e += blockDim.x)
        S[e] = src ? src[tc_col(dv, j0, e)] : 0.0f;
}
static __device__ void tc_block_out(float *dst, int dk, int dv, int j0, const float *S) {
    if (dst)
        for (int e = threadIdx.x; e < dk * TC_BV; e += blockDim.x) dst[tc_col(dv, j0, e)] = S[e];
}
/* S <- Diag(exp(G_last)) S + C over a state kernel's block (G [TC, dk]) */
static __device__ void tc_block_step(int dk, const float *G, float *S, const float *C) {
    for (int e = threadIdx.x; e < dk * TC_BV; e += blockDim.x)
        S[e] = expf(G[(TC - 1) * dk + e / TC_BV]) * S[e] + C[e];
}

/* chunk [t0, t0 + L) of pair (b,h) into shared memory, TC rows (those past L zero, their
 * gate 0): K, Q (when not NULL), G [TC, dk] (G cumulative along t), bt [TC] (when not
 * NULL) */
static __device__ void tc_load(const dm_delta_dims &d, const float *q, const float *k,
                               const float *g, const float *beta, int b, int h, int t0, int L,
                               float *K, float *Q, float *G, float *bt) {
    const int dk = d.dk, tid = threadIdx.x, nt = blockDim.x;
    for (int e = tid; e < TC * dk; e += nt) {
        const int t = e / dk, i = e % dk;
        const bool in = t < L;
        K[e] = in ? k[ik(d, b, t0 + t, h) + i] : 0.0f;
        if (Q) Q[e] = in ? q[ik(d, b, t0 + t, h) + i] : 0.0f;
        G[e] = !in ? 0.0f : d.scalar_gate ? g[is(d, b, t0 + t, h)] : g[ik(d, b, t0 + t, h) + i];
    }
    if (bt)
        for (int t = tid; t < TC; t += nt) bt[t] = t < L ? beta[is(d, b, t0 + t, h)] : 0.0f;
    __syncthreads();
    for (int i = tid; i < dk; i += nt)
        for (int t = 1; t < TC; t++) G[t * dk + i] += G[(t - 1) * dk + i];
    __syncthreads();
}

/* out [TC, TC]: out_ts = sum_i X_ti K_si exp(G_ti - G_si) for s < t (s <= t with diag), 0
 * elsewhere. In blocks of 16 rows: the diagonal block in float, the blocks left of it as
 * one product per row block I, xa [48, dk] (X's rows of blocks 1..3 times exp(G_t - G_r0),
 * r0 = 16 I) by kb [96, dk] (K's rows s < r0 times exp(G_r0 - G_s), for I = 1, 2, 3). */
static __device__ void tc_pairs(int dk, const float *X, const float *K, const float *G,
                                bool diag, uint16_t *xa, uint16_t *kb, float *out) {
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int e = tid; e < TC * TC; e += nt) {
        const int t = e / TC, s = e % TC;
        if (s / 16 != t / 16) {
            if (s > t) out[e] = 0.0f;
            continue;
        }
        float a = 0.0f;
        if (s < t || (diag && s == t))
            for (int i = 0; i < dk; i++)
                a += X[t * dk + i] * K[s * dk + i] * expf(G[t * dk + i] - G[s * dk + i]);
        out[e] = a;
    }
    for (int e = tid; e < 48 * dk; e += nt) {
        const int t = e / dk + 16, i = e % dk, r0 = t / 16 * 16;
        xa[e] = dm_bf16_bits(X[t * dk + i] * expf(G[t * dk + i] - G[r0 * dk + i]));
    }
    for (int e = tid; e < 96 * dk; e += nt) {
        const int r = e / dk, i = e % dk, I = r < 16 ? 1 : r < 48 ? 2 : 3;
        const int s = r - 8 * I * (I - 1), r0 = 16 * I;
        kb[e] = dm_bf16_bits(K[s * dk + i] * expf(G[r0 * dk + i] - G[s * dk + i]));
    }
    __syncthreads();
    for (int I = 1; I < 4; I++)
        dm_tc_mm(16, 16 * I, dk, xa + (size_t)16 * (I - 1) * dk, dk, false,
                 kb + (size_t)8 * I * (I - 1) * dk, dk, true, out + (size_t)16 * I * TC, TC,
                 false);
    __syncthreads();
}

/* bf16 elements of the pairs' scratch (xa, kb) */
static size_t pairs_bf(int dk) { return (size_t)144 * dk; }
/* floats holding n bf16 elements, rounded to 32 bytes */
static size_t bf_floats(size_t n) { return (n + 15) / 16 * 8; }
static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* ---- prep: T, W and U0 of a chunk (grid: chunks x pairs) ---- */
#define TC_WANT_U0 1
#define TC_WANT_T 2
static size_t prep_smem(const dm_delta_dims *d) {
    size_t dk = d->dk, dv = d->dv, tt = (size_t)TC * TC;
    size_t bf = max2(pairs_bf(d->dk), tt + TC * dk + TC * dv);
    return (2 * TC * dk + TC + 2 * tt + TC * max2(dk, dv) + bf_floats(bf)) * sizeof(float) + 32;
}
static __global__ void k_tc_prep(dm_delta_dims d, int nc, const float *k, const float *v,
                                 const float *g, const float *beta, tc_arrays A, int want) {
    extern __shared__ float sm_raw[];
    float *sm = dm_align32(sm_raw);
    const int dk = d.dk, dv = d.dv, c = blockIdx.x, p = blockIdx.y, b = p / d.H, h = p % d.H;
    const int tid = threadIdx.x, nt = blockDim.x, t0 = c * TC, L = d.T - t0 < TC ? d.T - t0 : TC;
    float *K = sm, *G = K + TC * dk, *bt = G + TC * dk, *Lr = bt + TC, *Tm = Lr + TC * TC;
    float *Out = Tm + TC * TC;
    uint16_t *bf = (uint16_t *)(void *)(Out + TC * (dk > dv ? dk : dv));
    uint16_t *xa = bf, *kb = bf + 48 * dk, *Tb = bf, *W0b = Tb + TC * TC, *Vb = W0b + TC * dk;
    const size_t rows = tc_rows(nc, p, c);

    tc_load(d, NULL, k, g, beta, b, h, t0, L, K, NULL, G, bt);
    tc_pairs(dk, K, K, G, false, xa, kb, Lr);
    /* (I + Diag(bt) Lr) T = I, forward in t, a thread per column */
    for (int j = tid; j < TC; j += nt) {
        for (int t = 0; t < TC; t++) Tm[t * TC + j] = t == j ? 1.0f : 0.0f;
        for (int t = j + 1; t < TC; t++) {
            float x = 0.0f;
            for (int s = j; s < t; s++) x += Lr[t * TC + s] * Tm[s * TC + j];
            Tm[t * TC + j] = -bt[t] * x;
        }
    }
    __syncthreads();
    for (int e = tid; e < TC * TC; e += nt) {
        if (want & TC_WANT_T) A.T[rows * TC + e] = Tm[e];
        Tb[e] = dm_bf16_bits(Tm[e]);
    }
    for (int e = tid; e < TC * dk; e += nt)
        W0b[e] = dm_bf16_bits(bt[e / dk] * (K[e] * expf(G[e])));
    for (int e = tid; e < TC * dv; e += nt) {
        const int t = e / dv;
        Vb[e] = dm_bf16_bits(t < L ? bt[t] * v[iv(d, b, t0 + t, h) + e % dv] : 0.0f);
    }
    __syncthreads();
    dm_tc_mm(TC, dk, TC, Tb, TC, false, W0b, dk, false, Out, dk, false);
    __syncthreads();
    for (int e = tid; e < TC * dk; e += nt) A.W[rows * dk + e] = Out[e];
    if (!(want & TC_WANT_U0)) return;
    __syncthreads();
    dm_tc_mm(TC, dv, TC, Tb, TC, false, Vb, dv, false, Out, dv, false);
    __syncthreads();
    for (int e = tid; e < TC * dv; e += nt) A.U0[rows * dv + e] = Out[e];
}

/* ---- state (forward): S0 of every chunk and u, serial over the chunks (grid: pairs x
 * column blocks of TC_BV) ---- */
static size_t state_fwd_smem(const dm_delta_dims *d) {
    size_t dk = d->dk;
    return (2 * TC * dk + dk * TC_BV + max2(TC, dk) * TC_BV +
            bf_floats(dk * TC_BV + 2 * TC * dk + TC * TC_BV)) * sizeof(float) + 32;
}
static __global__ void k_tc_state_fwd(dm_delta_dims d, int nc, const float *k, const float *g,
                                      const float *h0, float *hT, tc_arrays A) {
    extern __shared__ float sm_raw[];
    float *sm = dm_align32(sm_raw);
    const int dk = d.dk, dv = d.dv, p = blockIdx.x, j0 = blockIdx.y * TC_BV;
    const int b = p / d.H, h = p % d.H, tid = threadIdx.x, nt = blockDim.x;
    float *K = sm, *G = K + TC * dk, *S = G + TC * dk, *C = S + dk * TC_BV;
    uint16_t *Sb = (uint16_t *)(void *)(C + (TC > dk ? TC : dk) * TC_BV), *Wb = Sb + dk * TC_BV;
    uint16_t *Kdb = Wb + TC * dk, *ub = Kdb + TC * dk;
    const size_t soff = (size_t)p * dk * dv;
    tc_block_in(h0 ? h0 + soff : NULL, dk, dv, j0, S);
    for (int c = 0; c < nc; c++) {
        const int t0 = c * TC, L = d.T - t0 < TC ? d.T - t0 : TC;
        const size_t rows = tc_rows(nc, p, c), st = tc_state(d, nc, p, c);
        __syncthreads(); /* the last chunk's readers of G and S are done */
        tc_load(d, NULL, k, g, NULL, b, h, t0, L, K, NULL, G, NULL);
        for (int e = tid; e < dk * TC_BV; e += nt) {
            A.S[st + tc_col(dv, j0, e)] = S[e];
            Sb[e] = dm_bf16_bits(S[e]);
        }
        for (int e = tid; e < TC * dk; e += nt) Wb[e] = dm_bf16_bits(A.W[rows * dk + e]);
        __syncthreads();
        dm_tc_mm(TC, TC_BV, dk, Wb, dk, false, Sb, TC_BV, false, C, TC_BV, false); /* W S0 */
        __syncthreads();
        for (int e = tid; e < TC * TC_BV; e += nt) {
            const size_t at = (rows + e / TC_BV) * dv + j0 + e % TC_BV;
            const float x = A.U0[at] - C[e];
            A.u[at] = x;
            ub[e] = dm_bf16_bits(x);
        }
        for (int e = tid; e < TC * dk; e += nt)
            Kdb[e] = dm_bf16_bits(K[e] * expf(G[(TC - 1) * dk + e % dk] - G[e]));
        __syncthreads();
        dm_tc_mm(dk, TC_BV, TC, Kdb, dk, true, ub, TC_BV, false, C, TC_BV, false); /* Kd^T u */
        __syncthreads();
        tc_block_step(dk, G, S, C);
    }
    __syncthreads();
    tc_block_out(hT ? hT + soff : NULL, dk, dv, j0, S);
}

/* ---- out: o of a chunk (grid: chunks x pairs) ---- */
static size_t out_smem(const dm_delta_dims *d) {
    size_t dk = d->dk, dv = d->dv, tt = (size_t)TC * TC;
    size_t bf = max2(pairs_bf(d->dk), tt + TC * dk + dk * dv + TC * dv);
    return (3 * TC * dk + tt + TC * dv + bf_floats(bf)) * sizeof(float) + 32;
}
static __global__ void k_tc_out(dm_delta_dims d, int nc, const float *q, const float *k,
                                const float *g, tc_arrays A, float *o) {
    extern __shared__ float sm_raw[];
    float *sm = dm_align32(sm_raw);
    const int dk = d.dk, dv = d.dv, c = blockIdx.x, p = blockIdx.y, b = p / d.H, h = p % d.H;
    const int tid = threadIdx.x, nt = blockDim.x, t0 = c * TC, L = d.T - t0 < TC ? d.T - t0 : TC;
    float *K = sm, *Q = K + TC * dk, *G = Q + TC * dk, *P = G + TC * dk, *Out = P + TC * TC;
    uint16_t *bf = (uint16_t *)(void *)(Out + TC * dv);
    uint16_t *xa = bf, *kb = bf + 48 * dk, *Pb = bf, *Qgb = Pb + TC * TC, *Sb = Qgb + TC * dk;
    uint16_t *ub = Sb + dk * dv;
    const size_t rows = tc_rows(nc, p, c), st = tc_state(d, nc, p, c);

    tc_load(d, q, k, g, NULL, b, h, t0, L, K, Q, G, NULL);
    tc_pairs(dk, Q, K, G, true, xa, kb, P);
    for (int e = tid; e < TC * TC; e += nt) Pb[e] = dm_bf16_bits(P[e]);
    for (int e = tid; e < TC * dk; e += nt) Qgb[e] = dm_bf16_bits(Q[e] * expf(G[e]));
    for (int e = tid; e < dk * dv; e += nt) Sb[e] = dm_bf16_bits(A.S[st + e]);
    for (int e = tid; e < TC * dv; e += nt) ub[e] = dm_bf16_bits(A.u[rows * dv + e]);
    __syncthreads();
    dm_tc_mm(TC, dv, dk, Qgb, dk, false, Sb, dv, false, Out, dv, false);
    __syncthreads();
    dm_tc_mm(TC, dv, TC, Pb, TC, false, ub, dv, false, Out, dv, true);
    __syncthreads();
    for (int e = tid; e < L * dv; e += nt)
        o[iv(d, b, t0 + e / dv, h) + e % dv] = d.scale * Out[e];
}

/* ---- dlocal: dU = scale P^T dO of a chunk (grid: chunks x pairs) ---- */
static size_t dlocal_smem(const dm_delta_dims *d) {
    size_t dk = d->dk, dv = d->dv, tt = (size_t)TC * TC;
    size_t bf = max2(pairs_bf(d->dk), tt + TC * dv);
    return (3 * TC * dk + tt + TC * dv + bf_floats(bf)) * sizeof(float) + 32;
}
static __global__ void k_tc_dlocal(dm_delta_dims d, int nc, const float *q, const float *k,
                                   const float *g, const float *dO, tc_arrays A) {
    extern __shared__ float sm_raw[];
    float *sm = dm_align32(sm_raw);
    const int dk = d.dk, dv = d.dv, c = blockIdx.x, p = blockIdx.y, b = p / d.H, h = p % d.H;
    const int tid = threadIdx.x, nt = blockDim.x, t0 = c * TC, L = d.T - t0 < TC ? d.T - t0 : TC;
    float *K = sm, *Q = K + TC * dk, *G = Q + TC * dk, *P = G + TC * dk, *Out = P + TC * TC;
    uint16_t *bf = (uint16_t *)(void *)(Out + TC * dv);
    uint16_t *xa = bf, *kb = bf + 48 * dk, *Pb = bf, *dOb = Pb + TC * TC;
    const size_t rows = tc_rows(nc, p, c);

    tc_load(d, q, k, g, NULL, b, h, t0, L, K, Q, G, NULL);
    tc_pairs(dk, Q, K, G, true, xa, kb, P);
    for (int e = tid; e < TC * TC; e += nt) Pb[e] = dm_bf16_bits(P[e]);
    for (int e = tid; e < TC * dv; e += nt) {
        const int t = e / dv;
        dOb[e] = dm_bf16_bits(t < L ? dO[iv(d, b, t0 + t, h) + e % dv] : 0.0f);
    }
    __syncthreads();
    dm_tc_mm(TC, dv, TC, Pb, TC, true, dOb, dv, false, Out, dv, false);
    __syncthreads();
    for (int e = tid; e < TC * dv; e += nt) A.dU[rows * dv + e] = d.scale * Out[e];
}

/* ---- state (backward): du and every chunk's dh, serial over the chunks in reverse
 * (grid: pairs x column blocks) ---- */
static size_t state_bwd_smem(const dm_delta_dims *d) {
    size_t dk = d->dk;
    return (3 * TC * dk + dk * TC_BV + max2(TC, dk) * TC_BV +
            bf_floats(dk * TC_BV + 3 * TC * dk + 2 * TC * TC_BV)) * sizeof(float) + 32;
}
static __global__ void k_tc_state_bwd(dm_delta_dims d, int nc, const float *q, const float *k,
                                      const float *g, const float *dO, const float *dhT,
                                      float *dh0, tc_arrays A) {
    extern __shared__ float sm_raw[];
    float *sm = dm_align32(sm_raw);
    const int dk = d.dk, dv = d.dv, p = blockIdx.x, j0 = blockIdx.y * TC_BV;
    const int b = p / d.H, h = p % d.H, tid = threadIdx.x, nt = blockDim.x;
    float *K = sm, *Q = K + TC * dk, *G = Q + TC * dk, *dH = G + TC * dk, *C = dH + dk * TC_BV;
    uint16_t *dHb = (uint16_t *)(void *)(C + (TC > dk ? TC : dk) * TC_BV), *Kdb = dHb + dk * TC_BV;
    uint16_t *Qsb = Kdb + TC * dk, *Wb = Qsb + TC * dk, *dOb = Wb + TC * dk;
    uint16_t *ndub = dOb + TC * TC_BV;
    const size_t soff = (size_t)p * dk * dv;
    tc_block_in(dhT ? dhT + soff : NULL, dk, dv, j0, dH);
    for (int c = nc - 1; c >= 0; c--) {
        const int t0 = c * TC, L = d.T - t0 < TC ? d.T - t0 : TC;
        const size_t rows = tc_rows(nc, p, c), st = tc_state(d, nc, p, c);
        __syncthreads();
        tc_load(d, q, k, g, NULL, b, h, t0, L, K, Q, G, NULL);
        for (int e = tid; e < dk * TC_BV; e += nt) {
            A.dH[st + tc_col(dv, j0, e)] = dH[e];
            dHb[e] = dm_bf16_bits(dH[e]);
        }
        for (int e = tid; e < TC * dk; e += nt)
            Kdb[e] = dm_bf16_bits(K[e] * expf(G[(TC - 1) * dk + e % dk] - G[e]));
        __syncthreads();
        dm_tc_mm(TC, TC_BV, dk, Kdb, dk, false, dHb, TC_BV, false, C, TC_BV, false); /* Kd dh */
        __syncthreads();
        for (int e = tid; e < TC * TC_BV; e += nt) {
            const int t = e / TC_BV, j = j0 + e % TC_BV;
            const size_t at = (rows + t) * dv + j;
            const float x = A.dU[at] + C[e];
            A.dU[at] = x;
            ndub[e] = dm_bf16_bits(-x);
            dOb[e] = dm_bf16_bits(t < L ? dO[iv(d, b, t0 + t, h) + j] : 0.0f);
        }
        for (int e = tid; e < TC * dk; e += nt) {
            Qsb[e] = dm_bf16_bits(d.scale * Q[e] * expf(G[e]));
            Wb[e] = dm_bf16_bits(A.W[rows * dk + e]);
        }
        __syncthreads();
        dm_tc_mm(dk, TC_BV, TC, Qsb, dk, true, dOb, TC_BV, false, C, TC_BV, false);
        __syncthreads();
        dm_tc_mm(dk, TC_BV, TC, Wb, dk, true, ndub, TC_BV, false, C, TC_BV, true);
        __syncthreads();
        tc_block_step(dk, G, dH, C);
    }
    __syncthreads();
    tc_block_out(dh0 ? dh0 + soff : NULL, dk, dv, j0, dH);
}

/* ---- grads: dq, dk, dv, dg, dbeta of a chunk (grid: chunks x pairs) ---- */
static size_t grads_smem(const dm_delta_dims *d) {
    size_t dk = d->dk, dv = d->dv, tt = (size_t)TC * TC;
    size_t bf = max2(pairs_bf(d->dk), max2(tt + TC * dv, 3 * TC * dv + 2 * dk * dv));
    return (7 * TC * dk + TC * dv + 3 * tt + 2 * TC + bf_floats(bf)) * sizeof(float) + 32;
}
static __global__ void k_tc_grads(dm_delta_dims d, int nc, const float *q, const float *k,
                                  const float *v, const float *g, const float *beta,
                                  const float *dO, tc_arrays A, float *dq, float *dk_,
                                  float *dv_, float *dg, float *dbeta) {
    extern __shared__ float sm_raw[];
    float *sm = dm_align32(sm_raw);
    const int dk = d.dk, dv = d.dv, c = blockIdx.x, p = blockIdx.y, b = p / d.H, h = p % d.H;
    const int tid = threadIdx.x, nt = blockDim.x, t0 = c * TC, L = d.T - t0 < TC ? d.T - t0 : TC;
    float *K = sm, *Q = K + TC * dk, *G = Q + TC * dk, *dQ = G + TC * dk, *dK = dQ + TC * dk;
    float *Wk = dK + TC * dk, *dG = Wk + TC * dk, *dR = dG + TC * dk, *dA = dR + TC * dv;
    float *dL = dA + TC * TC, *Lr = dL + TC * TC, *bt = Lr + TC * TC, *dbt = bt + TC;
    uint16_t *bf = (uint16_t *)(void *)(dbt + TC);
    uint16_t *xa = bf, *kb = bf + 48 * dk, *Tb = bf, *dub = Tb + TC * TC;
    uint16_t *dRb = bf, *ub = dRb + TC * dv, *dOb = ub + TC * dv, *S0b = dOb + TC * dv;
    uint16_t *dHb = S0b + dk * dv;
    const size_t rows = tc_rows(nc, p, c), st = tc_state(d, nc, p, c);

    tc_load(d, q, k, g, beta, b, h, t0, L, K, Q, G, bt);
    tc_pairs(dk, K, K, G, false, xa, kb, Lr);
    for (int e = tid; e < TC * TC; e += nt) Tb[e] = dm_bf16_bits(A.T[rows * TC + e]);
    for (int e = tid; e < TC * dv; e += nt) dub[e] = dm_bf16_bits(A.dU[rows * dv + e]);
    __syncthreads();
    dm_tc_mm(TC, dv, TC, Tb, TC, true, dub, dv, false, dR, dv, false); /* dR = T^T du */
    __syncthreads();
    for (int e = tid; e < TC * dv; e += nt) {
        const int t = e / dv;
        dRb[e] = dm_bf16_bits(dR[e]);
        ub[e] = dm_bf16_bits(A.u[rows * dv + e]);
        dOb[e] = dm_bf16_bits(t < L ? dO[iv(d, b, t0 + t, h) + e % dv] : 0.0f);
    }
    for (int e = tid; e < dk * dv; e += nt) {
        S0b[e] = dm_bf16_bits(A.S[st + e]);
        dHb[e] = dm_bf16_bits(A.dH[st + e]);
    }
    __syncthreads();
    dm_tc_mm(TC, TC, dv, dOb, dv, false, ub, dv, true, dA, TC, false);  /* dO u^T */
    dm_tc_mm(TC, TC, dv, dRb, dv, false, ub, dv, true, dL, TC, false);  /* -dL */
    dm_tc_mm(TC, dk, dv, dOb, dv, false, S0b, dv, true, dQ, dk, false); /* dQs */
    dm_tc_mm(TC, dk, dv, dRb, dv, false, S0b, dv, true, dK, dk, false); /* -dKb */
    dm_tc_mm(TC, dk, dv, ub, dv, false, dHb, dv, true, Wk, dk, false);  /* dKg */
    __syncthreads();
    for (int e = tid; e < TC * TC; e += nt) dL[e] = -dL[e];
    for (int t = tid; t < L; t += nt) { /* dv = bt dR; dbeta's V term */
        float x = 0.0f;
        for (int j = 0; j < dv; j++) {
            const float r = dR[t * dv + j];
            x += v[iv(d, b, t0 + t, h) + j] * r;
            dv_[iv(d, b, t0 + t, h) + j] = bt[t] * r;
        }
        dbt[t] = x;
    }
    __syncthreads();
    for (int ch = tid; ch < dk; ch += nt) /* a thread per key channel */
        chunk_channel<TC>(L, dk, dv, ch, d.scale, K, Q, G, bt, A.S + st + (size_t)ch * dv,
                          A.dH + st + (size_t)ch * dv, dA, dL, TC, dQ, dK, Wk, dG);
    __syncthreads();
    chunk_bwd_write(d, b, h, t0, L, TC, dbt, Wk, dL, Lr, dQ, dK, dG, dq, dk_, dg, dbeta);
}

/* ---- entry points ---- */
static int n_chunks(const dm_delta_dims *d) { return (d->T + TC - 1) / TC; }
static size_t rows_floats(const dm_delta_dims *d, int width) {
    return (size_t)d->B * d->H * n_chunks(d) * TC * width;
}
static size_t states_floats(const dm_delta_dims *d) {
    return (size_t)d->B * d->H * n_chunks(d) * d->dk * d->dv;
}

extern "C" size_t dm_cuda_delta_tc_saved(const dm_delta_dims *d) {
    return states_floats(d) + rows_floats(d, d->dv);
}
/* the work of either direction, the saved state in it too (a call without one) */
extern "C" size_t dm_cuda_delta_tc_work(const dm_delta_dims *d) {
    size_t fwd = rows_floats(d, d->dk) + rows_floats(d, d->dv);
    size_t bwd = rows_floats(d, d->dk) + rows_floats(d, TC) + rows_floats(d, d->dv) +
                 states_floats(d) + rows_floats(d, d->dv);
    return max2(fwd, bwd) + dm_cuda_delta_tc_saved(d);
}

static int tc_fits(const dm_delta_dims *d) {
    return dims_ok(d) && d->dk % 16 == 0 && d->dv % 16 == 0 && d->dk <= TC_MAX_DIM &&
           d->dv <= TC_MAX_DIM && smem_ok((const void *)k_tc_prep, prep_smem(d)) &&
           smem_ok((const void *)k_tc_state_fwd, state_fwd_smem(d)) &&
           smem_ok((const void *)k_tc_out, out_smem(d)) &&
           smem_ok((const void *)k_tc_dlocal, dlocal_smem(d)) &&
           smem_ok((const void *)k_tc_state_bwd, state_bwd_smem(d)) &&
           smem_ok((const void *)k_tc_grads, grads_smem(d));
}
extern "C" int dm_cuda_delta_tc_fits(const dm_delta_dims *d) { return tc_fits(d); }

/* the arrays in work (and saved, when not NULL) */
static tc_arrays tc_layout(const dm_delta_dims *d, float *work, float *saved) {
    tc_arrays A;
    size_t rk = rows_floats(d, d->dk), rv = rows_floats(d, d->dv), ss = states_floats(d);
    float *at = work;
    A.W = at, at += rk;
    A.U0 = at, at += rv;
    A.T = at, at += rows_floats(d, TC);
    A.dU = at, at += rv;
    A.dH = at, at += ss;
    if (!saved) saved = at;
    A.S = saved, A.u = saved + ss;
    return A;
}

extern "C" int dm_cuda_delta_tc_fwd(const dm_delta_dims *d, const float *q, const float *k,
                                    const float *v, const float *g, const float *beta,
                                    const float *h0, float *o, float *hT, float *saved,
                                    float *work, dm_cuda_stream s) {
    if (!tc_fits(d)) return DM_CUDA_EBADSHAPE;
    const int nc = n_chunks(d), np = d->B * d->H;
    tc_arrays A = tc_layout(d, work, saved);
    k_tc_prep<<<dim3(nc, np), TC_THREADS, prep_smem(d), s>>>(*d, nc, k, v, g, beta, A,
                                                              TC_WANT_U0);
    int e = dm_launched();
    if (e) return e;
    k_tc_state_fwd<<<dim3(np, d->dv / TC_BV), TC_THREADS, state_fwd_smem(d), s>>>(*d, nc, k, g,
                                                                                  h0, hT, A);
    if ((e = dm_launched())) return e;
    k_tc_out<<<dim3(nc, np), TC_THREADS, out_smem(d), s>>>(*d, nc, q, k, g, A, o);
    return dm_launched();
}

extern "C" int dm_cuda_delta_tc_bwd(const dm_delta_dims *d, const float *q, const float *k,
                                    const float *v, const float *g, const float *beta,
                                    const float *h0, const float *saved, const float *dO,
                                    const float *dhT, float *dq, float *dk, float *dv,
                                    float *dg, float *dbeta, float *dh0, float *work,
                                    dm_cuda_stream s) {
    if (!tc_fits(d)) return DM_CUDA_EBADSHAPE;
    const int nc = n_chunks(d), np = d->B * d->H;
    tc_arrays A = tc_layout(d, work, (float *)saved);
    const int want = TC_WANT_T | (saved ? 0 : TC_WANT_U0);
    k_tc_prep<<<dim3(nc, np), TC_THREADS, prep_smem(d), s>>>(*d, nc, k, v, g, beta, A, want);
    int e = dm_launched();
    if (e) return e;
    if (!saved) { /* the forward's states and u, again */
        k_tc_state_fwd<<<dim3(np, d->dv / TC_BV), TC_THREADS, state_fwd_smem(d), s>>>(
            *d, nc, k, g, h0, NULL, A);
        if ((e = dm_launched())) return e;
    }
    k_tc_dlocal<<<dim3(nc, np), TC_THREADS, dlocal_smem(d), s>>>(*d, nc, q, k, g, dO, A);
    if ((e = dm_launched())) return e;
    k_tc_state_bwd<<<dim3(np, d->dv / TC_BV), TC_THREADS, state_bwd_smem(d), s>>>(
        *d, nc, q, k, g, dO, dhT, dh0, A);
    if ((e = dm_launched())) return e;
    k_tc_grads<<<dim3(nc, np), TC_THREADS, grads_smem(d), s>>>(*d, nc, q, k, v, g, beta, dO, A,
                                                                dq, dk, dv, dg, dbeta);
    return dm_launched();
}
