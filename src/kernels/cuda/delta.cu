/* delta.cu — the delta-rule core, token-serial: the GPU's oracle of the core (the
 * recurrence of kernels/ref/delta_ref.c, docs/kda.md sections 4 and 5). One block per
 * (b,h) pair; the [dk,dv] state in shared memory. The value columns of the state evolve
 * independently in the forward, so thread j owns column j and runs the reference's loops
 * over the key channels i in the reference's order. The backward also needs sums along
 * the rows (over j): thread i takes row i, in order j = 0..dv-1; sums over the rows
 * (dbeta, GDN's dg) are added by one thread in order i = 0..dk-1. Serial over time and
 * slow by design: the chunked cores are checked against it. */
#include "kernels/cuda/delta.cuh"

/* a[i] = exp(g_t), q[i], k[i] of token (b,t,h) into shared memory (all threads) */
static __device__ void load_token(const dm_delta_dims &d, const float *q, const float *k,
                                  const float *g, int b, int t, int h, float *a, float *qs,
                                  float *ks) {
    for (int i = threadIdx.x; i < d.dk; i += blockDim.x) {
        a[i] = expf(d.scalar_gate ? g[is(d, b, t, h)] : g[ik(d, b, t, h) + i]);
        if (qs) qs[i] = q[ik(d, b, t, h) + i];
        ks[i] = k[ik(d, b, t, h) + i];
    }
}

/* one token on column j of S (stride ld): S <- Diag(a) S; u = beta (v_j - S^T k);
 * S <- S + k u. Returns u. The reference's step_state, column j. */
static __device__ __forceinline__ float step_col(float *S, int ld, const float *a,
                                                 const float *ks, float vj, float beta, int dk,
                                                 int j) {
    float u = vj;
    for (int i = 0; i < dk; i++) {
        float sij = S[(size_t)i * ld + j] * a[i];
        S[(size_t)i * ld + j] = sij;
        u -= ks[i] * sij;
    }
    u *= beta;
    for (int i = 0; i < dk; i++) S[(size_t)i * ld + j] += ks[i] * u;
    return u;
}

/* shared floats: S [dk, dv], a, q, k [dk] */
static size_t fwd_smem(const dm_delta_dims *d) {
    return ((size_t)d->dk * d->dv + 3 * (size_t)d->dk) * sizeof(float);
}
static __global__ void k_delta_fwd(dm_delta_dims d, const float *q, const float *k,
                                   const float *v, const float *g, const float *beta,
                                   const float *h0, float *o, float *hT) {
    extern __shared__ float sm[];
    const int dk = d.dk, dv = d.dv, b = blockIdx.x / d.H, h = blockIdx.x % d.H;
    const int j = threadIdx.x;
    float *S = sm, *a = S + (size_t)dk * dv, *qs = a + dk, *ks = qs + dk;
    const size_t soff = (size_t)blockIdx.x * dk * dv;
    if (j < dv)
        for (int i = 0; i < dk; i++) S[(size_t)i * dv + j] = h0 ? h0[soff + (size_t)i * dv + j] : 0.0f;
    for (int t = 0; t < d.T; t++) {
        load_token(d, q, k, g, b, t, h, a, qs, ks);
        __syncthreads();
        if (j < dv) {
            step_col(S, dv, a, ks, v[iv(d, b, t, h) + j], beta[is(d, b, t, h)], dk, j);
            float acc = 0.0f;
            for (int i = 0; i < dk; i++) acc += qs[i] * S[(size_t)i * dv + j];
            o[iv(d, b, t, h) + j] = d.scale * acc;
        }
        __syncthreads();
    }
    if (hT && j < dv)
        for (int i = 0; i < dk; i++) hT[soff + (size_t)i * dv + j] = S[(size_t)i * dv + j];
}

static unsigned block_of(int n) { return (unsigned)(32 * ((n + 31) / 32)); }


