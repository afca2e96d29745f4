/* kernels.h — the CPU kernels: pure functions on float arrays with explicit shapes.
 *
 * Rules for every kernel here:
 *   - no allocation, no globals; OpenMP inside where it pays;
 *   - results do not depend on the thread count (bitwise): every reduction runs in a
 *     fixed order owned by one thread (reductions over rows are parallel over columns);
 *   - parameter gradients ACCUMULATE (+=); input gradients OVERWRITE (=) unless the
 *     comment says otherwise;
 *   - elementwise backward kernels allow dx == dy (in place).
 *   - no identifier named I: OpenBLAS's cblas.h includes <complex.h>, where I is a macro.
 * Shapes: [N, C] is row-major with C fastest. N is usually B*T.
 * Forward and backward of each kernel sit side by side.
 */
#ifndef DM_KERNELS_H
#define DM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dormouse.h"
#include "kernels/common.h"

/* ---- the thread pool (threads.c) ----
 * dm_cpu_flush_denormals: denormal floats flush to zero (x86 FTZ+DAZ, Arm FZ) on the
 * calling thread and every thread of the OpenMP pool; dm_set_threads does it each time
 * (DM_CPU_KEEP_DENORMALS=1 in the environment: cleared instead, for benchmarks).
 * dm_denormals_flushed (dormouse.h) tells whether the pool has that mode. */
void dm_cpu_flush_denormals(void);

/* ---- embedding (embed.c) ----
 * out[N,C] = table[tok[n], :]                       table: [V,C] */
void dm_embed_fwd(float *out, const uint8_t *tok, const float *table, int N, int C);
/* dtable[V,C] += sum_n onehot(tok[n]) x dout[n,:]   (V = 256: tok are bytes) */
void dm_embed_bwd(float *dtable, const float *dout, const uint8_t *tok, int N, int C);
/* the same on ids of w bytes each (dm_id_width: 1, 2 or 4; 0 is 1), table [V,C] */
void dm_embed_fwd_ids(float *out, const void *tok, int w, const float *table, int N, int C);
void dm_embed_bwd_ids(float *dtable, const float *dout, const void *tok, int w, int N, int C);

/* ---- RMSNorm (rmsnorm.c) ----
 * y[N,C] = x * rstd[n] * w,  rstd[n] = 1/sqrt(mean_c x^2 + eps)          w: [C] */
void dm_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                    float eps);
/* The same, also writing yb[N,C] = bf16(y) (dm_bf16_from_f32's bits) row by row while the
 * row is in cache: the bf16 copy a product reads, without a second pass (NULL: none).
 * dm_gatednorm_fwd_yb and dm_swiglu_fwd_yb likewise. */
void dm_rmsnorm_fwd_yb(float *y, uint16_t *yb, float *rstd, const float *x, const float *w,
                       int N, int C, float eps);
/* dx[N,C] += (ACCUMULATES: RMSNorm always reads the residual stream);  dw[C] += */
void dm_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                    const float *rstd, int N, int C);
/* The same, also writing dxb[N,C] = bf16(dx) (of the accumulated dx) row by row: the
 * output gradient's copy the next products read (NULL: none). dm_gatednorm_bwd_yb (dz),
 * dm_swiglu_bwd_yb (da, db) and dm_conv_bwd_yb (dx) likewise. */
void dm_rmsnorm_bwd_yb(float *dx, uint16_t *dxb, float *dw, const float *dy, const float *x,
                       const float *w, const float *rstd, int N, int C);

/* ---- GEMM (gemm.c; oneDNN in onednn.h): the only way the library multiplies matrices ----
 * C[M,N] = alpha op(A) op(B) + beta C, row-major, arguments as cblas_sgemm (trans = 0/1).
 * Every backend cuts C into tiles fixed by the SHAPE alone (dm_gemm_tile_shape) and
 * computes each tile with one single-threaded call inside one OpenMP region: one thread
 * pool, and the bits never depend on the thread count. The number of tiles grows with
 * the product, so a machine with many cores can use them on a big one.
 * dm_gemm: OpenBLAS (sgemm per tile). dm_gemm_serial: one sgemm on the calling thread,
 * for code that runs its own parallel loop (per slice, per head) around it. */
void dm_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);
void dm_gemm_serial(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* A GEMM backend as the matmul kernels take it: a function with dm_gemm's arguments and
 * its context (NULL backend = dm_gemm). */
typedef void (*dm_gemm_fn)(void *ctx, int transA, int transB, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta,
                           float *C, int ldc);
typedef struct { dm_gemm_fn fn; void *ctx; } dm_gemm_be;
/* dm_gemm in that form (ctx unused) */
void dm_gemm_openblas(void *ctx, int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc);

/* The tiling every backend shares. A product as the tilers see it: row-major op(A)[M,K]
 * times op(B)[K,N] into C[M,N], A and B of `elem` bytes (4: f32, 2: bf16), C of `celem`
 * bytes (4: f32; 2: bf16, oneDNN only, written rounded to nearest even). The tile
 * function gets the same struct narrowed to one tile (M, N and the pointers) and must
 * compute it on the calling thread. dm_gemm_tiles runs the tiles of an mb x nb tiling over
 * the threads (row-major tile order); dm_gemm_tile_shape is the tiling every backend uses
 * for a shape; dm_gemm_tiled is OpenBLAS over a given tiling (benchmarks compare them). */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const void *A, *B;
    size_t elem;
    void *C;
    size_t celem;
} dm_gemm_args;
typedef void (*dm_tile_fn)(void *ctx, const dm_gemm_args *tile);
void dm_gemm_tiles(dm_tile_fn tile, void *ctx, const dm_gemm_args *g, int mb, int nb);
void dm_gemm_tile_shape(int M, int N, int K, int *mb, int *nb);
void dm_gemm_tiled(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc, int mb,
                   int nb);

