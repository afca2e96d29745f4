/* retract.h — retraction of Muon matrices onto a manifold (docs/muon.md section 7).
 *
 * Weights are a STACK W[n, rows, cols], float32, row-major, slices contiguous (a plain
 * matrix is n = 1; head-wise Q/K is [n_head, head_dim, d_model]); every slice is its own
 * manifold point with its own constant, fixed at init:
 *   R[i] = ||W0_i||_F                     (sphere radius)
 *   s[i] = R[i] / sqrt(min(rows, cols))   (Stiefel scale: s * U V^T has norm R)
 * A slice whose constant is 0 (zero init) is skipped: left exactly as it is.
 *
 *   sphere:   W_i <- R_i * W_i / ||W_i||_F (a zero slice stays zero)   O(rows*cols)
 *   stiefel:  W_i <- s_i * polar(W_i), by a CONVERGENT iteration (never NS5):
 *             X = W_i / s_i;  A = X X^T (X^T X when tall);  delta = ||A - I||_F
 *             if delta > 0.5: Polar Express, 8 steps, from X / (1.01 ||X||_F)
 *             (up to 3 rounds while delta > 0.5; later rounds rescale by the Gershgorin
 *             bound, for singular values below PE's 1e-3 design range, e.g. a square
 *             Gaussian init), then the quintic X <- (15/8 I - 5/4 A + 3/8 A^2) X,
 *             recomputing A, until delta <= DM_RETRACT_STOP or the fp32 floor (a few
 *             steps; cubic convergence);  W_i = s_i X.
 *             Result: ||W W^T / s^2 - I||_F <= 1e-4 (W^T W when tall), measured ~1e-6.
 *             Cost per iteration: 4 m^2 k + 2 m^3, m = min, k = max(rows, cols).
 *
 * Threads as in dm_ns (ns.h): one slice per OpenMP thread for a stack, sgemm-threaded
 * for a single slice; results are bitwise independent of the thread count.
 * No allocation: the Stiefel retraction takes `work` of dm_retract_stiefel_work floats.
 */
#ifndef DM_KERNELS_RETRACT_H
#define DM_KERNELS_RETRACT_H

#include <stddef.h>

#include "backends/cpu/kernels/ns.h"

#define DM_RETRACT_TOL 1e-4f  /* ||A - I||_F a retracted slice must reach (else counted) */

/* R[n] = ||W0_i||_F; s[n] = R / sqrt(min(rows, cols)) (s may be NULL, R may be NULL). */
void dm_retract_init(float *R, float *s, const float *W0, int n, int rows, int cols);

/* W[n, rows, cols] <- R_i W_i / ||W_i||_F, in place; slices with R_i <= 0 (zero init) or
 * ||W_i||_F = 0 are left as they are. */
void dm_retract_sphere(float *W, const float *R, int n, int rows, int cols);

/* The same into out[n, rows, cols] (out == W: in place; else they do not overlap, and a
 * skipped slice is copied). */
void dm_retract_sphere_run(float *out, const float *W, const float *R, int n, int rows,
                           int cols);

/* Scratch floats for dm_retract_stiefel: n * (rows*cols + 2*min(rows,cols)^2) (as dm_ns_work;
 * only min(n, threads) slots are in use at a time). */
size_t dm_retract_stiefel_work(int n, int rows, int cols);

/* W[n, rows, cols] <- s_i polar(W_i), in place; slices with s_i <= 0 skipped.
 * resid (optional, [n]): the final ||A - I||_F of each slice (fp32 Gram; 0 if skipped).
 * Returns the number of slices left above DM_RETRACT_TOL (0 on success; a rank-deficient
 * or zero slice cannot reach it and is counted, never NaN). */
int dm_retract_stiefel(float *W, const float *s, int n, int rows, int cols, float *work,
                       float *resid);

/* The stack path for slices by pointer, even n = 1 (as dm_ns_stack): W[i] <- s[i]
 * polar(W[i]), each with single-threaded GEMMs, the slices in parallel; bitwise what the
 * slice gets inside a dm_retract_stiefel stack. work: dm_retract_stiefel_work(n, rows,
 * cols). Returns the slices left above DM_RETRACT_TOL. */
int dm_retract_stiefel_stack(float *const *W, const float *s, int n, int rows, int cols,
                             float *work);

/* The general form the op layer runs (ops/optim_ops.h): out[n, rows, cols] = s_i
 * polar(W_i) (out == W: in place; else they do not overlap, and a skipped slice is
 * copied); stack = 1 forces the stack path for any n (dm_retract_stiefel_stack's bits);
 * bk: the Gram and polynomial products (NULL: dm_ns_gram and dm_ns_poly; the reference
 * passes its own, ref/optim_ref.h). resid as dm_retract_stiefel. */
int dm_retract_stiefel_run(float *out, const float *W, const float *s, int n, int rows,
                           int cols, float *work, float *resid, int stack,
                           const dm_ns_blocks *bk);

#endif /* DM_KERNELS_RETRACT_H */
