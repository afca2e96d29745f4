/* normuon.h — NorMuon's neuron-wise normalisation of Muon's orthogonalised update, and the
 * cautious form of the decoupled weight decay (normuon.c). Pure functions on float arrays;
 * references in kernels/ref/normuon_ref.h.
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

/* Cautious decoupled weight decay: decay only where the update u and the weight agree in
 * sign (u w >= 0), where both push w towards zero:
 *   wo = (u w >= 0 ? w decay : w) - step u            (decay = 1 - lr wd)
 * where the mask holds it is Muon's step bit for bit (dm_muon_apply).  w, u, wo: [n] */
void dm_muon_apply_cautious(float *wo, const float *w, const float *u, size_t n, float decay,
                            float step);

/* AdamW (optim.h's dm_adamw) with the decay cautious: the update is
 * u = (m1' c1) / (sqrt(m2' c2) + eps) and p' = (u p >= 0 ? p decay : p) - lr u; where the
 * mask holds it is dm_adamw bit for bit. */
void dm_adamw_cautious(float *po, float *m1o, float *m2o, const float *p, const float *g,
                       const float *m1, const float *m2, size_t n, float lr, float wd, float b1,
                       float b2, float eps, long t, float gscale);

#endif
