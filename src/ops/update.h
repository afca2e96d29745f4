/* update.h — the arguments of the optimizer's elementwise ops and reductions (update.c).
 * The updates run in place: the args keep the output pointers apart from the inputs
 * (equal in the call), so verify mode can give the second run outputs of its own. */
#ifndef DM_OPS_UPDATE_H
#define DM_OPS_UPDATE_H

#include <stddef.h>

typedef struct {
    float *po, *m1o, *m2o;
    const float *p, *g, *m1, *m2;
    size_t n;
    float lr, wd, b1, b2, eps, gscale;
    long t;
    int cautious; /* 1: the decay only where the update and the parameter agree in sign */
} dm_adamw_args;

typedef struct {
    float *momo, *u;
    const float *mom, *g;
    size_t n;
    float beta, gscale;
} dm_mom_args;

typedef struct {
    float *wo;
    const float *w, *x;
    size_t n;
    float decay, step;
    int cautious; /* 1: the decay only where x and w agree in sign */
} dm_apply_args;

/* NorMuon on n stacked slices x[n, rows, cols] with their second moments v[n, rows]
 * (backends/cpu/kernels/normuon.h: dm_normuon); work: 2 rows floats of scratch (rows
 * doubles) in the backend's memory */
typedef struct {
    float *xo, *vo;
    const float *x, *v;
    float *work;
    int n, rows, cols;
    float beta2, eps;
} dm_normuon_args;

typedef struct {
    double *norm;
    const float *g;
    size_t n;
} dm_gnorm_args;

typedef struct {
    float *out;
    const float *acc, *g;
    size_t n;
    int first, A;
} dm_sum_args;

#endif
