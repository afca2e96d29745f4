/* l2norm.c — L2 normalization of each row (one head-vector per row). */
#include <math.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vmath.h"

#define L2_PAR_MIN 16384 /* elements below which a parallel region does not pay */

/* x, y: [R,D]; rn: [R]
 * y = x * rn[r],  rn[r] = 1/sqrt(sum_d x^2 + eps) */
void dm_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps) {
#pragma omp parallel for schedule(static) if ((long)R * D >= L2_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * D;
        float *yr = y + (size_t)r * D;
        float k = 1.0f / sqrtf(dot8(xr, xr, D) + eps);
        rn[r] = k;
        for (int d = 0; d < D; d++) yr[d] = xr[d] * k;
    }
}

/* dy, y, dx: [R,D]
 * dx = rn * (dy - (dy.y) y)    (overwrites; dx may == dy) */
void dm_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn, int R, int D) {
#pragma omp parallel for schedule(static) if ((long)R * D >= L2_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *dyr = dy + (size_t)r * D, *yr = y + (size_t)r * D;
        float *dxr = dx + (size_t)r * D;
        float p = dot8(dyr, yr, D), k = rn[r];
        for (int d = 0; d < D; d++) dxr[d] = k * (dyr[d] - p * yr[d]);
    }
}