extern "C" int dm_cuda_delta_serial_fwd(const dm_delta_dims *d, const float *q, const float *k,
                                        const float *v, const float *g, const float *beta,
                                        const float *h0, float *o, float *hT,
                                        dm_cuda_stream s) {
    if (!dims_ok(d)) return DM_CUDA_EBADSHAPE;
    size_t smem = fwd_smem(d);
    if (!smem_ok((const void *)k_delta_fwd, smem)) return DM_CUDA_EBADSHAPE;
    k_delta_fwd<<<d->B * d->H, block_of(d->dv), smem, s>>>(*d, q, k, v, g, beta, h0, o, hT);
    return dm_launched();
}

extern "C" size_t dm_cuda_delta_serial_bwd_work(const dm_delta_dims *d) {
    return (size_t)d->B * d->H * d->T * d->dk * d->dv;
}

/* shared floats: Sp, dS [dk, dv+1] (rows padded: row and column walks both conflict-free),
 * a, q, k, rowsum [dk], e, de, dO [dv] */
static size_t bwd_smem(const dm_delta_dims *d) {
    return (2 * (size_t)d->dk * (d->dv + 1) + 4 * (size_t)d->dk + 3 * (size_t)d->dv) *
           sizeof(float);
}
static __global__ void k_delta_bwd(dm_delta_dims d, const float *q, const float *k,
                                   const float *v, const float *g, const float *beta,
                                   const float *h0, const float *dO, const float *dhT,
                                   float *dq, float *dk_, float *dv_, float *dg, float *dbeta,
                                   float *dh0, float *P) {
    extern __shared__ float sm[];
    const int dk = d.dk, dv = d.dv, ld = dv + 1, b = blockIdx.x / d.H, h = blockIdx.x % d.H;
    const int x = threadIdx.x; /* column j in the column phases, row i in the row phases */
    const size_t ss = (size_t)dk * dv, soff = (size_t)blockIdx.x * ss;
    float *Sp = sm, *dS = Sp + (size_t)dk * ld, *a = dS + (size_t)dk * ld, *qs = a + dk;
    float *ks = qs + dk, *rs = ks + dk, *e = rs + dk, *de = e + dv, *dOs = de + dv;
    float *Pb = P + (size_t)blockIdx.x * d.T * ss; /* this pair's states before each token */

    /* 1. the states before each token: P_0 = h0, P_{t+1} = step(P_t), column by column
     * (Sp holds the running state) */
    if (x < dv)
        for (int i = 0; i < dk; i++) {
            float s0 = h0 ? h0[soff + (size_t)i * dv + x] : 0.0f;
            Sp[(size_t)i * ld + x] = s0;
            Pb[(size_t)i * dv + x] = s0;
        }
    for (int t = 0; t + 1 < d.T; t++) {
        load_token(d, q, k, g, b, t, h, a, NULL, ks);
        __syncthreads();
        if (x < dv) {
            step_col(Sp, ld, a, ks, v[iv(d, b, t, h) + x], beta[is(d, b, t, h)], dk, x);
            float *Pn = Pb + (size_t)(t + 1) * ss;
            for (int i = 0; i < dk; i++) Pn[(size_t)i * dv + x] = Sp[(size_t)i * ld + x];
        }
        __syncthreads();
    }

    /* 2. reverse time */
    if (x < dv)
        for (int i = 0; i < dk; i++)
            dS[(size_t)i * ld + x] = dhT ? dhT[soff + (size_t)i * dv + x] : 0.0f;
    for (int t = d.T - 1; t >= 0; t--) {
        const float bt = beta[is(d, b, t, h)], scale = d.scale;
        const float *Pt = Pb + (size_t)t * ss;
        load_token(d, q, k, g, b, t, h, a, qs, ks);
        if (x < dv) dOs[x] = dO[iv(d, b, t, h) + x];
        __syncthreads();
        /* columns: S' = Diag(a) P_t, e = v - S'^T k; dS += scale q dO^T, de = dS^T k */
        if (x < dv) {
            float ej = v[iv(d, b, t, h) + x], dej = 0.0f, doj = dOs[x];
            for (int i = 0; i < dk; i++) {
                float sij = a[i] * Pt[(size_t)i * dv + x];
                Sp[(size_t)i * ld + x] = sij;
                ej -= ks[i] * sij;
                float dsij = dS[(size_t)i * ld + x] + scale * qs[i] * doj;
                dS[(size_t)i * ld + x] = dsij;
                dej += ks[i] * dsij;
            }
            e[x] = ej;
            de[x] = dej;
        }
        __syncthreads();
        /* rows: dq = scale (S' dO + beta k (e.dO)), dk = beta dS e, dbeta's terms */
        if (x < dk) {
            float edo = 0.0f, dse = 0.0f, sdo = 0.0f;
            for (int j = 0; j < dv; j++) edo += e[j] * dOs[j];
            for (int j = 0; j < dv; j++) {
                dse += dS[(size_t)x * ld + j] * e[j];
                sdo += Sp[(size_t)x * ld + j] * dOs[j];
            }
            dq[ik(d, b, t, h) + x] = scale * (sdo + bt * ks[x] * edo);
            dk_[ik(d, b, t, h) + x] = bt * dse;
            rs[x] = ks[x] * dse;
        }
        __syncthreads();
        if (x == 0) {
            float dbt = 0.0f;
            for (int i = 0; i < dk; i++) dbt += rs[i];
            dbeta[is(d, b, t, h)] = dbt;
        }
        if (x < dv) {
            float dej = de[x] * bt;
            de[x] = dej;
            dv_[iv(d, b, t, h) + x] = dej;
        }
        __syncthreads();
        /* rows: dk -= S' de; dS' = dS - k de^T; dg = rowsum(dS' S'); dS = Diag(a) dS' */
        if (x < dk) {
            float sde = 0.0f, dgi = 0.0f, ki = ks[x], ai = a[x];
            for (int j = 0; j < dv; j++) {
                float sij = Sp[(size_t)x * ld + j];
                sde += sij * de[j];
                float dsij = dS[(size_t)x * ld + j] - ki * de[j];
                dgi += dsij * sij;
                dS[(size_t)x * ld + j] = dsij * ai;
            }
            dk_[ik(d, b, t, h) + x] -= sde;
            if (d.scalar_gate) rs[x] = dgi;
            else dg[ik(d, b, t, h) + x] = dgi;
        }
        __syncthreads();
        if (d.scalar_gate && x == 0) {
            float dgs = 0.0f;
            for (int i = 0; i < dk; i++) dgs += rs[i];
            dg[is(d, b, t, h)] = dgs;
        }
        __syncthreads();
    }
    if (dh0 && x < dv)
        for (int i = 0; i < dk; i++) dh0[soff + (size_t)i * dv + x] = dS[(size_t)i * ld + x];
}

