/* normuon.c — NorMuon's normalisation and the cautious weight decay (normuon.h). */
#include "kernels/cpu/normuon.h"

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

void dm_muon_apply_cautious(float *wo, const float *w, const float *u, size_t n, float decay,
                            float step) {
#pragma omp parallel for schedule(static) if (n > 1 << 15)
    for (size_t j = 0; j < n; j++) {
        float wj = w[j], uj = u[j];
        wo[j] = (uj * wj >= 0.0f ? wj * decay : wj) - step * uj;
    }
}

void dm_adamw_cautious(float *po, float *m1o, float *m2o, const float *p, const float *g,
                       const float *m1, const float *m2, size_t n, float lr, float wd, float b1,
                       float b2, float eps, long t, float gscale) {
    float c1 = (float)(1.0 / (1.0 - pow(b1, (double)t)));
    float c2 = (float)(1.0 / (1.0 - pow(b2, (double)t)));
    float decay = 1.0f - lr * wd;
#pragma omp parallel for schedule(static) if (n > 1 << 15)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float a = b1 * m1[i] + (1.0f - b1) * gi;
        float v = b2 * m2[i] + (1.0f - b2) * gi * gi;
        m1o[i] = a;
        m2o[i] = v;
        float pi = p[i]; /* the update's sign is a's (c1 and the denominator are > 0) */
        po[i] = (a * pi >= 0.0f ? pi * decay : pi) - lr * (a * c1) / (sqrtf(v * c2) + eps);
    }
}
