/* normuon_ref.c — references of NorMuon and the cautious decay (normuon_ref.h). */
#include "kernels/ref/normuon_ref.h"

#include <math.h>

/* Two passes over each slice: the norms before and after (v untouched), then the rows
 * scaled and v written, every row's moment recomputed from the old v in double. */
void dm_normuon_ref(float *x, float *v, int n, int rows, int cols, float beta2, float eps) {
    for (int s = 0; s < n; s++) {
        float *xs = x + (size_t)s * rows * cols, *vs = v + (size_t)s * rows;
        double before = 0, after = 0;
        for (int pass = 0; pass < 2; pass++) {
            double scale = pass ? sqrt(before) / (sqrt(after) + eps) : 0;
            for (int r = 0; r < rows; r++) {
                float *xr = xs + (size_t)r * cols;
                double ss = 0;
                for (int c = 0; c < cols; c++) ss += (double)xr[c] * xr[c];
                double vr = beta2 * (double)vs[r] + (1.0 - beta2) * (ss / cols);
                double k = 1.0 / (sqrt(vr) + eps);
                if (!pass) {
                    before += ss;
                    after += ss * k * k;
                    continue;
                }
                for (int c = 0; c < cols; c++) xr[c] = (float)(xr[c] * k * scale);
                vs[r] = (float)vr;
            }
        }
    }
}

void dm_muon_apply_cautious_ref(float *wo, const float *w, const float *u, size_t n,
                                float decay, float step) {
    for (size_t j = 0; j < n; j++) {
        double wj = w[j], uj = u[j];
        wo[j] = (float)((uj * wj >= 0 ? wj * decay : wj) - (double)step * uj);
    }
}

void dm_adamw_cautious_ref(float *po, float *m1o, float *m2o, const float *p, const float *g,
                           const float *m1, const float *m2, size_t n, float lr, float wd,
                           float b1, float b2, float eps, long t, float gscale) {
    double c1 = 1.0 / (1.0 - pow(b1, (double)t)), c2 = 1.0 / (1.0 - pow(b2, (double)t));
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * gscale;
        double a = b1 * (double)m1[i] + (1.0 - b1) * gi;
        double v = b2 * (double)m2[i] + (1.0 - b2) * gi * gi;
        m1o[i] = (float)a;
        m2o[i] = (float)v;
        double u = a * c1 / (sqrt(v * c2) + eps), pi = p[i];
        po[i] = (float)((u * pi >= 0 ? pi * (1.0 - (double)lr * wd) : pi) - (double)lr * u);
    }
}
