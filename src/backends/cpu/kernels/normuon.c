/* normuon.c — NorMuon's normalisation (normuon.h). */
#include "backends/cpu/kernels/normuon.h"

#include <math.h>

void dm_normuon(float *x, float *v, int n, int rows, int cols, float beta2, float eps,
                double *work) {
    for (int s = 0; s < n; s++) {
        float *xs = x + (size_t)s * rows * cols, *vs = v + (size_t)s * rows;
        /* per row (one thread a row): its sum of squares, the moment, the row scaled */
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > 1 << 15)
        for (int r = 0; r < rows; r++) {
            float *xr = xs + (size_t)r * cols;
            double ss = 0;
            for (int c = 0; c < cols; c++) ss += (double)xr[c] * xr[c];
            float vr = beta2 * vs[r] + (1.0f - beta2) * (float)(ss / cols);
            float k = 1.0f / (sqrtf(vr) + eps);
            vs[r] = vr;
            work[r] = ss;
            for (int c = 0; c < cols; c++) xr[c] *= k;
        }
        /* the slice's norms before and after, the rows in order */
        double before = 0, after = 0;
        for (int r = 0; r < rows; r++) {
            double k = 1.0f / (sqrtf(vs[r]) + eps);
            before += work[r];
            after += work[r] * k * k;
        }
        float scale = (float)(sqrt(before) / (sqrt(after) + eps));
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > 1 << 15)
        for (int r = 0; r < rows; r++) {
            float *xr = xs + (size_t)r * cols;
            for (int c = 0; c < cols; c++) xr[c] *= scale;
        }
    }
}
