/* cuda.h — the CUDA kernels: pure functions on device pointers with explicit shapes, the
 * same semantics as the CPU kernels of kernels/cpu/kernels.h (docs/cuda.md).
 *
 * Rules for every kernel here:
 *   - every pointer argument is device memory unless its comment says host; shapes are
 *     host ints; [N, C] is row-major with C fastest, as on the CPU;
 *   - each kernel runs on the stream it is given (NULL: the legacy default stream), returns
 *     at once (asynchronous) and gives 0, or the launch's error code (dm_cuda_error says
 *     what it means), or DM_CUDA_EBADSHAPE for a shape it does not take;
 *   - parameter gradients ACCUMULATE (+=); input gradients OVERWRITE (=) unless the
 *     comment says otherwise (RMSNorm's dx accumulates, as on the CPU);
 *   - deterministic: no atomics; every reduction runs in an order fixed by the shape
 *     alone (warp butterflies, fixed-shape trees, serial loops), so a launch repeated on
 *     the same GPU and toolkit gives the same bits. Not bitwise against the CPU: within
 *     the bounds of docs/cuda.md;
 *   - elementwise backward kernels allow dx == dy (in place), as on the CPU.
 * Forward and backward of each kernel sit side by side. Without the toolkit only the probe
 * exists (nocuda.c): the rest is declared but not built.
 */
#ifndef DM_KERNELS_CUDA_H
#define DM_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"
#include "kernels/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* a stream: the runtime's cudaStream_t (the same type, without the runtime's headers) */
struct CUstream_st;
typedef struct CUstream_st *dm_cuda_stream;

/* a shape the kernel does not take (its comment says which) */
#define DM_CUDA_EBADSHAPE (-1)
/* cuBLASLt's status s is returned as DM_CUDA_EBLAS - s (blas.c) */
#define DM_CUDA_EBLAS (-1000)

/* ---- the device (runtime.c; nocuda.c without the toolkit) ----
 * NULL when device `device` can run this build's kernels; else why not, one line: this
 * build has no CUDA, no CUDA driver, the driver older than the runtime, no device, the
 * index out of range, a GPU older than the code built (compute capability < 8.0). The
 * string is constant or this thread's buffer, valid until the next call on the thread. */
const char *dm_cuda_unavailable(int device);
/* what an error code of this header means (a CUDA runtime error, DM_CUDA_EBADSHAPE, or a
 * cuBLASLt status) */
const char *dm_cuda_error(int err);

/* ---- device memory and streams (runtime.c): what a backend allocates with; each
 * returns 0 or the runtime's error code ---- */
/* "NVIDIA H200, cc 9.0, 132 SMs, 139.8 GiB" into buf (the probe's reason when unusable) */
void dm_cuda_device_name(int device, char *buf, size_t n);
int dm_cuda_set_device(int device);
/* the current device's free and total memory in bytes (the memory report's device side) */
int dm_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
int dm_cuda_malloc(void **p, size_t bytes);                   /* *p = NULL on failure */
int dm_cuda_free(void *p);                                    /* NULL: nothing */
int dm_cuda_upload(void *dst, const void *host_src, size_t bytes, dm_cuda_stream s);
int dm_cuda_download(void *host_dst, const void *src, size_t bytes, dm_cuda_stream s);
/* the same queued on the stream without waiting: host_dst holds the bytes once the stream
 * has been waited for (pinned memory, dm_cuda_host_alloc, for the copy to run on its own) */
int dm_cuda_download_async(void *host_dst, const void *src, size_t bytes, dm_cuda_stream s);
/* page-locked host memory (*p = NULL on failure), and its release (NULL: nothing) */
int dm_cuda_host_alloc(void **p, size_t bytes);
int dm_cuda_host_free(void *p);
int dm_cuda_copy(void *dst, const void *src, size_t bytes, dm_cuda_stream s); /* device */
int dm_cuda_zero(void *p, size_t bytes, dm_cuda_stream s);
int dm_cuda_fill_bytes(void *p, int byte, size_t bytes, dm_cuda_stream s); /* poison */
int dm_cuda_sync(dm_cuda_stream s); /* waits for the stream; its first error */
int dm_cuda_stream_create(dm_cuda_stream *s);
int dm_cuda_stream_destroy(dm_cuda_stream s);

