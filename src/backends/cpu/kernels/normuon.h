/* normuon.h — NorMuon's neuron-wise normalisation of Muon's orthogonalised update
 (normuon.c; the cautious weight decay is a flag of optim.h's updates). A pure function on
 * float arrays; its reference in ref/normuon_ref.h.
 *
 * Every reduction runs in a fixed order (a row's sum on one thread, the rows' sums in row
 * order): the bits do not depend on the thread count.
 */
#ifndef DM_KERNELS_NORMUON_H
#define DM_KERNELS_NORMUON_H

#include <stddef.h>

/* NorMuon on n stacked slices x[n, rows, cols] (in place; rows are output neurons), with
 * the second moment v[n, rows] (fp32, updated in place):
 *   m_r  = mean_c x[r,c]^2                          (per row of each slice)
 *   v_r' = beta2 v_r + (1 - beta2) m_r
 *   y    = x[r,c] / (sqrt(v_r') + eps)
 *   x'   = y ||x||_F / (||y||_F + eps)              (per slice: Muon's update norm kept)
 * Sums in double, rows in order; a zero slice stays zero (v decays). work: [rows] doubles. */
void dm_normuon(float *x, float *v, int n, int rows, int cols, float beta2, float eps,
                double *work);

#endif