/* ---- bf16 (bf16.c): the upper half of an f32, rounded to nearest even; NaN stays NaN ----
 * dm_bf16_from_f32: dst[n] = bf16(src);  dm_bf16_round: dst[n] = f32(bf16(src)), the same
 * value kept in f32 (the reference bf16 path multiplies these with the f32 GEMM: every
 * product of two bf16 values is exact in f32). dst may equal src in dm_bf16_round. */
void dm_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
/* one value, and a short run on the calling thread (no parallel region): the rounding
 * dm_bf16_from_f32 does, for kernels that write a bf16 copy of what they produce */
static inline uint16_t dm_bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline void dm_bf16_run(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = dm_bf16_of(src[i]);
}
/* dst[n] = bf16((float)(src * scale)), the product in double: a scaling and its rounding in
 * one pass (Newton–Schulz's X0 = G / ||G||) */
void dm_bf16_from_f32_scaled(uint16_t *dst, const float *src, double scale, size_t n);
void dm_bf16_round(float *dst, const float *src, size_t n);

/* ---- the CPU (cpu.c) ----
 * NULL when the CPU (and the OS) give hardware bf16 products (avx512_bf16 or amx_bf16);
 * else what is missing, e.g. "cpu lacks avx512_bf16 and amx_bf16". */
const char *dm_cpu_bf16_missing(void);
/* 1 when DM_CPU_BF16_REFERENCE is set: where the CPU lacks bf16, the products bf16 allows
 * run on the reference bf16 path (the rounded operands through the f32 GEMM) instead of in
 * fp32 — the bf16 paths of a model (its copies, its weights' copy) tested on any CPU. */
int dm_cpu_bf16_reference(void);

/* ---- matmul over a GEMM backend (matmul.c) ----  be: NULL = dm_gemm (OpenBLAS)
 * out[N,O] = in[N,K] W[O,K]^T (+ bias[O] when bias != NULL)    ([out, in] weight layout) */
void dm_matmul_fwd(const dm_gemm_be *be, float *out, const float *in, const float *W,
                   const float *bias, int N, int K, int O);
/* the data gradient: din[N,K] = dout[N,O] W (or += when din_acc) */
void dm_matmul_bwd_data(const dm_gemm_be *be, float *din, const float *dout, const float *W,
                        int N, int K, int O, int din_acc);
/* the weight gradient: dW[O,K] += dout^T in;  dbias[O] += sum_n dout[n,:] (dbias may be NULL) */
void dm_matmul_bwd_weight(const dm_gemm_be *be, float *dW, float *dbias, const float *dout,
                          const float *in, int N, int K, int O);
/* the products' companions, for backends that run the products themselves (bf16):
 * out[N,O] (=0 first when K <= 0) += bias;  dbias[O] += column sums of dout[N,O] */
void dm_matmul_bias(float *out, const float *bias, int N, int K, int O);
void dm_matmul_bias_grad(float *dbias, const float *dout, int N, int O);
/* both (din skipped when NULL) */
void dm_matmul_bwd(const dm_gemm_be *be, float *din, float *dW, float *dbias, const float *dout,
                   const float *in, const float *W, int N, int K, int O, int din_acc);

/* ---- activations (act.c) ----  n = number of elements */
void dm_silu_fwd(float *y, const float *x, size_t n);                  /* y = x*sigmoid(x) */
void dm_silu_bwd(float *dx, const float *dy, const float *x, size_t n);
void dm_sigmoid_fwd(float *y, const float *x, size_t n);
/* from the output y: where y rounds to 1 (x > ~16.6) the float gradient y(1-y) loses
 * its relative precision; inherent to a backward from y */
void dm_sigmoid_bwd(float *dx, const float *dy, const float *y, size_t n);
void dm_swiglu_fwd(float *h, const float *a, const float *b, size_t n); /* h = silu(a)*b */
void dm_swiglu_fwd_yb(float *h, uint16_t *hb, const float *a, const float *b, size_t n);
void dm_swiglu_bwd(float *da, float *db, const float *dh, const float *a, const float *b,
                   size_t n);
void dm_swiglu_bwd_yb(float *da, float *db, uint16_t *dab, uint16_t *dbb, const float *dh,
                      const float *a, const float *b, size_t n);