/* ---- events and graphs (runtime.c) ----
 * An event pair times the work a stream ran between two records (the atlas' per-op
 * times): dm_cuda_timer_ms waits for the second and gives the milliseconds between. */
typedef struct dm_cuda_timer dm_cuda_timer;
int dm_cuda_timer_create(dm_cuda_timer **t);
void dm_cuda_timer_free(dm_cuda_timer *t);
int dm_cuda_timer_start(dm_cuda_timer *t, dm_cuda_stream s);
int dm_cuda_timer_stop(dm_cuda_timer *t, dm_cuda_stream s);
int dm_cuda_timer_ms(dm_cuda_timer *t, float *ms);
/* n marks, each an event recorded on a stream (a point of its work, for the step's phase
 * times without waiting between phases); once the stream has been waited for past mark b,
 * dm_cuda_marks_ms gives the milliseconds from mark a to it */
typedef struct dm_cuda_marks dm_cuda_marks;
int dm_cuda_marks_create(dm_cuda_marks **m, int n);
void dm_cuda_marks_free(dm_cuda_marks *m);
int dm_cuda_mark(dm_cuda_marks *m, int i, dm_cuda_stream s);
int dm_cuda_marks_ms(dm_cuda_marks *m, int a, int b, float *ms);
/* A captured sequence of launches replayed as one graph (small models are launch-bound):
 * dm_cuda_capture_begin(s) ... the launches on s (a created stream, not NULL) ...
 * dm_cuda_capture_end(s, &g) instantiates them; dm_cuda_graph_launch(g, s) replays them
 * with the same pointers and shapes. Kernels here allocate nothing, as capture needs. */
typedef struct dm_cuda_graph dm_cuda_graph;
int dm_cuda_capture_begin(dm_cuda_stream s);
int dm_cuda_capture_end(dm_cuda_stream s, dm_cuda_graph **g);
int dm_cuda_graph_launch(dm_cuda_graph *g, dm_cuda_stream s);
void dm_cuda_graph_free(dm_cuda_graph *g);

/* ---- bf16 (elementwise.cu) ----
 * dst[n] = bf16(src): dm_bf16_from_f32's bits (round to nearest even, NaN stays NaN) */
int dm_cuda_bf16_from_f32(uint16_t *dst, const float *src, size_t n, dm_cuda_stream s);

/* ---- activations and the residual add (elementwise.cu) ----  n = number of elements */
int dm_cuda_silu_fwd(float *y, const float *x, size_t n, dm_cuda_stream s);
int dm_cuda_silu_bwd(float *dx, const float *dy, const float *x, size_t n, dm_cuda_stream s);
int dm_cuda_sigmoid_fwd(float *y, const float *x, size_t n, dm_cuda_stream s);
/* dx = dy * y * (1 - y), from the output y */
int dm_cuda_sigmoid_bwd(float *dx, const float *dy, const float *y, size_t n, dm_cuda_stream s);
/* h = silu(a) * b */
int dm_cuda_swiglu_fwd(float *h, const float *a, const float *b, size_t n, dm_cuda_stream s);
/* da = dh * b * silu'(a);  db = dh * silu(a)   (da or db may alias dh) */
int dm_cuda_swiglu_bwd(float *da, float *db, const float *dh, const float *a, const float *b,
                       size_t n, dm_cuda_stream s);
int dm_cuda_add_inplace(float *y, const float *x, size_t n, dm_cuda_stream s); /* y += x */
/* y = x a (y may be x): the mean of micro-batches' gradients, a = 1 / A as the CPU's */
int dm_cuda_scale(float *y, const float *x, float a, size_t n, dm_cuda_stream s);

