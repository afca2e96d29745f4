/* delta.h — the delta-rule core's arguments (delta.c; shapes: dm_delta_dims, dormouse.h).
 * Only the math: the scratch an implementation needs is the op layer's (dm_ops.scratch,
 * sized by its backend: dm_ops_delta_work) and its threads are the policy's
 * (dm_ops_threads). */
#ifndef DM_OPS_DELTA_H
#define DM_OPS_DELTA_H

#include "dormouse.h"

typedef struct {
    const dm_delta_dims *d;
    int prec;                 /* the precision asked (dm_precision): bf16 lets a backend run
                                 the chunk products on bf16 operands */
    const float *q, *k, *v, *g, *beta, *h0;
    float *o, *hT, *saved;    /* fwd (saved: the chunked path's state for the backward) */
    const float *saved_in;    /* bwd: the forward's saved state, or NULL */
    const float *dO, *dhT;    /* bwd */
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;
} dm_delta_args;

#endif
