/* ref.h — the reference kernels: the oracles of the fast kernels (backends/cpu/kernels), written
 * for clarity, not speed. The dispatch guard (ops/) runs them when the setting or the
 * shape calls for the reference, and beside the fast kernel in verify mode. Same shapes,
 * layouts and accumulate rules as the fast kernels they check.
 */
#ifndef DM_KERNELS_REF_H
#define DM_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"
#include "kernels/common.h"

/* ---- reference: token-serial recurrence (delta_ref.c) ---- */

/* o = forward(q,k,v,g,beta,h0); hT written when non-NULL; h0 NULL = zero state. */
void dm_delta_ref_fwd(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, const float *h0, float *o, float *hT,
                      int nthreads);

/* Scratch for dm_delta_ref_bwd: nthreads * (T*dk*dv + small) floats (each thread stores
 * the states S_0..S_{T-1} of its (b,h) pair, recomputed by a forward pass). */
size_t dm_delta_ref_bwd_work(const dm_delta_dims *d, int nthreads);

/* Reverse-time backward. dO [B,T,H,dv]; dhT [B,H,dk,dv] or NULL (= 0).
 * Writes (overwrites) dq, dk, dv, dg, dbeta; dh0 when non-NULL. */
void dm_delta_ref_bwd(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, const float *h0, const float *dO,
                      const float *dhT, float *dq, float *dk, float *dv, float *dg,
                      float *dbeta, float *dh0, float *work, int nthreads);

/* ---- composed references of the two norms (norm_ref.c) ----
 * The same ops as dm_rmsnorm_* / dm_gatednorm_*, written as chains of elementary steps
 * with their intermediates in scratch (floats: fwd N*C, bwd 2*N*C); serial, the oracle
 * of the fused kernels in the dispatch guard. Same accumulate rules as the fused ones. */
void dm_rmsnorm_ref_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                        float eps, float *scratch);
void dm_rmsnorm_ref_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int N, int C, float *scratch);
void dm_gatednorm_ref_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                          int R, int D, float eps, int act, float *scratch);
void dm_gatednorm_ref_bwd(float *do_, float *dz, float *dw, const float *dy, const float *o,
                          const float *z, const float *w, const float *rstd, int R, int D,
                          int act, float *scratch);

/* ---- matrix products (matmul_ref.c) ----
 * The dense layer of backends/cpu/kernels/matmul.c, [out, in] weights. Each output element sums
 * its products in index order, in double, on one thread (rows over threads): independent
 * of the thread count. In double it is also the oracle of both GEMM backends.
 * out[N,O] = in[N,K] W[O,K]^T (+ bias[O]) */
void dm_matmul_ref_fwd(float *out, const float *in, const float *W, const float *bias, int N,
                       int K, int O);
/* din[N,K] = dout[N,O] W  (+= when din_acc) */
void dm_matmul_ref_bwd_data(float *din, const float *dout, const float *W, int N, int K, int O,
                            int din_acc);
/* dW[O,K] += dout^T in;  dbias[O] += sum_n dout[n,:] (when dbias != NULL) */
void dm_matmul_ref_bwd_weight(float *dW, float *dbias, const float *dout, const float *in,
                              int N, int K, int O);

/* ---- activations and the forget gate (act_ref.c): elementwise, libm in double ----
 * Same semantics as backends/cpu/kernels (act.c, gate.c); backward may run in place (dx == dy). */
void dm_silu_ref_fwd(float *y, const float *x, size_t n);
void dm_silu_ref_bwd(float *dx, const float *dy, const float *x, size_t n);
void dm_sigmoid_ref_fwd(float *y, const float *x, size_t n);
void dm_sigmoid_ref_bwd(float *dx, const float *dy, const float *y, size_t n);
void dm_swiglu_ref_fwd(float *h, const float *a, const float *b, size_t n);
void dm_swiglu_ref_bwd(float *da, float *db, const float *dh, const float *a, const float *b,
                       size_t n);
void dm_gate_ref_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int N,
                     int H, int Cg, float lb);
void dm_gate_ref_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                     const float *A_log, const float *dt_bias, int N, int H, int Cg, float lb);

/* ---- the byte ends and the sequence ops (seq_ref.c) ----
 * embed, causal depthwise conv, per-head L2 norm, softmax cross-entropy: the semantics of
 * backends/cpu/kernels (embed.c, conv.c, l2norm.c, xent.c), serial, sums in double. */
void dm_embed_ref_fwd(float *out, const uint8_t *tok, const float *table, int N, int C);
void dm_embed_ref_bwd(float *dtable, const float *dout, const uint8_t *tok, int N, int C);
/* the same on N ids of w bytes each (dm_id_width; 0 is 1, the bytes) */
void dm_embed_ref_fwd_ids(float *out, const void *tok, int w, const float *table, int N, int C);
void dm_embed_ref_bwd_ids(float *dtable, const float *dout, const void *tok, int w, int N,
                          int C);
void dm_conv_ref_fwd(float *y, const float *x, const float *w, int B, int T, int C, int W);
void dm_conv_ref_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     int B, int T, int C, int W);
void dm_l2norm_ref_fwd(float *y, float *rn, const float *x, int R, int D, float eps);
void dm_l2norm_ref_bwd(float *dx, const float *dy, const float *y, const float *rn, int R, int D);
double dm_xent_ref_fwd(float *losses, const float *logits, const uint8_t *targets, int N, int V);
void dm_xent_ref_bwd(float *dlogits, const float *logits, const uint8_t *targets, int N, int V,
                     float scale);
/* the same on targets of w bytes each (dm_id_width; 0 is 1, the bytes) */
double dm_xent_ref_fwd_ids(float *losses, const float *logits, const void *targets, int w,
                           int N, int V);
void dm_xent_ref_bwd_ids(float *dlogits, const float *logits, const void *targets, int w,
                         int N, int V, float scale);

#endif /* DM_KERNELS_REF_H */
