/* l2norm.c — L2 normalization of each row (one head-vector per row). */
#include <math.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define L2_PAR_MIN 16384 /* elements below which a parallel region does not pay */

/* one row of each direction, shared by the plain and the SiLU-fused kernels */
static inline float row_fwd(float *yr, const float *xr, int D, float eps) {
    float k = 1.0f / sqrtf(dot8(xr, xr, D) + eps);
    for (int d = 0; d < D; d++) yr[d] = xr[d] * k;
    return k;
}

static inline void row_bwd(float *dxr, const float *dyr, const float *yr, float k, int D) {
    float p = dot8(dyr, yr, D);
    for (int d = 0; d < D; d++) dxr[d] = k * (dyr[d] - p * yr[d]);
}

/* x, y: [R,D]; rn: [R]
 * y = x * rn[r],  rn[r] = 1/sqrt(sum_d x^2 + eps) */
void dm_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps) {
#pragma omp parallel for schedule(static) if ((long)R * D >= L2_PAR_MIN)
    for (int r = 0; r < R; r++)
        rn[r] = row_fwd(y + (size_t)r * D, x + (size_t)r * D, D, eps);
}

/* dy, y, dx: [R,D]
 * dx = rn * (dy - (dy.y) y)    (overwrites; dx may == dy) */
void dm_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn, int R, int D) {
#pragma omp parallel for schedule(static) if ((long)R * D >= L2_PAR_MIN)
    for (int r = 0; r < R; r++)
        row_bwd(dx + (size_t)r * D, dy + (size_t)r * D, y + (size_t)r * D, rn[r], D);
}

/* y = l2norm(silu(x)): SiLU (dm_silu_fwd's arithmetic) into a block of L2_RB rows of y,
 * then the norm of each row in place; the same bits as dm_silu_fwd into a buffer and
 * dm_l2norm_fwd from it, without writing and reading the buffer. (Row by row, the SiLU
 * loop of 64 values ran slower than the two kernels: blocks of rows keep it long.) */
#define L2_RB 16
void dm_silu_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps) {
    int nb = (R + L2_RB - 1) / L2_RB;
#pragma omp parallel for schedule(static) if ((long)R * D >= L2_PAR_MIN)
    for (int b = 0; b < nb; b++) {
        int r0 = b * L2_RB, r1 = r0 + L2_RB < R ? r0 + L2_RB : R;
        const float *xb = x + (size_t)r0 * D;
        float *yb = y + (size_t)r0 * D;
        size_t m = (size_t)(r1 - r0) * D;
        for (size_t i = 0; i < m; i++) yb[i] = xb[i] * sigm(xb[i]);
        for (int r = r0; r < r1; r++) rn[r] = row_fwd(y + (size_t)r * D, y + (size_t)r * D, D, eps);
    }
}

/* its backward: dx = silu'(xs) * l2norm_bwd(dy), row by row (dm_l2norm_bwd, then
 * dm_silu_bwd's arithmetic on the row while it is in cache; the same bits). (Here blocks
 * of rows, as in the forward, measured slower than rows.) */
void dm_silu_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn,
                        const float *xs, int R, int D) {
#pragma omp parallel for schedule(static) if ((long)R * D >= L2_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *dyr = dy + (size_t)r * D, *yr = y + (size_t)r * D, *xr = xs + (size_t)r * D;
        float *dxr = dx + (size_t)r * D;
        row_bwd(dxr, dyr, yr, rn[r], D);
        for (int d = 0; d < D; d++) {
            float xi = xr[d], s = sigm(xi);
            dxr[d] = dxr[d] * s * (1.0f + xi * (1.0f - s));
        }
    }
}
