/* act.c — elementwise activations (SiLU, sigmoid, SwiGLU) and y += x.
 * All arrays hold n elements. Backward kernels allow dx == dy (in place): each element
 * is read before it is written. */
#include <math.h>
#include <stdint.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define ACT_PAR_MIN 65536 /* elements below which a parallel region does not pay */

/* y = x * sigmoid(x) */
void dm_silu_fwd(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = x[i] * sigm(x[i]);
}

/* dx = dy * s * (1 + x (1 - s)),  s = sigmoid(x) */
void dm_silu_bwd(float *dx, const float *dy, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float xi = x[i], s = sigm(xi);
        dx[i] = dy[i] * s * (1.0f + xi * (1.0f - s));
    }
}

/* y = sigmoid(x) */
void dm_sigmoid_fwd(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = sigm(x[i]);
}

/* dx = dy * y * (1 - y)   (from the output y) */
void dm_sigmoid_bwd(float *dx, const float *dy, const float *y, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

/* h = silu(a) * b; with hb (may be NULL) = bf16(h), block by block while a block of h is
 * in cache */
#define ACT_BLOCK 1024
void dm_swiglu_fwd_yb(float *h, uint16_t *hb, const float *a, const float *b, size_t n) {
    size_t nb = (n + ACT_BLOCK - 1) / ACT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (size_t k = 0; k < nb; k++) {
        size_t i0 = k * ACT_BLOCK, i1 = i0 + ACT_BLOCK < n ? i0 + ACT_BLOCK : n;
        for (size_t i = i0; i < i1; i++) h[i] = a[i] * sigm(a[i]) * b[i];
        if (hb) dm_bf16_run(hb + i0, h + i0, i1 - i0);
    }
}

void dm_swiglu_fwd(float *h, const float *a, const float *b, size_t n) {
    dm_swiglu_fwd_yb(h, NULL, a, b, n);
}

/* da = dh * b * s * (1 + a (1 - s));  db = dh * silu(a)   (da or db may alias dh);
 * with dab = bf16(da), dbb = bf16(db) (either NULL: none), block by block while a block of
 * da and db is in cache: the copies the products of W_gate and W_up read */
void dm_swiglu_bwd_yb(float *da, float *db, uint16_t *dab, uint16_t *dbb, const float *dh,
                      const float *a, const float *b, size_t n) {
    size_t nb = (n + ACT_BLOCK - 1) / ACT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (size_t k = 0; k < nb; k++) {
        size_t i0 = k * ACT_BLOCK, i1 = i0 + ACT_BLOCK < n ? i0 + ACT_BLOCK : n;
        for (size_t i = i0; i < i1; i++) {
            float ai = a[i], bi = b[i], g = dh[i], s = sigm(ai);
            da[i] = g * bi * s * (1.0f + ai * (1.0f - s));
            db[i] = g * ai * s;
        }
        if (dab) dm_bf16_run(dab + i0, da + i0, i1 - i0);
        if (dbb) dm_bf16_run(dbb + i0, db + i0, i1 - i0);
    }
}

void dm_swiglu_bwd(float *da, float *db, const float *dh, const float *a, const float *b,
                   size_t n) {
    dm_swiglu_bwd_yb(da, db, NULL, NULL, dh, a, b, n);
}

/* y += x */
void dm_add_inplace(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 4 * ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
