/* normuon_ref.c — the reference of NorMuon (normuon_ref.h). */
#include "ref/normuon_ref.h"

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
