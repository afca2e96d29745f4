/* delta.cuh — what the delta-rule cores share (delta.cu: token-serial and chunked fp32;
 * delta_tc.cu: chunked on the tensor cores): the layout of the tensors, the shapes the
 * kernels take, and the gate's pairwise terms of the chunked backward. */
#ifndef DM_KERNELS_CUDA_DELTA_CUH
#define DM_KERNELS_CUDA_DELTA_CUH

#include "kernels/cuda/device.cuh"

#define DELTA_MAX_DIM 256 /* dk, dv: one block of threads spans either */

/* element 0 of token (b,t,h) in q/k [B,T,H,dk], v/o [B,T,H,dv], beta [B,T,H] */
static __device__ __forceinline__ size_t ik(const dm_delta_dims &d, int b, int t, int h) {
    return (((size_t)b * d.T + t) * d.H + h) * (size_t)d.dk;
}
static __device__ __forceinline__ size_t iv(const dm_delta_dims &d, int b, int t, int h) {
    return (((size_t)b * d.T + t) * d.H + h) * (size_t)d.dv;
}
static __device__ __forceinline__ size_t is(const dm_delta_dims &d, int b, int t, int h) {
    return ((size_t)b * d.T + t) * d.H + h;
}

/* the shared memory a launch needs, raised past 48 KiB where the device allows */
static int smem_ok(const void *kernel, size_t bytes) {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
        cudaSuccess)
        return 0;
    if (bytes > (size_t)optin) return 0;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)bytes) == cudaSuccess;
}

static int dims_ok(const dm_delta_dims *d) {
    return d->B > 0 && d->T > 0 && d->H > 0 && d->dk > 0 && d->dv > 0 &&
           d->dk <= DELTA_MAX_DIM && d->dv <= DELTA_MAX_DIM;
}

/* The gate's pairwise terms of key channel c in a chunk of rows [0, L) (docs/chunked.md
 * section 6), K, Q, Gm [L, dk] (Gm cumulative log gates), dA (s <= t) and dL (s < t)
 * [L, ldp]: over pairs (r, j <= r), a = scale dA, l = bt_r dL and w = k_j D (a q_r + l k_r)
 * with D = exp(Gm_r - Gm_j): dQ[r] += a D k_j, dK[r] += l D k_j, dK[j] += w, and w k_j adds
 * to dg_i for j < i <= r (a running prefix over j, into pd, zero on entry). Then column c
 * of dG: dg_i = sum_{r >= i} dga_r + sum_{t < i} tkg_t + pd_i (dga reversed in place). */
static __device__ void chunk_gate_pairs(int L, int dk, int c, float scale, const float *K,
                                        const float *Q, const float *Gm, const float *bt,
                                        const float *dA, const float *dL, int ldp, float *dQ,
                                        float *dK, float *dG, float *dga, const float *tkg,
                                        float *pd) {
    for (int r = 0; r < L; r++) {
        const float qr = Q[r * dk + c], kr = K[r * dk + c];
        float pref = 0.0f;
        for (int j = 0; j <= r; j++) {
            const float D = expf(Gm[r * dk + c] - Gm[j * dk + c]), kj = K[j * dk + c];
            const float a = scale * dA[r * ldp + j], l = j < r ? bt[r] * dL[r * ldp + j] : 0.0f;
            const float w = D * (a * qr + l * kr);
            dQ[r * dk + c] += a * D * kj;
            dK[r * dk + c] += l * D * kj;
            dK[j * dk + c] += w;
            if (j < r) {
                pref += kj * w;
                pd[j + 1] += pref;
            }
        }
    }
    float rev = 0.0f, kp = 0.0f;
    for (int i = L - 1; i >= 0; i--) {
        rev += dga[i];
        dga[i] = rev;
    }
    for (int i = 0; i < L; i++) {
        dG[i * dk + c] = dga[i] + kp + pd[i];
        kp += tkg[i];
    }
}

/* The elementwise terms of key channel c over a chunk's rows [0, L) (CHN at most), in place:
 * on entry dQ, dK, Wb [L, dk] hold in column c the row sums dqs_t = (dO S0^T)_tc, -dkb_t =
 * (dR S0^T)_tc and dkg_t = (U dh^T)_tc; on return dQ, dK have the channel's gradients, Wb
 * the Kb term of dbeta, dG column c the gate's (with chunk_gate_pairs). S0c, dHc: row c of
 * the chunk's start state and of dh [dv]. */
template <int CHN>
static __device__ void chunk_channel(int L, int dk, int dv, int c, float scale, const float *K,
                                     const float *Q, const float *Gm, const float *bt,
                                     const float *S0c, const float *dHc, const float *dA,
                                     const float *dL, int ldp, float *dQ, float *dK, float *Wb,
                                     float *dG) {
    const float glast = Gm[(L - 1) * dk + c];
    float dga[CHN], tkg[CHN], pd[CHN];
    for (int t = 0; t < L; t++) {
        const float es = expf(Gm[t * dk + c]), eg = expf(glast - Gm[t * dk + c]);
        const float dqs = dQ[t * dk + c], dkb = -dK[t * dk + c], dkg = Wb[t * dk + c];
        const float kc = K[t * dk + c];
        dQ[t * dk + c] = scale * es * dqs;
        dK[t * dk + c] = bt[t] * es * dkb + eg * dkg;
        Wb[t * dk + c] = kc * es * dkb;
        dga[t] = dqs * (scale * Q[t * dk + c] * es) + dkb * (bt[t] * kc * es);
        tkg[t] = dkg * (kc * eg);
        pd[t] = 0.0f;
    }
    float hdh = 0.0f;
    for (int j = 0; j < dv; j++) hdh += S0c[j] * dHc[j];
    dga[L - 1] += expf(glast) * hdh;
    chunk_gate_pairs(L, dk, c, scale, K, Q, Gm, bt, dA, dL, ldp, dQ, dK, dG, dga, tkg, pd);
}

/* A chunk's rows [0, L) out to the tensors at token t0 of pair (b,h): dbeta = dbt + the
 * row's sum over channels of Wb + sum_{s<t} dL Lr (dL, Lr [L, ldp]); GDN's dg the row's sum
 * of dG; dq, dk (and KDA's dg) [L, dk] as they are. Every sum in index order. */
static __device__ void chunk_bwd_write(const dm_delta_dims &d, int b, int h, int t0, int L,
                                       int ldp, const float *dbt, const float *Wb,
                                       const float *dL, const float *Lr, const float *dQ,
                                       const float *dK, const float *dG, float *dq, float *dk_,
                                       float *dg, float *dbeta) {
    const int dk = d.dk, tid = threadIdx.x, nt = blockDim.x;
    for (int t = tid; t < L; t += nt) {
        float x = dbt[t], y = 0.0f;
        for (int c = 0; c < dk; c++) x += Wb[t * dk + c];
        for (int s = 0; s < t; s++) x += dL[t * ldp + s] * Lr[t * ldp + s];
        dbeta[is(d, b, t0 + t, h)] = x;
        if (d.scalar_gate) {
            for (int c = 0; c < dk; c++) y += dG[t * dk + c];
            dg[is(d, b, t0 + t, h)] = y;
        }
    }
    for (int e = tid; e < L * dk; e += nt) {
        const int t = e / dk, i = e % dk;
        dq[ik(d, b, t0 + t, h) + i] = dQ[e];
        dk_[ik(d, b, t0 + t, h) + i] = dK[e];
        if (!d.scalar_gate) dg[ik(d, b, t0 + t, h) + i] = dG[e];
    }
}

#endif
