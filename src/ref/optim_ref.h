/* optim_ref.h — the references of the optimizer's kernels (backends/cpu/kernels/optim.h, ns.h,
 * retract.h): the same maps written plainly, every sum and product in double, each output
 * rounded to float once. The op layer runs them beside the fast kernels in verify mode.
 * Shapes, in-place rules and arguments are those of the kernels they check. */
#ifndef DM_KERNELS_OPTIM_REF_H
#define DM_KERNELS_OPTIM_REF_H

#include <stddef.h>

#include "ref/ns_sched.h"

void dm_adamw_ref(float *po, float *m1o, float *m2o, const float *p, const float *g,
                  const float *m1, const float *m2, size_t n, float lr, float decay, float b1,
                  float b2, float eps, float c1, float c2, float gscale, int cautious);
void dm_momentum_ref(float *momo, float *u, const float *mom, const float *g, size_t n,
                     float beta, float gscale);
void dm_muon_apply_ref(float *wo, const float *w, const float *x, size_t n, float decay,
                       float step, int cautious);
/* the squares summed in index order, serially */
double dm_grad_norm2_ref(const float *g, size_t n);
void dm_grad_add_ref(float *acco, const float *acc, const float *g, size_t n, int first);
void dm_grad_mean_ref(float *out, const float *acc, size_t n, int A);

/* One step of Newton–Schulz (dm_ns_step's contract) with the products in double: at
 * t = 0, X0 = G / (safety ||G||_F) into x0; then A = X X^T (X^T X when tall),
 * B = a I + b A + c A^2, Y = B X (X B^T when tall), A and B rounded to float between the
 * products. A zero slice gives zeros. Slices in parallel. */
void dm_ns_ref_step(float *Y, const float *X, int n, int rows, int cols, dm_ns_sched s,
                    int t, float *x0, float *ab);
/* The Gram matrix and the polynomial step of ns.h's building blocks in double (serial is
 * ignored): the products the reference Stiefel retraction runs (dm_retract_stiefel_run). */
extern const dm_ns_blocks dm_ns_ref_blocks;
/* The sphere retraction (retract.h) with the norm summed in index order. */
void dm_retract_sphere_ref(float *out, const float *W, const float *R, int n, int rows,
                           int cols);

#endif