extern "C" int dm_cuda_delta_serial_bwd(const dm_delta_dims *d, const float *q, const float *k,
                                        const float *v, const float *g, const float *beta,
                                        const float *h0, const float *dO, const float *dhT,
                                        float *dq, float *dk, float *dv, float *dg,
                                        float *dbeta, float *dh0, float *work,
                                        dm_cuda_stream s) {
    if (!dims_ok(d)) return DM_CUDA_EBADSHAPE;
    size_t smem = bwd_smem(d);
    if (!smem_ok((const void *)k_delta_bwd, smem)) return DM_CUDA_EBADSHAPE;
    unsigned threads = block_of(d->dk > d->dv ? d->dk : d->dv);
    k_delta_bwd<<<d->B * d->H, threads, smem, s>>>(*d, q, k, v, g, beta, h0, dO, dhT, dq, dk,
                                                   dv, dg, dbeta, dh0, work);
    return dm_launched();
}

/* ---- the chunked core (fp32): chunks of CH tokens, every decay as the exp of a
 * difference of cumulative log gates, never above 1 (finite whatever the gate) ----
 * In a chunk with start state S0 and Gam_t = sum_{i<=t} g_i (per key channel; GDN's g
 * broadcast), u_t = beta_t (v_t - (Diag(a_t) S_{t-1})^T k_t) solves (I + A) U = diag(beta) V
 * - W0 S0 with, for s < t, A_ts = beta_t Lr_ts,
 *   Lr_ts = sum_i k_ti k_si exp(Gam_ti - Gam_si),   W0_t = beta_t (k_t . exp(Gam_t));
 * then o_t = scale (S0^T (q_t . exp(Gam_t)) + sum_{s<=t} P_ts u_s),
 *   P_ts = sum_i q_ti k_si exp(Gam_ti - Gam_si),
 * and the next state S = Diag(exp(Gam_last)) S0 + sum_s (k_s . exp(Gam_last - Gam_s)) u_s^T
 * (docs/cuda.md; U is the CPU's Dl, docs/chunked.md section 2). One block per (b,h); each
 * sum runs serially in index order on one thread; the triangular solves run one thread per
 * column. The pieces below are shared by the forward and the backward, which recomputes
 * each chunk exactly as the forward computed it. */
