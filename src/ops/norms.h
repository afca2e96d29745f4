/* norms.h — the norms' arguments (norms.c): RMSNorm, the per-head gated RMSNorm and the
 * per-head L2 norm share one struct. */
#ifndef DM_OPS_NORMS_H
#define DM_OPS_NORMS_H

/* x, y: [R,C]; w: [C]; rstd: [R]; z: [R,C] (gated only); scratch: 2*R*C floats */
typedef struct {
    float *y, *rstd;
    const float *x, *z, *w;
    float eps;
    int act;                    /* gated: DM_GATE_*; l2norm: 1 = SiLU before the norm */
    const float *xs;            /* l2norm bwd with SiLU before it: the SiLU's input */
    float *dx, *dz, *dw;        /* bwd */
    const float *dy, *rstd_in;
    int R, C;
    float *scratch;
} dm_norm_args;

#endif
