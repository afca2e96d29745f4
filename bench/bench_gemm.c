/* bench_gemm.c — the GEMM backends on the products of a d2 training step (B*T = 4096 rows
 * by default): dm_gemm (OpenBLAS, one sgemm per shape-fixed tile), oneDNN's matmul over
 * the same tiles (backends/cpu/kernels/onednn.c), OpenBLAS's own threaded cblas_sgemm, and, where
 * the CPU has hardware bf16, oneDNN's bf16 matmul over the same tiles (bf16 operands, f32
 * output: what precision=bf16 runs), interleaved round by round; GFLOP/s medians and the
 * time ratios of each against dm_gemm in the same rounds.
 *
 *   bench_gemm [--rounds R] [--rows N] [--history FILE] [--tilings]
 *
 * --tilings adds dm_gemm over other 1-D tilings (the larger of M, N cut into 4, 8, 16
 * parts) beside the tiling dm_gemm_tile_shape picks.
 * Output: notes (lines starting with '#'), then rows in the columns of benches/history.tsv
 * (what "bench:gemm"; value = median over rounds, spread = max - min over rounds, n =
 * rounds; flags "contended,..." when the contention probe saw a busy machine during that
 * product's rounds). --history FILE appends the rows to FILE as well. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/stats.h"
#include "check.h"
#include "jobs/bench.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "ops/atlas.h"

enum { V_DM, V_DNN, V_BLAS, V_DNN16, V_T4, V_T8, V_T16, V_N };
static const char *const METRIC[V_N] = {"dm_gemm_gflops",     "onednn_gflops",
                                        "openblas_gflops",    "onednn_bf16_gflops",
                                        "tiles_1d4_gflops",   "tiles_1d8_gflops",
                                        "tiles_1d16_gflops"};

typedef struct { const char *name; int ta, tb, M, N, K; } product;

/* one run of variant v on the product p; seconds */
static double run(int v, const product *p, dm_onednn *dnn, const float *A, const float *B,
                  const uint16_t *Ab, const uint16_t *Bb, float *C) {
    int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    double t0 = dm_now();
    if (v == V_DM) {
        dm_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C, p->N);
    } else if (v == V_DNN) {
        dm_onednn_gemm(dnn, p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C, p->N);
    } else if (v == V_DNN16) {
        dm_onednn_gemm_bf16(dnn, p->ta, p->tb, p->M, p->N, p->K, 1.0f, Ab, lda, Bb, ldb, 0.0f, C,
                            p->N);
    } else if (v == V_BLAS) {
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans,
                    p->tb ? CblasTrans : CblasNoTrans, p->M, p->N, p->K, 1.0f, A, lda, B, ldb,
                    0.0f, C, p->N);
    } else { /* the larger of M, N cut into 4 << (v - V_T4) parts */
        int parts = 4 << (v - V_T4), mb = p->M, nb = p->N;
        if (p->M >= p->N) mb = (p->M / parts + 63) / 64 * 64;
        else nb = (p->N / parts + 63) / 64 * 64;
        dm_gemm_tiled(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C, p->N,
                      mb > 0 ? mb : 1, nb > 0 ? nb : 1);
    }
    return dm_now() - t0;
}

