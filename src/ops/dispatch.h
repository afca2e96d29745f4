/* dispatch.h — the dispatch guard (DESIGN.md sections 1 and 4). Every call of an op with a
 * fused kernel goes through here: the fused kernel when the setting allows it and the
 * kernel supports the call (shape, chunk size; fp32 CPU is the only dtype and backend),
 * else the reference — and every choice is counted per op and direction, a declined
 * call with its reason. In verify mode both paths run on each call and the largest
 * relative difference (RMS of the difference / RMS of the reference) of the op's outputs
 * and of every input gradient is recorded: the adjoint equivalence.
 *
 *   op          fused kernel                      reference
 *   delta       dm_delta_chunk_* (delta_chunk.c)  dm_delta_ref_* (delta_ref.c)
 *   rmsnorm     dm_rmsnorm_*  (rmsnorm.c)         dm_rmsnorm_ref_* (norm_ref.c, composed)
 *   gatednorm   dm_gatednorm_* (gatednorm.c)      dm_gatednorm_ref_* (norm_ref.c, composed)
 */
#ifndef DM_DISPATCH_H
#define DM_DISPATCH_H

#include <stddef.h>
#include <stdio.h>

#include "ops/atlas.h"
#include "dormouse.h"

enum { DM_OPK_DELTA = 0, DM_OPK_RMSNORM, DM_OPK_GATEDNORM, DM_OPK_COUNT };
#define DM_VERIFY_BOUND 1e-5 /* fp32 fused vs reference, relative RMS */

typedef struct {
    int op, bwd;
    const char *reason; /* static string */
    long n;
} dm_declined;

typedef struct dm_dispatch {
    int kda_impl;  /* DM_IMPL_* */
    int norm_impl; /* DM_IMPL_AUTO | DM_IMPL_CHUNKED (= fused) | DM_IMPL_REFERENCE */
    int chunk;
    int verify;    /* run both paths on every call while set */
    long fused[DM_OPK_COUNT][2], total[DM_OPK_COUNT][2];
    dm_declined declined[16];
    int n_declined;
    double verify_max;   /* largest relative difference since the last read */
    char verify_what[64];
    long verify_calls;
    float *vbuf;         /* verify scratch (grown on demand, kept) */
    size_t vcap;
    dm_atlas *atlas;     /* op timing, or NULL */
} dm_dispatch;

void dm_dispatch_init(dm_dispatch *dp, const dm_config *c);
void dm_dispatch_free(dm_dispatch *dp);
/* "fused delta=412/412 ... | declined: ..." */
void dm_dispatch_report(const dm_dispatch *dp, char *buf, size_t n);

/* Would the delta op run chunked for dims d? (0 with the reason otherwise.) */
int dm_dispatch_delta_fused(const dm_dispatch *dp, const dm_delta_dims *d, const char **why);

/* The ops. Shapes and semantics as the kernels (kernels.h, delta.h). `saved` is the
 * chunked forward's buffer for the backward (dm_delta_chunk_saved floats) or NULL;
 * `work` holds max(dm_delta_ref_bwd_work, dm_delta_chunk_{fwd,bwd}_work) floats;
 * norm `scratch` holds 2 * rows * cols floats (the composed reference's intermediates). */
void dm_op_delta_fwd(dm_dispatch *dp, const dm_delta_dims *d, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     float *o, float *hT, float *saved, float *work, int nthreads);
void dm_op_delta_bwd(dm_dispatch *dp, const dm_delta_dims *d, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     const float *saved, const float *dO, const float *dhT, float *dq,
                     float *dk, float *dv, float *dg, float *dbeta, float *dh0, float *work,
                     int nthreads);
void dm_op_rmsnorm_fwd(dm_dispatch *dp, float *y, float *rstd, const float *x, const float *w,
                       int N, int C, float eps, float *scratch);
void dm_op_rmsnorm_bwd(dm_dispatch *dp, float *dx, float *dw, const float *dy, const float *x,
                       const float *w, const float *rstd, int N, int C, float *scratch);
void dm_op_gatednorm_fwd(dm_dispatch *dp, float *y, float *rstd, const float *o, const float *z,
                         const float *w, int R, int D, float eps, int act, float *scratch);
void dm_op_gatednorm_bwd(dm_dispatch *dp, float *do_, float *dz, float *dw, const float *dy,
                         const float *o, const float *z, const float *w, const float *rstd,
                         int R, int D, int act, float *scratch);

#endif
