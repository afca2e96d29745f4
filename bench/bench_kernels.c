/* bench_kernels.c — the CPU kernels outside the GEMMs and the delta core, at the shapes of
 * a d2 training step (B*T = 4096 rows, d_model 256, 4 heads of 64, MLP hidden 768, conv
 * width 4): what the step atlas lists as the elementwise passes, the norms, the conv, the
 * gate and the bf16 rounding of a product's operand.
 *
 *   bench_kernels [--rounds R] [--rows N] [--cold] [--history FILE]
 *
 * All kernels run interleaved round by round (drift and noise hit them alike) on the
 * threads OpenMP has (OMP_NUM_THREADS); --cold streams 64 MiB through the caches before
 * every call, so each reads its operands from memory as the step does. Reported per
 * kernel: the median wall time of a call over the rounds and ns per element (of the
 * call's main tensor), with a read (the sum of x) and a copy (y = 1.5 x) over the same
 * elements as the memory bounds for scale.
 * Output: notes (lines starting with '#'), then rows in the columns of
 * benches/history.tsv (what "bench:kernels"; config "NAME [rows, cols] threads=T
 * cold|warm"; metrics ms and ns_per_element; value = median, spread = max - min, n =
 * rounds; flags "contended,..." when the contention probe saw a busy machine); --history
 * FILE appends them to FILE as well. Run with OMP_WAIT_POLICY=passive, as the tests do. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/stats.h"
#include "check.h"
#include "jobs/bench.h"
#include "backends/cpu/kernels/kernels.h"
#include "ops/atlas.h"

enum {
    K_READ, K_COPY, K_SILU_F, K_SILU_B, K_SIGM_F, K_SWIGLU_F, K_SWIGLU_B, K_L2_F, K_L2_B,
    K_RMS_F, K_RMS_B, K_GN_F, K_GN_B, K_GATE_F, K_GATE_B, K_CONV_F, K_CONV_B, K_ROUND, K_ADD,
    K_N
};
static const char *const NAME[K_N] = {
    "read",          "copy",          "silu_fwd",   "silu_bwd",   "sigmoid_fwd",
    "swiglu_fwd",    "swiglu_bwd",    "l2norm_fwd", "l2norm_bwd", "rmsnorm_fwd",
    "rmsnorm_bwd",   "gatednorm_fwd", "gatednorm_bwd", "gate_fwd", "gate_bwd",
    "conv_fwd",      "conv_bwd",      "bf16_round", "add"};

typedef struct {
    int N, D, H, dh, F, W;
    float *x, *y, *z, *dy, *dx, *dz, *a, *b, *da, *db, *r, *w, *dw, *cw, *dcw, *alog, *dalog,
        *dtb, *ddtb;
    uint16_t *xb;
} bufs;

/* elements of the main tensor of kernel k, and its [rows, cols] */
static size_t elems(const bufs *s, int k, int *rows, int *cols) {
    *rows = s->N, *cols = s->D;
    if (k == K_SWIGLU_F || k == K_SWIGLU_B) *cols = s->F;
    if (k == K_L2_F || k == K_L2_B || k == K_GN_F || k == K_GN_B) *rows = s->N * s->H, *cols = s->dh;
    return (size_t)*rows * *cols;
}

static void run(bufs *s, int k) {
    int N = s->N, D = s->D, R = N * s->H, dh = s->dh;
    size_t n = (size_t)N * D, nf = (size_t)N * s->F;
    switch (k) {
    case K_READ: { /* sum of x: the streaming read floor (n = rows * 256, a multiple of 16) */
        const float *x = s->x;
        float sum = 0.0f;
#pragma omp parallel reduction(+ : sum)
        {
            float acc[16] = {0};
#pragma omp for schedule(static)
            for (size_t i = 0; i < n / 16; i++)
                for (int j = 0; j < 16; j++) acc[j] += x[16 * i + j];
            for (int j = 0; j < 16; j++) sum += acc[j];
        }
        s->r[0] = sum; /* kept: the loop is not dead */
        break;
    }
    case K_COPY: {
        float *y = s->y;
        const float *x = s->x;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = 1.5f * x[i];
        break;
    }
    case K_SILU_F: dm_silu_fwd(s->y, s->x, n); break;
    case K_SILU_B: dm_silu_bwd(s->dx, s->dy, s->x, n); break;
    case K_SIGM_F: dm_sigmoid_fwd(s->y, s->x, n); break;
    case K_SWIGLU_F: dm_swiglu_fwd(s->y, s->a, s->b, nf); break;
    case K_SWIGLU_B: dm_swiglu_bwd(s->da, s->db, s->dy, s->a, s->b, nf); break;
    case K_L2_F: dm_l2norm_fwd(s->y, s->r, s->x, R, dh, 1e-6f); break;
    case K_L2_B: dm_l2norm_bwd(s->dx, s->dy, s->y, s->r, R, dh); break;
    case K_RMS_F: dm_rmsnorm_fwd(s->y, s->r, s->x, s->w, N, D, 1e-6f); break;
    case K_RMS_B: dm_rmsnorm_bwd(s->dx, s->dw, s->dy, s->x, s->w, s->r, N, D); break;
    case K_GN_F: dm_gatednorm_fwd(s->y, s->r, s->x, s->z, s->w, R, dh, 1e-6f, DM_GATE_SIGMOID); break;
    case K_GN_B:
        dm_gatednorm_bwd(s->dx, s->dz, s->dw, s->dy, s->x, s->z, s->w, s->r, R, dh,
                         DM_GATE_SIGMOID);
        break;
    case K_GATE_F: dm_gate_fwd(s->y, s->x, s->alog, s->dtb, N, s->H, dh, 0.0f); break;
    case K_GATE_B:
        dm_gate_bwd(s->dx, s->dalog, s->ddtb, s->dy, s->x, s->alog, s->dtb, N, s->H, dh, 0.0f);
        break;
    case K_CONV_F: dm_conv_fwd(s->y, s->x, s->cw, 1, N, D, s->W); break;
    case K_CONV_B: dm_conv_bwd(s->dx, s->dcw, s->dy, s->x, s->cw, 1, N, D, s->W); break;
    case K_ROUND: dm_bf16_from_f32(s->xb, s->x, n); break;
    case K_ADD: dm_add_inplace(s->y, s->x, n); break;
    }
}

