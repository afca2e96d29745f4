/* bench_gemm.c — dm_gemm (shape-fixed tiles, one thread per tile: bitwise independent of
 * the thread count) against OpenBLAS's own threaded cblas_sgemm on the products of a
 * d2 training step (B*T = 4096 rows), interleaved rounds, median ratio.
 *
 *   bench_gemm [--rounds R] [--rows N] [--history FILE]
 *
 * Output: notes (lines starting with '#'), then rows in the columns of benches/history.tsv
 * (what "bench:gemm"; value = median over rounds, spread = max - min over rounds, n =
 * rounds; flags "contended,..." when the contention probe saw a busy machine during that
 * product's rounds). --history FILE appends the rows to FILE as well. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/atlas.h"
#include "jobs/bench.h"
#include "check.h"
#include "kernels/cpu/kernels.h"

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
    /* (name, transA, transB, M, N, K): out = in W^T; din = dout W; dW = dout^T in */
    struct { const char *name; int ta, tb, M, Nn, K; } cs[] = {
        {"fwd N x 256 <- 256", 0, 1, N, 256, 256},   {"fwd N x 768 <- 256", 0, 1, N, 768, 256},
        {"fwd N x 256 <- 768", 0, 1, N, 256, 768},   {"din N x 256 <- 768", 0, 0, N, 256, 768},
        {"din N x 768 <- 256", 0, 0, N, 768, 256},   {"dW 256 x 256 over N", 1, 0, 256, 256, N},
        {"dW 768 x 256 over N", 1, 0, 768, 256, N},  {"dW 256 x 768 over N", 1, 0, 256, 768, N},
        {"fwd N x 64 <- 256", 0, 1, N, 64, 256},     {"dW 64 x 256 over N", 1, 0, 64, 256, N},
    };
    int nc = (int)(sizeof cs / sizeof cs[0]), threads = omp_get_max_threads();
    /* every operand and output fits max(N, 768) x 768 floats (the dW outputs are 768 x 256
     * whatever N is) */
    size_t len = (size_t)(N > 768 ? N : 768) * 768;
    float *A = t_alloc(len), *B = t_alloc(len), *C = t_alloc(len);
    t_fill_normal(A, len, 1, 1.0f);
    t_fill_normal(B, len, 2, 1.0f);
    printf("# threads %d, %d rounds (dm_gemm and cblas_sgemm interleaved); ratio = cblas_sgemm "
           "(OpenBLAS threads) time / dm_gemm time, per round, median\n#%s\n",
           threads, rounds, DM_HISTORY_HEADER);
    for (int c = 0; c < nc; c++) {
        int M = cs[c].M, Nn = cs[c].Nn, K = cs[c].K;
        int lda = cs[c].ta ? M : K, ldb = cs[c].tb ? K : Nn;
        double *t0 = malloc(sizeof(double) * (size_t)rounds), *t1 = malloc(sizeof(double) * (size_t)rounds);
        double *r = malloc(sizeof(double) * (size_t)rounds);
        double talt[3][1000];
        dm_probe probe;
        dm_probe_result pr;
        for (int k = -1; k < rounds; k++) {
            double a = dm_now();
            dm_gemm(cs[c].ta, cs[c].tb, M, Nn, K, 1.0f, A, lda, B, ldb, 0.0f, C, Nn);
            double b = dm_now();
            cblas_sgemm(CblasRowMajor, cs[c].ta ? CblasTrans : CblasNoTrans,
                        cs[c].tb ? CblasTrans : CblasNoTrans, M, Nn, K, 1.0f, A, lda, B, ldb, 0.0f,
                        C, Nn);
            double e = dm_now();
            /* --tilings: one-dimensional alternatives, the larger of M, N cut into 2/4/8 */
            for (int v = 0; tilings && v < 3; v++) {
                int parts = 2 << v, mb = M, nb = Nn;
                if (M >= Nn) mb = (M / parts + 63) / 64 * 64;
                else nb = (Nn / parts + 63) / 64 * 64;
                double q = dm_now();
                dm_gemm_tiled(cs[c].ta, cs[c].tb, M, Nn, K, 1.0f, A, lda, B, ldb, 0.0f, C, Nn,
                              mb > 0 ? mb : 1, nb > 0 ? nb : 1);
                if (k >= 0) talt[v][k] = dm_now() - q;
            }
            if (k < 0) { /* warm-up */
                dm_probe_begin(&probe);
                continue;
            }
            dm_probe_tick(&probe);
            t0[k] = b - a;
            t1[k] = e - b;
            r[k] = t1[k] / t0[k];
        }
        dm_probe_end(&probe, threads, &pr);
        double fl = 2.0 * M * Nn * K, sp0, sp1, spr;
        for (int k = 0; k < rounds; k++) {
            t0[k] = fl / t0[k] / 1e9; /* GFLOP/s per round */
            t1[k] = fl / t1[k] / 1e9;
        }
        double g0 = dm_median(t0, rounds, &sp0), g1 = dm_median(t1, rounds, &sp1);
        double rm = dm_median(r, rounds, &spr);
        char cfg[128], flags[96], err[512];
        snprintf(cfg, sizeof cfg, "%s N=%d threads=%d", cs[c].name, N, threads);
        dm_bench_flags(&pr, flags, sizeof flags);
        dm_history_row rows[3] = {
            {"bench:gemm", cfg, "dm_gemm_gflops", g0, sp0, rounds, flags},
            {"bench:gemm", cfg, "openblas_gflops", g1, sp1, rounds, flags},
            {"bench:gemm", cfg, "openblas_over_dm_gemm_time", rm, spr, rounds, flags},
        };
        for (int v = 0; tilings && v < 3; v++) {
            double g[1000], sp;
            for (int k = 0; k < rounds; k++) g[k] = fl / talt[v][k] / 1e9;
            char metric[64];
            snprintf(metric, sizeof metric, "tiles_1d%d_gflops", 2 << v);
            dm_history_row alt = {"bench:gemm", cfg, metric, dm_median(g, rounds, &sp), sp,
                                  rounds, flags};
            if (dm_history_report(stdout, history, &alt, 1, err, sizeof err)) return 1;
        }
        free(t0);
        free(t1);
        free(r);
        if (dm_history_report(stdout, history, rows, 3, err, sizeof err)) {
            fprintf(stderr, "bench_gemm: %s\n", err);
            return 1;
        }
    }
    free(A);
    free(B);
    free(C);
    return 0;
}