/* ---- forget gate in log space (elementwise.cu) ----
 * f, g: [N,H,Cg] (Cg = head_dim: KDA, 1: GDN); A_log: [H]; dt_bias: [H,Cg]; u = f + dt_bias
 *   lb == 0: g = -exp(A_log[h]) * softplus(u);   lb < 0: g = lb * sigmoid(exp(A_log[h]) u) */
int dm_cuda_gate_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int N,
                     int H, int Cg, float lb, dm_cuda_stream s);
/* df[N,H,Cg] = ;  dA_log[H] += ;  ddt_bias[H,Cg] += ;  df may == dg */
int dm_cuda_gate_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                     const float *A_log, const float *dt_bias, int N, int H, int Cg, float lb,
                     dm_cuda_stream s);

/* ---- norms (norm.cu) ----
 * RMSNorm: x, y [N,C]; w [C]; rstd [N];  y = x * rstd * w, rstd = 1/sqrt(mean_c x^2 + eps) */
int dm_cuda_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N, int C,
                        float eps, dm_cuda_stream s);
/* dx[N,C] += (ACCUMULATES, as on the CPU);  dw[C] += */
int dm_cuda_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int N, int C, dm_cuda_stream s);
/* gated RMSNorm per head: o, z, y [R,D]; w [D]; rstd [R]
 * y = o * rstd * w * act(z),  act = sigmoid (DM_GATE_SIGMOID) or silu (DM_GATE_SWISH) */
int dm_cuda_gatednorm_fwd(float *y, float *rstd, const float *o, const float *z, const float *w,
                          int R, int D, float eps, int act, dm_cuda_stream s);
/* do_[R,D] = ;  dz[R,D] = ;  dw[D] +=   (dz must not alias do_, dy, o or z) */
int dm_cuda_gatednorm_bwd(float *do_, float *dz, float *dw, const float *dy, const float *o,
                          const float *z, const float *w, const float *rstd, int R, int D,
                          int act, dm_cuda_stream s);
/* per-head L2 norm: x, y [R,D]; rn [R];  y = x * rn, rn = 1/sqrt(sum_d x^2 + eps) */
int dm_cuda_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps,
                       dm_cuda_stream s);
/* dx = rn * (dy - (dy.y) y)  (dx may == dy) */
int dm_cuda_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn, int R, int D,
                       dm_cuda_stream s);
/* y = l2norm(silu(x)); its backward dx = silu'(xs) * l2norm_bwd(dy) from y, rn and the
 * SiLU's input xs (dx may == dy) */
int dm_cuda_silu_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps,
                            dm_cuda_stream s);
int dm_cuda_silu_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn,
                            const float *xs, int R, int D, dm_cuda_stream s);

/* ---- the ends of the network and the sequence ops (seq.cu) ----
 * Ids (device) are of width w: 1 (or 0) bytes, 2 or 4 (dm_id_width of the vocabulary).
 * embed: out[N,C] = table[ids[n], :]  (table [V,C]) */
int dm_cuda_embed_fwd(float *out, const void *ids, int w, const float *table, int N, int C,
                      dm_cuda_stream s);
/* dtable[V,C] += sum_n onehot(ids[n]) x dout[n,:]  (rows summed in order n = 0..N-1) */
int dm_cuda_embed_bwd(float *dtable, const float *dout, const void *ids, int w, int N, int C,
                      int V, dm_cuda_stream s);
/* depthwise causal conv: x, y [B,T,C]; w [C,W];
 * y[b,t,c] = sum_{i<W} w[c,i] x[b,t-W+1+i,c]  (zero left padding) */
int dm_cuda_conv_fwd(float *y, const float *x, const float *w, int B, int T, int C, int W,
                     dm_cuda_stream s);
/* dx[B,T,C] = ;  dw[C,W] += */
int dm_cuda_conv_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     int B, int T, int C, int W, dm_cuda_stream s);
/* softmax cross-entropy: logits [N,V]; targets [N] ids of width w;
 * losses[n] = logsumexp(logits[n]) - logits[n,t[n]] (required); *mean (device double,
 * NULL: none) = their mean as dm_cuda_mean sums it */