#define CH 32

/* The chunk [t0, t0+L) of pair (b,h) into shared memory: K, Q, Gm [L, dk] (Gm the
 * cumulative log gates, summed in order along t), U [L, dv] = V, bt [L] = beta. */
static __device__ void chunk_load(const dm_delta_dims &d, const float *q, const float *k,
                                  const float *v, const float *g, const float *beta, int b,
                                  int h, int t0, int L, float *K, float *Q, float *Gm, float *U,
                                  float *bt) {
    const int dk = d.dk, dv = d.dv, tid = threadIdx.x, nt = blockDim.x;
    for (int e = tid; e < L * dk; e += nt) {
        int t = e / dk, i = e % dk;
        K[e] = k[ik(d, b, t0 + t, h) + i];
        Q[e] = q[ik(d, b, t0 + t, h) + i];
        Gm[e] = d.scalar_gate ? g[is(d, b, t0 + t, h)] : g[ik(d, b, t0 + t, h) + i];
    }
    for (int e = tid; e < L * dv; e += nt) {
        int t = e / dv, j = e % dv;
        U[e] = v[iv(d, b, t0 + t, h) + j];
    }
    for (int t = tid; t < L; t += nt) bt[t] = beta[is(d, b, t0 + t, h)];
    __syncthreads();
    for (int i = tid; i < dk; i += nt)
        for (int t = 1; t < L; t++) Gm[t * dk + i] += Gm[(t - 1) * dk + i];
    __syncthreads();
}

/* Lr [L, L] (s < t; 0 elsewhere) and, when P is not NULL, P [L, L] (s <= t) */
static __device__ void chunk_pairs(int L, int dk, const float *K, const float *Q,
                                   const float *Gm, float *Lr, float *P) {
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        int t = e / L, s = e % L;
        float a = 0.0f, p = 0.0f;
        if (s <= t)
            for (int i = 0; i < dk; i++) {
                float dec = expf(Gm[t * dk + i] - Gm[s * dk + i]) * K[s * dk + i];
                a += K[t * dk + i] * dec;
                if (P) p += Q[t * dk + i] * dec;
            }
        Lr[e] = s < t ? a : 0.0f;
        if (P) P[e] = p;
    }
}

/* U <- (I + A)^-1 (bt . U - W0 S0), A = Diag(bt) Lr: the chunk's u (the CPU's Dl). W [L, dk]
 * is scratch (W0, then (I + A)^-1 W0). S0 [dk, dv] may be shared or global memory. */
