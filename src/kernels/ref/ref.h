/* ref.h — the reference kernels: the oracles of the fast kernels (kernels/cpu), written
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

#endif /* DM_KERNELS_REF_H */