int dm_cuda_xent_fwd(float *losses, double *mean, const float *logits, const void *targets,
                     int w, int N, int V, dm_cuda_stream s);
/* dlogits[N,V] = (softmax(logits[n]) - onehot(t[n])) * scale  (dlogits may == logits) */
int dm_cuda_xent_bwd(float *dlogits, const float *logits, const void *targets, int w, int N,
                     int V, float scale, dm_cuda_stream s);
/* *mean (device double) = sum_n x[n] / N, summed in double in a fixed tree (one block) */
int dm_cuda_mean(double *mean, const float *x, int N, dm_cuda_stream s);

/* ---- matrix products through cuBLASLt (blas.c) ----
 * A context: the cuBLASLt handle, a fixed workspace and the algorithm chosen for each
 * shape (the first heuristic answer, kept: the same algorithm every call, so the same
 * bits). NULL on failure with *why set. One context per thread of host control. */
typedef struct dm_cuda_blas dm_cuda_blas;
dm_cuda_blas *dm_cuda_blas_create(const char **why);
void dm_cuda_blas_free(dm_cuda_blas *b);
/* C[M,N] = alpha op(A) op(B) + beta C, row-major, arguments as cblas_sgemm (trans 0/1).
 * bf16 == 0: A, B f32 and the products in true f32 (CUBLAS_COMPUTE_32F: no TF32);
 * bf16 == 1: A, B bf16 (uint16_t, dm_cuda_bf16_from_f32's), accumulated in f32. C f32. */
int dm_cuda_gemm(dm_cuda_blas *b, int bf16, int transA, int transB, int M, int N, int K,
                 float alpha, const void *A, int lda, const void *B, int ldb, float beta,
                 float *C, int ldc, dm_cuda_stream s);
/* `batch` such products at once, matrix i of A, B and C at A + i strideA (elements) and so
 * on: the head-wise slices of Newton–Schulz (cuBLASLt's strided batches) */
int dm_cuda_gemm_batched(dm_cuda_blas *b, int bf16, int transA, int transB, int M, int N, int K,
                         float alpha, const void *A, int lda, long long strideA, const void *B,
                         int ldb, long long strideB, float beta, float *C, int ldc,
                         long long strideC, int batch, dm_cuda_stream s);
/* the dense layer of dm_matmul_* ([out, in] weights; in, W, dout f32 or bf16 as `bf16`):
 * out[N,O] = in[N,K] W[O,K]^T (+ bias[O], f32, when bias != NULL) */
int dm_cuda_matmul_fwd(dm_cuda_blas *b, int bf16, float *out, const void *in, const void *W,
                       const float *bias, int N, int K, int O, dm_cuda_stream s);
/* din[N,K] = dout[N,O] W  (+= when din_acc) */
int dm_cuda_matmul_bwd_data(dm_cuda_blas *b, int bf16, float *din, const void *dout,
                            const void *W, int N, int K, int O, int din_acc, dm_cuda_stream s);
/* dW[O,K] += dout^T in;  dbias[O] += column sums of dout_f32 [N,O] (the f32 gradient, as
 * on the CPU; dbias NULL: none) */
int dm_cuda_matmul_bwd_weight(dm_cuda_blas *b, int bf16, float *dW, float *dbias,
                              const void *dout, const float *dout_f32, const void *in, int N,
                              int K, int O, dm_cuda_stream s);
/* the bias companions (elementwise.cu): out[N,O] += bias;  dbias[O] += sum_n dout[n,:] */
int dm_cuda_bias_add(float *out, const float *bias, int N, int O, dm_cuda_stream s);
int dm_cuda_bias_grad(float *dbias, const float *dout, int N, int O, dm_cuda_stream s);

