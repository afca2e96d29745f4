/* test_normuon.c — NorMuon's neuron-wise normalisation and the cautious weight decay
 * (backends/cpu/kernels/normuon.h) against their float64 references (ref/normuon_ref.h)
 * and against what they must do: NorMuon keeps each slice's Frobenius norm, makes the
 * rows' RMS equal when the moment is the current one (beta2 = 0), follows the moment's
 * recursion over steps, leaves a zero slice zero and gives the same bits on any thread
 * count; the cautious decay is Muon's and AdamW's step bit for bit where the update and
 * the weight agree in sign, and leaves the weight undecayed where they do not. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backends/cpu/kernels/normuon.h"
#include "backends/cpu/kernels/optim.h"
#include "ops/optim_ops.h"
#include "ref/normuon_ref.h"
#include "ref/optim_ref.h"

/* rows of very different scales, as an orthogonalised update's rows are not */
static void fill_update(float *x, int n, int rows, int cols, uint64_t seed) {
    t_fill_normal(x, (size_t)n * rows * cols, seed, 1.0f);
    for (int s = 0; s < n; s++)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                x[((size_t)s * rows + r) * cols + c] *= (float)(0.05 + (r % 7) * 0.4);
}

static double frob(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* Five steps of NorMuon on 3 slices of [48, 80] and on a tall [96, 40]: kernel vs the
 * float64 reference, x and v within 2e-6 relative each step; every slice keeps its norm
 * (1e-6); v follows beta2 v + (1 - beta2) mean_c x^2 of the step's input (1e-6). */
TEST(normuon_matches_float64_reference) {
    static const int S[][3] = {{3, 48, 80}, {1, 96, 40}};
    for (int k = 0; k < 2; k++) {
        int n = S[k][0], rows = S[k][1], cols = S[k][2];
        size_t nx = (size_t)n * rows * cols, nv = (size_t)n * rows;
        float *x = t_alloc(nx), *xr = t_alloc(nx), *v = t_alloc(nv), *vr = t_alloc(nv),
              *v0 = t_alloc(nv);
        double *work = t_allocd((size_t)rows);
        for (int step = 0; step < 5; step++) {
            fill_update(x, n, rows, cols, (uint64_t)(100 + 10 * k + step));
            memcpy(xr, x, nx * sizeof *x);
            memcpy(v0, v, nv * sizeof *v);
            double want_v[512];
            for (int s = 0; s < n; s++)
                for (int r = 0; r < rows; r++) {
                    double ss = 0;
                    for (int c = 0; c < cols; c++) {
                        double a = x[((size_t)s * rows + r) * cols + c];
                        ss += a * a;
                    }
                    want_v[s * rows + r] = 0.95 * v0[s * rows + r] + 0.05 * ss / cols;
                }
            double norm_in[4];
            for (int s = 0; s < n; s++) norm_in[s] = frob(x + (size_t)s * rows * cols, (size_t)rows * cols);
            dm_normuon(x, v, n, rows, cols, 0.95f, 1e-10f, work);
            dm_normuon_ref(xr, vr, n, rows, cols, 0.95f, 1e-10f);
            double ex = t_rel_rms_ff(x, xr, nx), ev = t_rel_rms_ff(v, vr, nv);
            CHECKF(ex <= 2e-6 && ev <= 2e-6, "[%d,%d,%d] step %d: x rel %.3g, v rel %.3g", n,
                   rows, cols, step, ex, ev);
            for (int s = 0; s < n; s++) {
                double out = frob(x + (size_t)s * rows * cols, (size_t)rows * cols);
                CHECKF(fabs(out / norm_in[s] - 1) <= 1e-6, "slice %d: norm %.9g -> %.9g", s,
                       norm_in[s], out);
            }
            double ev2 = 0;
            for (size_t i = 0; i < nv; i++) {
                double e = fabs(v[i] - want_v[i]) / want_v[i];
                ev2 = e > ev2 ? e : ev2;
            }
            CHECKF(ev2 <= 1e-6, "step %d: v off its recursion by %.3g", step, ev2);
        }
        free(x), free(xr), free(v), free(vr), free(v0), free(work);
    }
}

/* beta2 = 0: v is this step's mean square, and each row comes out with the same RMS
 * (the slice's RMS, since the norm is kept); a zero slice stays zero and finite. */
TEST(normuon_equalises_rows) {
    int n = 2, rows = 32, cols = 64;
    size_t nx = (size_t)n * rows * cols;
    float *x = t_alloc(nx), *v = t_alloc((size_t)n * rows);
    double *work = t_allocd((size_t)rows);
    fill_update(x, 1, rows, cols, 7); /* slice 1 stays zero */
    double norm = frob(x, (size_t)rows * cols), rms = norm / sqrt((double)rows * cols);
    dm_normuon(x, v, n, rows, cols, 0.0f, 1e-10f, work);
    for (int r = 0; r < rows; r++) {
        double rr = frob(x + (size_t)r * cols, (size_t)cols) / sqrt((double)cols);
        CHECKF(fabs(rr / rms - 1) <= 1e-5, "row %d: rms %.7g, slice rms %.7g", r, rr, rms);
    }
    for (size_t i = (size_t)rows * cols; i < nx; i++) CHECKF(x[i] == 0.0f, "zero slice: x[%zu] = %g", i, x[i]);
    free(x), free(v), free(work);
}

/* the same bits at 1, 2, 3 and 4 threads (over the parallel threshold) */
TEST(normuon_bitwise_threads) {
    int n = 2, rows = 256, cols = 192;
    size_t nx = (size_t)n * rows * cols, nv = (size_t)n * rows;
    float *x0 = t_alloc(nx), *x = t_alloc(nx), *ref = t_alloc(nx), *v = t_alloc(nv),
          *vref = t_alloc(nv);
    double *work = t_allocd((size_t)rows);
    fill_update(x0, n, rows, cols, 11);
    int saved = omp_get_max_threads();
    for (int t = 1; t <= 4; t++) {
        omp_set_num_threads(t);
        memcpy(x, x0, nx * sizeof *x);
        for (size_t i = 0; i < nv; i++) v[i] = 0.01f * (float)(i % 5);
        dm_normuon(x, v, n, rows, cols, 0.95f, 1e-10f, work);
        if (t == 1) {
            memcpy(ref, x, nx * sizeof *x);
            memcpy(vref, v, nv * sizeof *v);
        } else
            CHECKF(!memcmp(ref, x, nx * sizeof *x) && !memcmp(vref, v, nv * sizeof *v),
                   "%d threads differ from 1", t);
    }
    omp_set_num_threads(saved);
    free(x0), free(x), free(ref), free(v), free(vref), free(work);
}

/* Cautious decay, Muon and AdamW: equal to the plain step bit for bit where update and
 * weight agree in sign (or either is zero), equal to the undecayed step where they do not
 * (AdamW: wd = 0), both kinds present; within 1e-6 of the float64 reference. */
TEST(cautious_decay_masks_the_decay) {
    size_t n = 40000;
    float *w = t_alloc(n), *u = t_alloc(n), *plain = t_alloc(n), *nodecay = t_alloc(n),
          *got = t_alloc(n), *ref = t_alloc(n), *g = t_alloc(n), *m1 = t_alloc(n),
          *m2 = t_alloc(n), *a1 = t_alloc(n), *a2 = t_alloc(n), *b1 = t_alloc(n), *b2 = t_alloc(n);
    t_fill_normal(w, n, 21, 0.05f);
    t_fill_normal(u, n, 22, 1.0f);
    u[0] = 0.0f, w[1] = 0.0f;
    float decay = 1.0f - 0.02f * 0.1f, step = 0.02f;
    dm_muon_apply(plain, w, u, n, decay, step, 0);
    dm_muon_apply(nodecay, w, u, n, 1.0f, step, 0);
    dm_muon_apply(got, w, u, n, decay, step, 1);
    dm_muon_apply_ref(ref, w, u, n, decay, step, 1);
    size_t agree = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        int mask = u[i] * w[i] >= 0.0f;
        agree += mask, differ += !mask;
        float want = mask ? plain[i] : nodecay[i];
        CHECKF(got[i] == want, "muon [%zu]: %.9g, want %.9g (mask %d)", i, got[i], want, mask);
    }
    CHECKF(agree > n / 4 && differ > n / 4, "mask %zu / %zu", agree, differ);
    CHECKF(t_rel_rms_ff(got, ref, n) <= 1e-6, "muon vs reference %.3g", t_rel_rms_ff(got, ref, n));
    /* AdamW at step 3 */
    t_fill_normal(g, n, 23, 1.0f);
    t_fill_normal(m1, n, 24, 0.1f);
    t_fill_uniform(m2, n, 25, 0.0f, 0.02f);
    float h[DM_ADAM_HYPER], h0[DM_ADAM_HYPER]; /* with decay, and without */
    dm_adam_hyper(h, 3e-3f, 0.1f, 0.9f, 0.95f, 3);
    dm_adam_hyper(h0, 3e-3f, 0.0f, 0.9f, 0.95f, 3);
    dm_adamw(plain, a1, a2, w, g, m1, m2, n, h[0], h[1], 0.9f, 0.95f, 1e-8f, h[2], h[3], 0.5f, 0);
    dm_adamw(nodecay, a1, a2, w, g, m1, m2, n, h0[0], h0[1], 0.9f, 0.95f, 1e-8f, h0[2], h0[3],
             0.5f, 0);
    dm_adamw(got, b1, b2, w, g, m1, m2, n, h[0], h[1], 0.9f, 0.95f, 1e-8f, h[2], h[3], 0.5f, 1);
    CHECK(!memcmp(a1, b1, n * sizeof *a1) && !memcmp(a2, b2, n * sizeof *a2));
    agree = differ = 0;
    for (size_t i = 0; i < n; i++) {
        int mask = b1[i] * w[i] >= 0.0f; /* the update's sign is m1's */
        agree += mask, differ += !mask;
        float want = mask ? plain[i] : nodecay[i];
        CHECKF(got[i] == want, "adamw [%zu]: %.9g, want %.9g (mask %d)", i, got[i], want, mask);
    }
    CHECKF(agree > n / 4 && differ > n / 4, "adamw mask %zu / %zu", agree, differ);
    dm_adamw_ref(ref, a1, a2, w, g, m1, m2, n, h[0], h[1], 0.9f, 0.95f, 1e-8f, h[2], h[3], 0.5f,
                 1);
    CHECKF(t_rel_rms_ff(got, ref, n) <= 1e-6, "adamw vs reference %.3g", t_rel_rms_ff(got, ref, n));
    float *f[] = {w, u, plain, nodecay, got, ref, g, m1, m2, a1, a2, b1, b2};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
}
