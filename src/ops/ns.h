/* ns.h — the arguments of Muon's matrix ops (ns.c): Newton–Schulz (ns, ns_bf16) and the
 * retractions (retract). */
#ifndef DM_OPS_NS_H
#define DM_OPS_NS_H

typedef struct {
    float *out;
    const float *G;
    int n, rows, cols, s, stack;
    int t;           /* ns: the step, or -1: the whole iteration */
    float *work;     /* dm_ns_work floats (ns_bf16: dm_ns_work_bf16); one step's scratch:
                        X0 in the first n rows*cols floats, then A and B per slice */
    int prec;        /* the precision asked for the products: DM_PRECISION_* (ns_bf16:
                        bf16, which Muon calls only where its policy has bf16 NS) */
} dm_ns_args;

typedef struct {
    float *out;
    const float *W, *c; /* c: the radii (sphere) or the scales (stiefel) */
    int n, rows, cols, stiefel, stack;
    float *work;
} dm_retract_args;

#endif