/* ---- the optimizer's elementwise part (elementwise.cu) ----
 * *out (device double) = sum_i x[i]^2 in double: DM_CUDA_SUMSQ_BLOCKS fixed slices of x
 * (their bounds set by n alone), each summed by one block in a fixed tree into work
 * [DM_CUDA_SUMSQ_BLOCKS doubles], then those in a fixed tree: the gradient norm's square */
#define DM_CUDA_SUMSQ_BLOCKS 256
int dm_cuda_sumsq(double *out, const float *x, size_t n, double *work, dm_cuda_stream s);
/* The gradient norm: *norm = sqrt(sum of squares) as dm_cuda_sumsq sums them (work the
 * same), and when gscale != NULL the clipping factor of threshold clip there
 * (ops/update.h: dm_clip_scale); both device memory, nothing waits */
int dm_cuda_grad_norm(double *norm, float *gscale, const float *x, size_t n, float clip,
                      double *work, dm_cuda_stream s);
/* AdamW on one tensor of n floats (optim.c's update): with gi = g gscale (*gscale, one
 * float of device memory: the clipping factor; NULL: 1),
 * m1 = b1 m1 + (1-b1) gi;  m2 = b2 m2 + (1-b2) gi^2;
 * p = p decay - lr (m1 c1) / (sqrt(m2 c2) + eps), with [lr, decay, c1, c2] at hyper (four
 * floats of device memory, read by the kernel: ops/optim_ops.h's dm_adam_hyper);
 * cautious: no decay (p, not p decay) where m1 p < 0 */
int dm_cuda_adamw(float *p, const float *g, float *m1, float *m2, size_t n, const float *hyper,
                  float b1, float b2, float eps, const float *gscale, int cautious,
                  dm_cuda_stream s);

/* Muon's elementwise parts (muon.c): the momentum, mom = beta mom + (1-beta) g gscale
 * (gscale as for AdamW), and, when u != NULL, the Nesterov update u = (1-beta) g gscale +
 * beta mom (of the new mom); the step on a unit's weights, w = w decay - step_scale x
 * (x: its orthogonalized update; [decay, step_scale] at ds, two floats of device memory
 * the host put: decay = 1 - lr wd, step_scale = lr sqrt(max(1, rows/cols)); cautious: no
 * decay where x w < 0) */
int dm_cuda_muon_momentum(float *mom, const float *g, float *u, size_t n, float beta,
                          const float *gscale, dm_cuda_stream s);
int dm_cuda_muon_update(float *w, const float *x, size_t n, const float *ds, int cautious,
                        dm_cuda_stream s);
/* NorMuon on n stacked slices x[n, rows, cols] in place, their row moments v[n, rows]
 * (kernels/cpu/normuon.h: the same arithmetic and order). The rows' sums of squares in
 * shared memory: dm_cuda_normuon_fits(rows) (else DM_CUDA_EBADSHAPE) */
int dm_cuda_normuon_fits(int rows);
int dm_cuda_normuon(float *x, float *v, int n, int rows, int cols, float beta2, float eps,
                    dm_cuda_stream s);

/* ---- Newton–Schulz on a stack of slices (blas.c; docs/muon.md, kernels/cpu/ns.h) ----
 * out[n,rows,cols] = NS(G[n,rows,cols]) slice by slice, kernels/cpu/ns.c's f32 algorithm with
 * every product one strided-batched product over the n slices:
 *   X0 = G / (safety ||G||_F) (the norm per slice, in double; a zero slice gives zeros);
 *   for t < steps: A = X X^T (X^T X when tall);  B = b A + a I;  B += c A A;
 *                  X = B X (X B^T when tall).
 * abc: the schedule's (a, b, c) per step, host memory (dm_ns_sched_coeffs' values, as
 * floats). out may equal G. work: dm_cuda_ns_work floats of device memory, 8-byte aligned
 * (as cudaMalloc gives it: the norms are doubles in it). */
size_t dm_cuda_ns_work(int n, int rows, int cols);
int dm_cuda_ns(dm_cuda_blas *b, float *out, const float *G, int n, int rows, int cols,
               const float (*abc)[3], int steps, double safety, float *work, dm_cuda_stream s);
