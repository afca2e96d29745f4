/* delta.h — the delta-rule core's arguments (delta.c; shapes: dm_delta_dims, dormouse.h).
 * work and nthreads are the cpu backend's: its scratch (sized by dm_ops_delta_work, which
 * asks the backend) and the threads it runs the (b, h) pairs on. */
#ifndef DM_OPS_DELTA_H
#define DM_OPS_DELTA_H

#include "dormouse.h"

typedef struct {
    const dm_delta_dims *d;
    const float *q, *k, *v, *g, *beta, *h0;
    float *o, *hT, *saved;    /* fwd (saved: the chunked path's state for the backward) */
    const float *saved_in;    /* bwd: the forward's saved state, or NULL */
    const float *dO, *dhT;    /* bwd */
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;
    float *work;
    int nthreads;
} dm_delta_args;

#endif