int main(int argc, char **argv) {
    int rounds = 9, N = 4096, bad = 0, tilings = 0;
    const char *history = NULL;
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--tilings")) { tilings = 1; i--; continue; }
        if (i + 1 >= argc) bad = 1;
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--history")) history = argv[i + 1];
        else bad = 1;
    }
    if (bad || rounds < 1 || rounds > 1000 || N < 1) {
        fprintf(stderr, "usage: bench_gemm [--rounds R] [--rows N] [--history FILE] [--tilings]\n");
        return 2;
    }
    const char *why = NULL;
    dm_onednn *dnn = dm_onednn_create(&why);
    if (!dnn) {
        fprintf(stderr, "bench_gemm: %s\n", why);
        return 1;
    }
    /* out = in W^T (fwd); din = dout W (bwd); dW = dout^T in (bwd_w) */
    product ps[] = {
        {"fwd N x 256 <- 256", 0, 1, N, 256, 256},   {"fwd N x 768 <- 256", 0, 1, N, 768, 256},
        {"fwd N x 256 <- 768", 0, 1, N, 256, 768},   {"din N x 256 <- 768", 0, 0, N, 256, 768},
        {"din N x 768 <- 256", 0, 0, N, 768, 256},   {"dW 256 x 256 over N", 1, 0, 256, 256, N},
        {"dW 768 x 256 over N", 1, 0, 768, 256, N},  {"dW 256 x 768 over N", 1, 0, 256, 768, N},
        {"fwd N x 64 <- 256", 0, 1, N, 64, 256},     {"dW 64 x 256 over N", 1, 0, 64, 256, N},
        {"fwd N x 4 <- 256", 0, 1, N, 4, 256},       {"dW 4 x 256 over N", 1, 0, 4, 256, N},
    };
    int np = (int)(sizeof ps / sizeof ps[0]), threads = omp_get_max_threads();
    int nv = tilings ? V_N : V_DNN16 + 1;
    const char *bf16_why = dm_cpu_bf16_missing();
    if (bf16_why) printf("# no bf16 products here: %s\n", bf16_why);
    /* every operand and output fits max(N, 768) x 768 floats */
    size_t len = (size_t)(N > 768 ? N : 768) * 768;
    float *A = t_alloc(len), *B = t_alloc(len), *C = t_alloc(len);
    t_fill_normal(A, len, 1, 1.0f);
    t_fill_normal(B, len, 2, 1.0f);
    uint16_t *Ab = malloc(len * sizeof(uint16_t)), *Bb = malloc(len * sizeof(uint16_t));
    if (!Ab || !Bb) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    dm_bf16_from_f32(Ab, A, len);
    dm_bf16_from_f32(Bb, B, len);
    double *t = malloc(sizeof(double) * (size_t)rounds * V_N), *g = malloc(sizeof(double) * rounds);
    printf("# threads %d, %d rounds, the variants interleaved in each; GFLOP/s medians; ratio = "
           "variant time / dm_gemm time, per round, median\n#%s\n", threads, rounds,
           DM_HISTORY_HEADER);
    for (int c = 0; c < np; c++) {
        const product *p = &ps[c];
        int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
        const char *dw = dm_onednn_supports(dnn, p->ta, p->tb, p->M, p->N, p->K, lda, ldb, p->N,
                                            1.0f, 0.0f);
        if (dw) printf("# %s: oneDNN declines it (%s)\n", p->name, dw);
        const char *dw16 = bf16_why ? bf16_why
                                    : dm_onednn_supports_bf16(dnn, p->ta, p->tb, p->M, p->N, p->K,
                                                              lda, ldb, p->N, 1.0f, 0.0f);
        if (dw16 && !bf16_why) printf("# %s: oneDNN declines it in bf16 (%s)\n", p->name, dw16);
        dm_probe probe;
        dm_probe_result pr;
        for (int k = -1; k < rounds; k++) { /* round -1: warm-up */
            if (k == 0) dm_probe_begin(&probe);
            for (int v = 0; v < nv; v++) {
                if ((v == V_DNN && dw) || (v == V_DNN16 && dw16)) continue;
                double s = run(v, p, dnn, A, B, Ab, Bb, C);
                if (k >= 0) t[(size_t)v * rounds + k] = s;
            }
            if (k >= 0) dm_probe_tick(&probe);
        }
        dm_probe_end(&probe, threads, &pr);
        double fl = 2.0 * p->M * p->N * p->K;
        char cfg[160], flags[96], err[512];
        snprintf(cfg, sizeof cfg, "%s N=%d threads=%d", p->name, N, threads);
        dm_bench_flags(&pr, flags, sizeof flags);
        for (int v = 0; v < nv; v++) {
            if ((v == V_DNN && dw) || (v == V_DNN16 && dw16)) continue;
            double sp, sr;
            for (int k = 0; k < rounds; k++) g[k] = fl / t[(size_t)v * rounds + k] / 1e9;
            dm_history_row row = {"bench:gemm", cfg, METRIC[v], dm_median(g, rounds, &sp),
                                  sp, rounds, flags};
            if (dm_history_report(stdout, history, &row, 1, err, sizeof err)) {
                fprintf(stderr, "bench_gemm: %s\n", err);
                return 1;
            }
            if (v == V_DNN || v == V_BLAS || v == V_DNN16) { /* time over dm_gemm's, per round */
                for (int k = 0; k < rounds; k++)
                    g[k] = t[(size_t)v * rounds + k] / t[(size_t)V_DM * rounds + k];
                char metric[64];
                snprintf(metric, sizeof metric, "%s_over_dm_gemm_time",
                         v == V_DNN ? "onednn" : v == V_DNN16 ? "onednn_bf16" : "openblas");
                dm_history_row r2 = {"bench:gemm", cfg, metric, dm_median(g, rounds, &sr),
                                     sr, rounds, flags};
                if (dm_history_report(stdout, history, &r2, 1, err, sizeof err)) {
                    fprintf(stderr, "bench_gemm: %s\n", err);
                    return 1;
                }
            }
        }
    }
    free(t);
    free(g);
    free(A);
    free(B);
    free(Ab);
    free(Bb);
    free(C);
    dm_onednn_free(dnn);
    return 0;
}