/* ---- depthwise causal conv along time (conv.c) ----
 * x, y: [B,T,C]; w: [C,W];  y[b,t,c] = sum_{i<W} w[c,i] * x[b, t-W+1+i, c]
 * (zero left padding: the last tap w[c,W-1] multiplies the current token) */
void dm_conv_fwd(float *y, const float *x, const float *w, int B, int T, int C, int W);
/* dx[B,T,C] = ;  dw[C,W] += */
void dm_conv_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 int B, int T, int C, int W);
void dm_conv_bwd_yb(float *dx, uint16_t *dxb, float *dw, const float *dy, const float *x,
                    const float *w, int B, int T, int C, int W);

/* ---- per-head L2 norm (l2norm.c) ----
 * x, y: [R,D] (R = rows = N*H, one head-vector per row);
 * y = x * rn[r],  rn[r] = 1/sqrt(sum_d x^2 + eps) */
void dm_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps);
/* dx = rn * (dy - (dy.y) y);  dx may == dy */
void dm_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn, int R, int D);
/* SiLU then the L2 norm in one pass: y = l2norm(silu(x)) (q and k of the mixer); its
 * backward from the norm's output y, rn and the SiLU's input xs: dx = silu'(xs) *
 * l2norm_bwd(dy) (dx may == dy). The same bits as the two kernels one after the other. */
void dm_silu_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps);
void dm_silu_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn,
                        const float *xs, int R, int D);

/* ---- forget gate in log space (gate.c) ----
 * f, g: [N,H,Cg] with Cg = head_dim (KDA, per key channel) or 1 (GDN, per head);
 * A_log: [H];  dt_bias: [H,Cg];  u = f + dt_bias[h,c]
 *   lb == 0: g = -exp(A_log[h]) * softplus(u)            (in (-inf, 0])
 *   lb <  0: g = lb * sigmoid(exp(A_log[h]) * u)          (in (lb, 0)) */
void dm_gate_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int N,
                 int H, int Cg, float lb);
/* df[N,H,Cg] = ;  dA_log[H] += ;  ddt_bias[H,Cg] += ;  df may == dg */
void dm_gate_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                 const float *A_log, const float *dt_bias, int N, int H, int Cg, float lb);
/* the same with dfb = bf16(df) (NULL: none; see dm_rmsnorm_bwd_yb) */
void dm_gate_bwd_yb(float *df, uint16_t *dfb, float *dA_log, float *ddt_bias, const float *dg,
                    const float *f, const float *A_log, const float *dt_bias, int N, int H,
                    int Cg, float lb);

/* ---- per-head gated RMSNorm (gatednorm.c) ----
 * o, z, y: [R,D] (R = N*H rows, one head each); w: [D] shared by all heads; rstd: [R]
 * y = o * rstd[r] * w * act(z),  rstd = 1/sqrt(mean_d o^2 + eps)
 * act = sigmoid (DM_GATE_SIGMOID, KDA) or silu (DM_GATE_SWISH, GDN) */
void dm_gatednorm_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                      int R, int D, float eps, int act);
void dm_gatednorm_fwd_yb(float *y, uint16_t *yb, float *rstd, const float *o, const float *z,
                         const float *w, int R, int D, float eps, int act);
/* do_[R,D] = ;  dz[R,D] = ;  dw[D] +=   (dz is used as scratch: it must not alias
 * do_, dy, o or z) */
void dm_gatednorm_bwd(float *do_, float *dz, float *dw, const float *dy, const float *o,
                      const float *z, const float *w, const float *rstd, int R, int D, int act);
void dm_gatednorm_bwd_yb(float *do_, float *dz, uint16_t *dzb, float *dw, const float *dy,
                         const float *o, const float *z, const float *w, const float *rstd,
                         int R, int D, int act);

/* ---- softmax cross-entropy (xent.c) ----
 * logits: [N,V]; targets: [N] bytes; losses[n] = logsumexp(logits[n]) - logits[n,t[n]].
 * Returns the mean over n, summed in double in row order. losses may be NULL. */
double dm_xent_fwd(float *losses, const float *logits, const uint8_t *targets, int N, int V);
/* dlogits[N,V] = (softmax(logits[n]) - onehot(t[n])) * scale;  dlogits may == logits */
void dm_xent_bwd(float *dlogits, const float *logits, const uint8_t *targets, int N, int V,
                 float scale);
/* the same with db = bf16(dlogits) (NULL: none; see dm_rmsnorm_bwd_yb) */
void dm_xent_bwd_yb(float *dlogits, uint16_t *db, const float *logits, const uint8_t *targets,
                    int N, int V, float scale);
/* the same on targets of w bytes each (dm_id_width: 1, 2 or 4; 0 is 1) */
double dm_xent_fwd_ids(float *losses, const float *logits, const void *targets, int w, int N,
                       int V);
void dm_xent_bwd_yb_ids(float *dlogits, uint16_t *db, const float *logits, const void *targets,
                        int w, int N, int V, float scale);

/* ---- elementwise helpers (act.c) ---- */
void dm_add_inplace(float *y, const float *x, size_t n); /* y += x */

#endif /* DM_KERNELS_H */