static __device__ void chunk_u(int L, int dk, int dv, const float *K, const float *Gm,
                               const float *bt, const float *Lr, const float *S0, float *U,
                               float *W) {
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int e = tid; e < L * dk; e += nt) {
        int t = e / dk;
        W[e] = bt[t] * (K[e] * expf(Gm[e]));
    }
    for (int e = tid; e < L * dv; e += nt) U[e] *= bt[e / dv];
    __syncthreads();
    /* (I + A) X = RHS, forward in t, one thread per column of [U | W] */
    for (int c = tid; c < dv + dk; c += nt) {
        float *X = c < dv ? U + c : W + (c - dv);
        const int ld = c < dv ? dv : dk;
        for (int t = 1; t < L; t++) {
            float x = X[t * ld];
            for (int s = 0; s < t; s++) x -= bt[t] * Lr[t * L + s] * X[s * ld];
            X[t * ld] = x;
        }
    }
    __syncthreads();
    for (int e = tid; e < L * dv; e += nt) { /* U -= W S0 */
        int t = e / dv, j = e % dv;
        float x = U[e];
        for (int i = 0; i < dk; i++) x -= W[t * dk + i] * S0[i * dv + j];
        U[e] = x;
    }
    __syncthreads();
}

/* Sn = Diag(exp(Gm_last)) S + sum_s (K_s . exp(Gm_last - Gm_s)) U_s^T, element by element
 * (Sn may be S) */
static __device__ void chunk_state(int L, int dk, int dv, const float *K, const float *Gm,
                                   const float *U, const float *S, float *Sn) {
    for (int e = threadIdx.x; e < dk * dv; e += blockDim.x) {
        int i = e / dv, j = e % dv;
        float last = Gm[(L - 1) * dk + i];
        float x = expf(last) * S[e];
        for (int s = 0; s < L; s++) x += K[s * dk + i] * expf(last - Gm[s * dk + i]) * U[s * dv + j];
        Sn[e] = x;
    }
}

static size_t chunk_smem(const dm_delta_dims *d) {
    size_t dk = (size_t)d->dk, dv = (size_t)d->dv;
    return (dk * dv + 4 * CH * dk + CH * dv + 2 * CH * CH + CH) * sizeof(float);
}
static __global__ void k_delta_chunk_fwd(dm_delta_dims d, const float *q, const float *k,
                                         const float *v, const float *g, const float *beta,
                                         const float *h0, float *o, float *hT) {
    extern __shared__ float sm[];
    const int dk = d.dk, dv = d.dv, b = blockIdx.x / d.H, h = blockIdx.x % d.H;
    const int tid = threadIdx.x, nt = blockDim.x;
    const size_t soff = (size_t)blockIdx.x * dk * dv;
    float *S = sm, *K = S + (size_t)dk * dv, *Q = K + CH * dk, *Gm = Q + CH * dk;
    float *U = Gm + CH * dk, *W = U + CH * dv, *Lr = W + CH * dk, *P = Lr + CH * CH;
    float *bt = P + CH * CH;
    for (int e = tid; e < dk * dv; e += nt) S[e] = h0 ? h0[soff + e] : 0.0f;
    for (int t0 = 0; t0 < d.T; t0 += CH) {
        const int L = d.T - t0 < CH ? d.T - t0 : CH;
        __syncthreads(); /* the last chunk's readers of K, U, ... are done */
        chunk_load(d, q, k, v, g, beta, b, h, t0, L, K, Q, Gm, U, bt);
        chunk_pairs(L, dk, K, Q, Gm, Lr, P);
        __syncthreads();
        chunk_u(L, dk, dv, K, Gm, bt, Lr, S, U, W);
        for (int e = tid; e < L * dv; e += nt) {
            int t = e / dv, j = e % dv;
            float acc = 0.0f;
            for (int i = 0; i < dk; i++) acc += Q[t * dk + i] * expf(Gm[t * dk + i]) * S[i * dv + j];
            for (int s = 0; s <= t; s++) acc += P[t * L + s] * U[s * dv + j];
            o[iv(d, b, t0 + t, h) + j] = d.scale * acc;
        }
        __syncthreads();
        chunk_state(L, dk, dv, K, Gm, U, S, S); /* the next chunk's start state */
    }
    __syncthreads();
    if (hT)
        for (int e = tid; e < dk * dv; e += nt) hT[soff + e] = S[e];
}

