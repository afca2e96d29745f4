/* pointwise.h — the elementwise ops' arguments (pointwise.c): SiLU, sigmoid, SwiGLU, the
 * forget gate and the residual add. For the op layer and the backends' implementations. */
#ifndef DM_OPS_POINTWISE_H
#define DM_OPS_POINTWISE_H

#include <stddef.h>

/* silu, sigmoid: y[n] = f(x); backward dx = dy * f'(.) from x (silu) or from y (sigmoid) */
typedef struct {
    float *y;
    const float *x;
    float *dx;
    const float *dy;
    size_t n;
} dm_unary_args;

/* swiglu: h[n] = silu(a) b;  backward da, db from dh */
typedef struct {
    float *h;
    const float *a, *b;
    float *da, *db;
    const float *dh;
    size_t n;
} dm_swiglu_args;

/* the forget gate: g[N,H,Cg] = gate(f; A_log[H], dt_bias[H,Cg]) */
typedef struct {
    float *g;
    const float *f, *A_log, *dt_bias;
    float *df, *dA_log, *ddt_bias;
    const float *dg;
    int N, H, Cg;
    float lb;
} dm_gate_args;

/* the residual add y[n] += x */
typedef struct {
    float *y;
    const float *x;
    size_t n;
} dm_add_args;

#endif
