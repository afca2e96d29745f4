/* ns.h — Newton–Schulz orthogonalization for Muon (docs/muon.md sections 3-6).
 *
 * Input is a STACK of n matrices ("slices"), float32, row-major, slices contiguous:
 *   G[n, rows, cols]:  slice i is G + i*rows*cols, element (r, c) at [r*cols + c].
 * A single matrix is the stack of one (n = 1). Head-wise Q/K: W_q [H*dh, d] stored
 * [out, in] is already the stack [H, dh, d] (a free reshape).
 *
 * Each slice is orthogonalized on its own: out_i ~= polar(G_i) = U_i V_i^T, with
 *   X0 = G_i / (safety * ||G_i||_F)              (Frobenius norm PER SLICE, in double;
 *                                                  a zero slice gives a zero output)
 *   repeat over the schedule's (a, b, c):  A = X X^T;  X <- (a I + b A + c A^2) X
 * Each singular value x = sigma/(safety ||G_i||_F) goes through p(x) = a x + b x^3 + c x^5.
 * Tall slices (rows > cols) are handled as their transpose (Gram A = X^T X and
 * X <- X (a I + b A + c A^2)), so the Gram matrix is always m x m, m = min(rows, cols).
 *
 * Every matrix product goes through dm_gemm / dm_gemm_serial (kernels.h). Threads (one
 * pool: sgemm runs single-threaded inside our OpenMP regions):
 *   - a lone BIG slice (per-iteration FLOPs >= DM_NS_THREAD_MIN_FLOPS): its GEMMs are
 *     tiled over the threads by dm_gemm (tiles fixed by the shape);
 *   - anything else (a stack, or a lone small slice): slices in parallel, one per OpenMP
 *     thread, each GEMM a single-threaded sgemm (dm_gemm_serial).
 * Which path runs depends on (n, rows, cols) only, never on the thread count, so results
 * are bitwise independent of the thread count. A slice's result depends on its data, its
 * shape, the schedule and the path: batched == per-slice loop == in place, bitwise,
 * whenever both take the same path (every slice of a stack, and every lone small slice:
 * all head-wise Q/K shapes up to [*, 64, 768]); a lone big slice (tiled GEMMs) differs
 * from the same slice inside a stack at rounding level (~1e-7).
 *
 * No allocation: the caller passes `work` of dm_ns_work(...) floats.
 * `out` may equal `G` (in place); otherwise they must not overlap.
 */
#ifndef DM_KERNELS_NS_H
#define DM_KERNELS_NS_H

#include <stddef.h>

#include "dormouse.h"
#include "ref/ns_sched.h"

/* Per-iteration FLOPs (4 m^2 k + 2 m^3) from which a lone slice lets sgemm thread:
 * [64, 256] = 4.7e6 and [64, 768] = 1.3e7 stay single-threaded; [256, 256] = 1.0e8 threads. */
#define DM_NS_THREAD_MIN_FLOPS 3.2e7
int dm_ns_slice_threaded(int rows, int cols); /* 1 if a lone slice of this shape threads */

/* Scratch floats for dm_ns on a [n, rows, cols] stack: n * dm_ns_slice_work(rows, cols)
 * (sized by n, so it never depends on the thread count; min(n, threads) slots are used). */
size_t dm_ns_work(int n, int rows, int cols);
/* Scratch floats for one slice: rows*cols + 2*m*m, m = min(rows, cols). */
size_t dm_ns_slice_work(int rows, int cols);

/* out[n, rows, cols] = NS(G[n, rows, cols]) slice by slice.  work: dm_ns_work(n,rows,cols) */
void dm_ns(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
           float *work);

/* The same over n slices of one shape that are NOT contiguous (e.g. W_f1 of every layer):
 * out[i], G[i] point at [rows, cols] matrices; out[i] == G[i] allowed; work as dm_ns_work. */
void dm_ns_many(float *const *out, const float *const *G, int n, int rows, int cols,
                dm_ns_sched s, float *work);

