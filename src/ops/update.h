/* update.h — the arguments of the optimizer's elementwise ops and reductions (update.c).
 * The updates run in place: the args keep the output pointers apart from the inputs
 * (equal in the call), so verify mode can give the second run outputs of its own. */
#ifndef DM_OPS_UPDATE_H
#define DM_OPS_UPDATE_H

#include <stddef.h>

/* gscale: the gradient's clipping factor, one float in the backend's memory (grad_norm's
 * output: the step's clipping stays on the device); NULL: 1. hyper: the step's values,
 * DM_ADAM_HYPER floats in the backend's memory (dm_adam_hyper), read by the kernel, not
 * passed: a step captured once runs with the values put before each replay. */
typedef struct {
    float *po, *m1o, *m2o;
    const float *p, *g, *m1, *m2;
    size_t n;
    const float *hyper;
    float b1, b2, eps;
    const float *gscale;
    int cautious; /* 1: the decay only where the update and the parameter agree in sign */
} dm_adamw_args;

typedef struct {
    float *momo, *u;
    const float *mom, *g;
    size_t n;
    float beta;
    const float *gscale;
} dm_mom_args;

/* ds: the step's decay and step size, DM_MUON_HYPER floats in the backend's memory
 * (dm_muon_hyper), read by the kernel as adamw's hyper */
typedef struct {
    float *wo;
    const float *w, *x;
    size_t n;
    const float *ds;
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

/* grad_norm: ||g||_2 into norm and, when gscale != NULL, the clipping factor of the
 * threshold clip there (dm_clip_scale); both in the backend's memory */
typedef struct {
    double *norm;
    float *gscale;
    const float *g;
    size_t n;
    float clip;
} dm_gnorm_args;

/* Gradient clipping: the factor of a gradient of norm `norm` under threshold clip (0: no
 * clipping); a norm that is not a number leaves the gradient as it is. */
static inline float dm_clip_scale(double norm, float clip) {
    return clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f;
}

typedef struct {
    float *out;
    const float *acc, *g;
    size_t n;
    int first, A;
} dm_sum_args;

#endif