static int chunk_fits(const dm_delta_dims *d, const void *kernel, size_t smem) {
    return dims_ok(d) && smem_ok(kernel, smem);
}

extern "C" int dm_cuda_delta_chunk_fwd(const dm_delta_dims *d, const float *q, const float *k,
                                       const float *v, const float *g, const float *beta,
                                       const float *h0, float *o, float *hT, dm_cuda_stream s) {
    size_t smem = chunk_smem(d);
    if (!chunk_fits(d, (const void *)k_delta_chunk_fwd, smem)) return DM_CUDA_EBADSHAPE;
    k_delta_chunk_fwd<<<d->B * d->H, 256, smem, s>>>(*d, q, k, v, g, beta, h0, o, hT);
    return dm_launched();
}

/* ---- the chunked backward (fp32): docs/chunked.md section 6, the CPU's equations ----
 * Per pair: a forward scan stores every chunk's start state in the workspace; then the
 * chunks in reverse, each recomputed as the forward computed it (K, Q, Gm, Lr, P, U), with
 * dh, the gradient of the chunk's end state, beside them in the workspace:
 *   dU  = scale P^T dO + Kg dh,  Kg = K . exp(Gm_last - Gm)
 *   dR  = (I + A)^-T dU                          (back substitution, a thread per column)
 *   dA  = dO U^T (s <= t),  dL = -dR U^T (s < t)
 *   dQs = dO S0^T,  dKb = -dR S0^T,  dKg = U dh^T (Qs = scale Q . e^Gm, Kb = bt K . e^Gm)
 *   dh  <- Diag(exp(Gm_last)) dh + Qs^T dO - Kb^T dR        (in place, element by element)
 * and the elementwise chains and pairwise terms of the CPU's section 6. A thread owns a
 * key channel c for dq, dk and the gate: its dg needs no sum across threads (KDA); the
 * gate's two-row terms go straight into dg form, as on the CPU (no +t/-t cancels). GDN
 * sums the channels of a row in order, one thread per row. */
static size_t chunk_bwd_smem(const dm_delta_dims *d) {
    size_t dk = (size_t)d->dk, dv = (size_t)d->dv;
    return (7 * CH * dk + 3 * CH * dv + 4 * CH * CH + 2 * CH) * sizeof(float);
}

extern "C" size_t dm_cuda_delta_chunk_bwd_work(const dm_delta_dims *d) {
    size_t nc = (size_t)(d->T + CH - 1) / CH;
    return (size_t)d->B * d->H * (nc + 1) * d->dk * d->dv;
}

/* one key channel c of chunk rows [0, L): its row sums (dO S0^T, dR S0^T, U dh^T) into
 * dQ, dK, Wb column c, then chunk_channel's terms */
static __device__ void chunk_bwd_channel(const dm_delta_dims &d, int L, int c, const float *K,
                                         const float *Q, const float *Gm, const float *bt,
                                         const float *U, const float *dOs, const float *dR,
                                         const float *dA, const float *dL, const float *S0,
                                         const float *dH, float *dQ, float *dK, float *dG,
                                         float *Wb) {
    const int dk = d.dk, dv = d.dv;
    for (int t = 0; t < L; t++) {
        float dqs = 0.0f, dkb = 0.0f, dkg = 0.0f;
        for (int j = 0; j < dv; j++) {
            dqs += dOs[t * dv + j] * S0[c * dv + j];
            dkb += dR[t * dv + j] * S0[c * dv + j];
            dkg += U[t * dv + j] * dH[c * dv + j];
        }
        dQ[t * dk + c] = dqs, dK[t * dk + c] = dkb, Wb[t * dk + c] = dkg;
    }
    chunk_channel<CH>(L, dk, dv, c, d.scale, K, Q, Gm, bt, S0 + (size_t)c * dv,
                      dH + (size_t)c * dv, dA, dL, L, dQ, dK, Wb, dG);
}