/* The same with bf16 operands, kernels/cpu/ns.c's bf16 algorithm (every value a product
 * reads rounded to bf16 once, where it is made; f32 accumulation):
 *   Xb = bf16(G / (safety ||G||_F));  for t < steps: A = Xb Xb^T (f32);  Ab = bf16(A);
 *   A = c Ab Ab + b A;  A_ii += a;  Bb = bf16(A);  Xb = bf16(Bb Xb) (f32 into out at the
 *   last step; Xb Bb^T when tall).  work: dm_cuda_ns_bf16_work floats, as above */
size_t dm_cuda_ns_bf16_work(int n, int rows, int cols);
int dm_cuda_ns_bf16(dm_cuda_blas *b, float *out, const float *G, int n, int rows, int cols,
                    const float (*abc)[3], int steps, double safety, float *work,
                    dm_cuda_stream s);
/* the elementwise parts (elementwise.cu): per slice, sumsq[i] = ||G_i||^2 (double, a fixed
 * tree) and X = G / (safety ||G_i||) (0 where the norm is 0); B = b A + a I per slice */
int dm_cuda_ns_scale(float *X, double *sumsq, const float *G, int n, size_t len, double safety,
                     dm_cuda_stream s);
int dm_cuda_ns_linear(float *B, const float *A, int n, int m, float a, float b, dm_cuda_stream s);
/* the sphere retraction (kernels/cpu/retract.h): W[n, len] <- R_i W_i / ||W_i||_F in place, the
 * norm per slice in double; slices with R_i <= 0 or a zero norm left as they are.
 * sumsq: n device doubles of scratch */
int dm_cuda_retract_sphere(float *W, const float *R, int n, size_t len, double *sumsq,
                           dm_cuda_stream s);
/* the Stiefel retraction (kernels/cpu/retract.h, ref/ns_sched.h's schedule): W[n, rows,
 * cols] <- s_i polar(W_i) in place, slices with s_i <= 0 left as they are; the CPU's
 * convergent iteration (Polar Express rounds while the Gram defect is above 0.5, then the
 * quintic until it is below DM_RETRACT_STOP or stalls at the fp32 floor) decided per slice
 * on the device: every stage is issued for every slice at its most rounds and steps, and a
 * slice the stage does not apply to keeps its X; nothing waits for the host. Products as
 * dm_cuda_ns's (f32). work: dm_cuda_retract_stiefel_work floats. */
size_t dm_cuda_retract_stiefel_work(int n, int rows, int cols);
int dm_cuda_retract_stiefel(dm_cuda_blas *b, float *W, const float *s, int n, int rows, int cols,
                            float *work, dm_cuda_stream str);
/* its per-slice steps (elementwise.cu; state: DM_RS_STATE doubles a slice) */
#define DM_RS_STATE 7
int dm_cuda_rs_init(double *st, const float *sc, int n, dm_cuda_stream s);
int dm_cuda_rs_begin(float *X, const float *W, const float *sc, const double *st, size_t len,
                     int n, dm_cuda_stream s);
int dm_cuda_rs_defect(double *st, const float *A, int n, int m, int mode, dm_cuda_stream s);
int dm_cuda_rs_round(double *st, const float *X, const float *A, int n, size_t len, int m,
                     int round, dm_cuda_stream s);
int dm_cuda_rs_quintic(double *st, int n, dm_cuda_stream s);
int dm_cuda_rs_apply(float *X, const float *Y, const double *st, const float *sc, size_t len,
                     int n, int mode, dm_cuda_stream s);

/* ---- the delta-rule core, token-serial (delta.cu): the GPU's oracle of the core ----
 * The recurrence of kernels/ref/delta_ref.c, one block per (b,h) pair, the state in
 * shared memory, every sum in the reference's order. Shapes as dm_delta_dims says (q, k
 * [B,T,H,dk]; v, o, dO [B,T,H,dv]; g [B,T,H,dk] or [B,T,H] (scalar_gate); beta [B,T,H];
 * h0, hT, dhT, dh0 [B,H,dk,dv], each NULL: zero / not written). Takes dk, dv <= 256 and a
 * state that fits the device's shared memory (DM_CUDA_EBADSHAPE otherwise). */