int main(int argc, char **argv) {
    int rounds = 15, N = 4096, cold = 0, bad = 0;
    const char *history = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cold")) cold = 1;
        else if (i + 1 >= argc) bad = 1;
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows")) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--history")) history = argv[++i];
        else bad = 1;
    }
    if (bad || rounds < 1 || rounds > 1000 || N < 1 || N > (1 << 20)) {
        fprintf(stderr, "usage: bench_kernels [--rounds R] [--rows N] [--cold] [--history FILE]\n");
        return 2;
    }
    bufs s = {.N = N, .D = 256, .H = 4, .dh = 64, .F = 768, .W = 4};
    size_t big = (size_t)N * s.F, n = (size_t)N * s.D;
    float **f[] = {&s.x, &s.y, &s.z, &s.dy, &s.dx, &s.dz, &s.a, &s.b, &s.da, &s.db};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = t_alloc(big);
    t_fill_normal(s.x, big, 1, 1.0f);
    t_fill_normal(s.z, big, 2, 2.0f);
    t_fill_normal(s.dy, big, 3, 1.0f);
    t_fill_normal(s.a, big, 4, 2.0f);
    t_fill_normal(s.b, big, 5, 1.0f);
    s.r = t_alloc((size_t)N * s.H);
    s.w = t_alloc((size_t)s.D), s.dw = t_alloc((size_t)s.D);
    t_fill_uniform(s.w, (size_t)s.D, 6, 0.5f, 1.5f);
    s.cw = t_alloc((size_t)s.D * s.W), s.dcw = t_alloc((size_t)s.D * s.W);
    t_fill_normal(s.cw, (size_t)s.D * s.W, 7, 0.5f);
    s.alog = t_alloc((size_t)s.H), s.dalog = t_alloc((size_t)s.H);
    s.dtb = t_alloc((size_t)s.H * s.dh), s.ddtb = t_alloc((size_t)s.H * s.dh);
    t_fill_uniform(s.dtb, (size_t)s.H * s.dh, 8, -4.0f, -1.0f);
    s.xb = malloc(n * sizeof(uint16_t));
    size_t flush_n = (size_t)16 << 20;
    float *flush = cold ? t_alloc(flush_n) : NULL;
    double *t = malloc(sizeof(double) * (size_t)rounds * K_N), *v = malloc(sizeof(double) * rounds);
    if (!s.xb || !t || !v) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return 1;
    }
    int threads = omp_get_max_threads();
    printf("# threads %d, %d rounds, every kernel once per round, %s caches; d2 step shapes "
           "(rows %d)\n#%s\n", threads, rounds, cold ? "cold" : "warm", N, DM_HISTORY_HEADER);
    dm_probe probe;
    dm_probe_result pr;
    for (int r = -1; r < rounds; r++) { /* round -1: warm-up */
        if (r == 0) dm_probe_begin(&probe);
        for (int k = 0; k < K_N; k++) {
            if (flush) {
#pragma omp parallel for schedule(static)
                for (size_t i = 0; i < flush_n; i++) flush[i] += 1.0f;
            }
            double t0 = dm_now();
            run(&s, k);
            if (r >= 0) t[(size_t)k * rounds + r] = dm_now() - t0;
        }
        if (r >= 0) dm_probe_tick(&probe);
    }
    dm_probe_end(&probe, threads, &pr);
    char flags[96], err[512];
    dm_bench_flags(&pr, flags, sizeof flags);
    for (int k = 0; k < K_N; k++) {
        int rows, cols;
        size_t ne = elems(&s, k, &rows, &cols);
        char cfg[160];
        snprintf(cfg, sizeof cfg, "%s [%d, %d] threads=%d %s", NAME[k], rows, cols, threads,
                 cold ? "cold" : "warm");
        double sp, sn;
        for (int r = 0; r < rounds; r++) v[r] = 1e3 * t[(size_t)k * rounds + r];
        double ms = dm_median(v, rounds, &sp);
        for (int r = 0; r < rounds; r++) v[r] = 1e9 * t[(size_t)k * rounds + r] / (double)ne;
        double ns = dm_median(v, rounds, &sn);
        dm_history_row rows2[2] = {{"bench:kernels", cfg, "ms", ms, sp, rounds, flags},
                                   {"bench:kernels", cfg, "ns_per_element", ns, sn, rounds, flags}};
        if (dm_history_report(stdout, history, rows2, 2, err, sizeof err)) {
            fprintf(stderr, "bench_kernels: %s\n", err);
            return 1;
        }
    }
    char note[256];
    dm_bench_probe_note(&pr, note, sizeof note);
    printf("# %s\n", note);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(*f[i]);
    float *g[] = {s.r, s.w, s.dw, s.cw, s.dcw, s.alog, s.dalog, s.dtb, s.ddtb, flush};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) free(g[i]);
    free(s.xb);
    free(t);
    free(v);
    return 0;
}
