/* delta_chunk.h — the gated delta-rule core (KDA / GDN) kernels.
 *
 * Shapes and semantics: dm_delta_dims in include/dormouse.h (token-major layout
 * q,k [B,T,H,dk], v,o [B,T,H,dv], g [B,T,H,dk] or [B,T,H], beta [B,T,H],
 * states [B,H,dk,dv]). Math: docs/kda.md sections 4 (recurrence) and 5 (backward).
 *
 * Kernels take their scratch memory as an argument (sizes from the *_work functions,
 * in floats) and the number of threads they may use; (b,h) pairs run in parallel, each
 * pair serially, so results do not depend on the thread count.
 */
#ifndef DM_DELTA_H
#define DM_DELTA_H

#include <stddef.h>
#include "dormouse.h"

/* ==== chunked (fused) core: delta_chunk.c ============================================
 * Same semantics and layout as the reference; docs/chunked.md sections 2-9. fp32 with the
 * in-chunk cumulative gates in double; exact pairwise decays; (b,h) pairs over threads,
 * bitwise independent of nthreads. chunk in {16, 32, 64}; any T (a partial last chunk is
 * ordinary input).
 * saved (optional): what the forward keeps for the backward, dm_delta_chunk_saved()
 * floats: per (b,h) pair the state at the start of every chunk [nc, dk, dv] (nc =
 * ceil(T/chunk)), the corrected values v_new = (I+L)^-1 (beta.v - Kb h) [T, dv] and, for
 * KDA, the intra-chunk matrices [nc, chunk, chunk]: dk*dv/chunk + dv (+ chunk) floats per
 * token and head (192 at dk = dv = chunk = 64).
 * The forward writes it when saved != NULL; the backward uses it when saved != NULL and
 * otherwise reruns the forward scan itself first (same bits either way). */

/* 1 if the chunked kernel handles these dims and chunk size; else 0 with a reason
 * (a static string) in *why (why may be NULL). */
int dm_delta_chunk_supports(const dm_delta_dims *d, int chunk, const char **why);
/* Floats of the saved buffer for these dims: B*H*(nc*dk*dv + T*dv [+ nc*chunk^2 for KDA]). */
size_t dm_delta_chunk_saved(const dm_delta_dims *d, int chunk);
/* Scratch sizes in floats (nthreads slices; 64-byte aligned work is fastest). */
size_t dm_delta_chunk_fwd_work(const dm_delta_dims *d, int chunk, int nthreads);
size_t dm_delta_chunk_bwd_work(const dm_delta_dims *d, int chunk, int nthreads);

/* o = forward(q,k,v,g,beta,h0); hT and saved written when non-NULL; h0 NULL = zero state. */
void dm_delta_chunk_fwd(const dm_delta_dims *d, int chunk, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        float *o, float *hT, float *saved, float *work, int nthreads);
/* Backward, same outputs as dm_delta_ref_bwd (overwrites dq, dk, dv, dg, dbeta; dh0 when
 * non-NULL); saved from dm_delta_chunk_fwd or NULL. */
void dm_delta_chunk_bwd(const dm_delta_dims *d, int chunk, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        const float *saved, const float *dO, const float *dhT, float *dq,
                        float *dk, float *dv, float *dg, float *dbeta, float *dh0, float *work,
                        int nthreads);
/* ==== end of the chunked section ==================================================== */

#endif /* DM_DELTA_H */