int dm_cuda_delta_serial_fwd(const dm_delta_dims *d, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, const float *h0,
                             float *o, float *hT, dm_cuda_stream s);
/* floats of the backward's workspace: the states before each token, B*H*T*dk*dv */
size_t dm_cuda_delta_serial_bwd_work(const dm_delta_dims *d);
/* writes (overwrites) dq, dk, dv, dg, dbeta, and dh0 when non-NULL */
int dm_cuda_delta_serial_bwd(const dm_delta_dims *d, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, const float *h0,
                             const float *dO, const float *dhT, float *dq, float *dk, float *dv,
                             float *dg, float *dbeta, float *dh0, float *work,
                             dm_cuda_stream s);

/* ---- the delta-rule core, chunked fp32 (delta.cu) ----
 * The same functions as the serial core's, in chunks of 32 tokens (a triangular solve per
 * chunk; every decay the exp of a difference of cumulative log gates, <= 1, so finite
 * whatever the gate; the backward is docs/chunked.md section 6). Shapes as the serial
 * core's; a chunk's tiles (and the forward's state) in shared memory:
 * dm_cuda_delta_chunk_fits says whether both directions fit the device (else
 * DM_CUDA_EBADSHAPE). */
int dm_cuda_delta_chunk_fits(const dm_delta_dims *d);
int dm_cuda_delta_chunk_fwd(const dm_delta_dims *d, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, const float *h0,
                            float *o, float *hT, dm_cuda_stream s);
/* floats of the backward's workspace: every chunk's start state and dh, B*H*(nc+1)*dk*dv
 * (nc = ceil(T/32)) */
size_t dm_cuda_delta_chunk_bwd_work(const dm_delta_dims *d);
/* writes (overwrites) dq, dk, dv, dg, dbeta, and dh0 when non-NULL */
int dm_cuda_delta_chunk_bwd(const dm_delta_dims *d, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, const float *h0,
                            const float *dO, const float *dhT, float *dq, float *dk, float *dv,
                            float *dg, float *dbeta, float *dh0, float *work,
                            dm_cuda_stream s);

/* ---- the delta-rule core, chunked on the tensor cores (delta_tc.cu) ----
 * The same functions, in chunks of 64 tokens in the WY (UT) form, the chunk products on
 * bf16 operands with float sums: a CTA per chunk for the chunk's own work, a CTA per pair
 * and 16 value columns for the states. Takes dk and dv multiples of 16, at most 128, whose
 * tiles fit the device's shared memory (dm_cuda_delta_tc_fits; else DM_CUDA_EBADSHAPE).
 * The forward writes the chunk-start states and u into `saved` (dm_cuda_delta_tc_saved
 * floats) for the backward; either may pass NULL, the work then holds them (and the
 * backward computes them again). work: dm_cuda_delta_tc_work floats. */
int dm_cuda_delta_tc_fits(const dm_delta_dims *d);
size_t dm_cuda_delta_tc_saved(const dm_delta_dims *d);
size_t dm_cuda_delta_tc_work(const dm_delta_dims *d);
int dm_cuda_delta_tc_fwd(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                         const float *g, const float *beta, const float *h0, float *o,
                         float *hT, float *saved, float *work, dm_cuda_stream s);
/* writes (overwrites) dq, dk, dv, dg, dbeta, and dh0 when non-NULL */
int dm_cuda_delta_tc_bwd(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                         const float *g, const float *beta, const float *h0, const float *saved,
                         const float *dO, const float *dhT, float *dq, float *dk, float *dv,
                         float *dg, float *dbeta, float *dh0, float *work, dm_cuda_stream s);

#ifdef __cplusplus
}
#endif
#endif /* DM_KERNELS_CUDA_H */