/* The same with every GEMM's operands rounded to bf16 (f32 accumulation), through
 * oneDNN's bf16 matmul (dnn, a context the caller owns). Each operand is rounded once,
 * where it is made: X0 = bf16(G / (safety ||G||_F)) in the pass that scales it; per step
 * A = X X^T in f32, Ab = bf16(A), B = c Ab Ab + b A + a I in f32 (the product's output
 * scale and sum post-op fold the linear term in), Bb = bf16(B), and the next X = bf16(Bb X)
 * written in bf16 by the product itself (the last step's in f32 to out). work:
 * dm_ns_work_bf16(n, rows, cols) floats. Same threads and the same bitwise independence of
 * the thread count as dm_ns. */
struct dm_onednn;
size_t dm_ns_work_bf16(int n, int rows, int cols);
void dm_ns_bf16(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
                float *work, struct dm_onednn *dnn);

/* The stack path for any n, even 1: every slice with single-threaded GEMMs, the slices in
 * parallel — bitwise what each slice gets inside a dm_ns (dnn NULL) or dm_ns_bf16 (dnn
 * given) stack of any size, wherever its neighbours are. Slices by pointer (out[i] == G[i]
 * allowed). work: dm_ns_work(n, rows, cols) floats, or dm_ns_work_bf16 with dnn. The
 * sharded Muon (muon.c) runs a rank's share of head slices and small matrices this way. */
void dm_ns_stack(float *const *out, const float *const *G, int n, int rows, int cols,
                 dm_ns_sched s, float *work, struct dm_onednn *dnn);

/* One slice: serial = 1 runs every GEMM single-threaded on the calling thread, 0 tiles
 * them over the threads (dm_gemm). out[rows, cols], G[rows, cols],
 * work: dm_ns_slice_work(rows, cols). dm_ns calls this. */
void dm_ns_slice(float *out, const float *G, int rows, int cols, dm_ns_sched s, float *work,
                 int serial);

/* FLOPs of dm_ns on the stack: n * steps * (4 m^2 k + 2 m^3), m = min, k = max(rows, cols)
 * (X X^T 2m^2k, A^2 2m^3, B X 2m^2k; the O(m^2 + mk) elementwise work is not counted). */
double dm_ns_flops(int n, int rows, int cols, dm_ns_sched s);

/* The same as dm_ns (dnn NULL) or dm_ns_bf16 (dnn given) on a contiguous stack, with
 * stack = 1 forcing the stack path for any n (dm_ns_stack's bits, slices contiguous): the
 * form the op layer runs (ops/optim_ops.h). */
void dm_ns_run(float *out, const float *G, int n, int rows, int cols, dm_ns_sched s,
               float *work, struct dm_onednn *dnn, int stack);
/* One step t (0 <= t < dm_ns_sched_steps(s)) of dm_ns_run's fp32 path on a contiguous
 * stack: Y[n, rows, cols] = X_{t+1} from X = X_t (at t = 0, X = G: X0 is formed in
 * x0[n, rows, cols] first). Step by step the same arithmetic on each slice as dm_ns_run
 * (dnn NULL) with the same stack, so the steps in turn give its bits (X_5 = its output);
 * a zero slice gives zeros throughout. Y must overlap neither x0 nor ab, and X only when
 * Y == X at t = 0 (in place); ab: 2 m^2 floats per slice, m = min(rows, cols). The op
 * layer runs NS this way, each step an op of its own (ops/optim_ops.h). */
void dm_ns_step(float *Y, const float *X, int n, int rows, int cols, dm_ns_sched s, int t,
                float *x0, float *ab, int stack);
/* 1 when dm_ns_run tiles the GEMMs of its one slice over the threads (a lone big slice),
 * 0 when it runs the stack path (single-threaded GEMMs, slices in parallel). */
int dm_ns_tiled(int n, int rows, int cols, int stack);

/* ---- building blocks (one slice; also used by the Stiefel retraction) ----
 * Gram: A[m, m] = X X^T if rows <= cols, else X^T X.          X: [rows, cols] */
void dm_ns_gram(float *A, const float *X, int rows, int cols, int serial);
/* One odd-polynomial step: with P = a I + b A + c A^2 (B[m, m] receives P),
 *   Y = P X (rows <= cols)  or  Y = X P^T (rows > cols).   Y, X: [rows, cols]; Y != X. */
void dm_ns_poly(float *Y, const float *X, const float *A, float *B, int rows, int cols,
                float a, float b, float c, int serial);
/* Frobenius norm of x[len], summed in double in a fixed order (thread-count independent). */
double dm_frob_norm(const float *x, size_t len);

#endif /* DM_KERNELS_NS_H */