static __global__ void k_delta_chunk_bwd(dm_delta_dims d, const float *q, const float *k,
                                         const float *v, const float *g, const float *beta,
                                         const float *h0, const float *dO, const float *dhT,
                                         float *dq, float *dk_, float *dv_, float *dg,
                                         float *dbeta, float *dh0, float *work) {
    extern __shared__ float sm[];
    const int dk = d.dk, dv = d.dv, b = blockIdx.x / d.H, h = blockIdx.x % d.H;
    const int tid = threadIdx.x, nt = blockDim.x, nc = (d.T + CH - 1) / CH;
    const size_t ss = (size_t)dk * dv, soff = (size_t)blockIdx.x * ss;
    float *Sc = work + (size_t)blockIdx.x * (nc + 1) * ss, *dH = Sc + (size_t)nc * ss;
    float *K = sm, *Q = K + CH * dk, *Gm = Q + CH * dk, *W = Gm + CH * dk, *dQ = W + CH * dk;
    float *dK = dQ + CH * dk, *dG = dK + CH * dk, *U = dG + CH * dk, *dOs = U + CH * dv;
    float *dR = dOs + CH * dv, *Lr = dR + CH * dv, *P = Lr + CH * CH, *dA = P + CH * CH;
    float *dL = dA + CH * CH, *bt = dL + CH * CH, *dbt = bt + CH;

    /* 1. the chunk-start states, as the forward makes them */
    for (int e = tid; e < dk * dv; e += nt) Sc[e] = h0 ? h0[soff + e] : 0.0f;
    for (int ci = 0; ci + 1 < nc; ci++) {
        const int t0 = ci * CH, L = CH;
        __syncthreads();
        chunk_load(d, q, k, v, g, beta, b, h, t0, L, K, Q, Gm, U, bt);
        chunk_pairs(L, dk, K, Q, Gm, Lr, NULL);
        __syncthreads();
        chunk_u(L, dk, dv, K, Gm, bt, Lr, Sc + ci * ss, U, W);
        chunk_state(L, dk, dv, K, Gm, U, Sc + ci * ss, Sc + (ci + 1) * ss);
    }
    for (int e = tid; e < dk * dv; e += nt) dH[e] = dhT ? dhT[soff + e] : 0.0f;

    /* 2. the chunks in reverse */
    for (int ci = nc - 1; ci >= 0; ci--) {
        const int t0 = ci * CH, L = d.T - t0 < CH ? d.T - t0 : CH;
        const float *S0 = Sc + ci * ss;
        __syncthreads();
        chunk_load(d, q, k, v, g, beta, b, h, t0, L, K, Q, Gm, U, bt);
        chunk_pairs(L, dk, K, Q, Gm, Lr, P);
        for (int e = tid; e < L * dv; e += nt)
            dOs[e] = dO[iv(d, b, t0 + e / dv, h) + e % dv];
        __syncthreads();
        chunk_u(L, dk, dv, K, Gm, bt, Lr, S0, U, W);
        /* dU = scale P^T dO + Kg dh, into dR */
        for (int e = tid; e < L * dv; e += nt) {
            int s = e / dv, j = e % dv;
            float x = 0.0f, y = 0.0f;
            for (int t = s; t < L; t++) x += P[t * L + s] * dOs[t * dv + j];
            for (int i = 0; i < dk; i++) {
                float last = Gm[(L - 1) * dk + i];
                y += K[s * dk + i] * expf(last - Gm[s * dk + i]) * dH[i * dv + j];
            }
            dR[e] = d.scale * x + y;
        }
        __syncthreads();
        /* dR = (I + A)^-T dU, backward in s, one thread per column */
        for (int j = tid; j < dv; j += nt)
            for (int s = L - 2; s >= 0; s--) {
                float x = dR[s * dv + j];
                for (int t = s + 1; t < L; t++) x -= bt[t] * Lr[t * L + s] * dR[t * dv + j];
                dR[s * dv + j] = x;
            }
        __syncthreads();
        for (int e = tid; e < L * L; e += nt) { /* dA (s <= t), dL (s < t) */
            int t = e / L, s = e % L;
            float x = 0.0f, y = 0.0f;
            if (s <= t)
                for (int j = 0; j < dv; j++) {
                    x += dOs[t * dv + j] * U[s * dv + j];
                    y -= dR[t * dv + j] * U[s * dv + j];
                }
            dA[e] = x;
            dL[e] = s < t ? y : 0.0f;
        }
        for (int t = tid; t < L; t += nt) { /* dv = bt dR; dbeta's V term */
            float x = 0.0f;
            for (int j = 0; j < dv; j++) {
                float r = dR[t * dv + j];
                x += v[iv(d, b, t0 + t, h) + j] * r;
                dv_[iv(d, b, t0 + t, h) + j] = bt[t] * r;
            }
            dbt[t] = x;
        }
        __syncthreads();
        for (int c = tid; c < dk; c += nt)
            chunk_bwd_channel(d, L, c, K, Q, Gm, bt, U, dOs, dR, dA, dL, S0, dH, dQ, dK, dG, W);
        __syncthreads();
        chunk_bwd_write(d, b, h, t0, L, L, dbt, W, dL, Lr, dQ, dK, dG, dq, dk_, dg, dbeta);
        /* dh <- Diag(exp(Gm_last)) dh + Qs^T dO - Kb^T dR: the previous chunk's */
        for (int e = tid; e < dk * dv; e += nt) {
            int i = e / dv, j = e % dv;
            float x = expf(Gm[(L - 1) * dk + i]) * dH[e];
            for (int t = 0; t < L; t++) {
                float es = expf(Gm[t * dk + i]);
                x += d.scale * Q[t * dk + i] * es * dOs[t * dv + j];
                x -= bt[t] * K[t * dk + i] * es * dR[t * dv + j];
            }
            dH[e] = x;
        }
    }
    __syncthreads();
    if (dh0)
        for (int e = tid; e < dk * dv; e += nt) dh0[soff + e] = dH[e];
}

extern "C" int dm_cuda_delta_chunk_bwd(const dm_delta_dims *d, const float *q, const float *k,
                                       const float *v, const float *g, const float *beta,
                                       const float *h0, const float *dO, const float *dhT,
                                       float *dq, float *dk, float *dv, float *dg,
                                       float *dbeta, float *dh0, float *work,
                                       dm_cuda_stream s) {
    size_t smem = chunk_bwd_smem(d);
    if (!chunk_fits(d, (const void *)k_delta_chunk_bwd, smem)) return DM_CUDA_EBADSHAPE;
    k_delta_chunk_bwd<<<d->B * d->H, 256, smem, s>>>(*d, q, k, v, g, beta, h0, dO, dhT, dq, dk,
                                                     dv, dg, dbeta, dh0, work);
    return dm_launched();
}

extern "C" int dm_cuda_delta_chunk_fits(const dm_delta_dims *d) {
    return chunk_fits(d, (const void *)k_delta_chunk_fwd, chunk_smem(d)) &&
           chunk_fits(d, (const void *)k_delta_chunk_bwd, chunk_bwd_smem(d));
}
