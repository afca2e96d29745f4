/* bench_gemm.c — dm_gemm (shape-fixed tiles, one thread per tile: bitwise independent of
 * the thread count) against OpenBLAS's own threaded cblas_sgemm on the products of a
 * d2 training step (B*T = 4096 rows), interleaved rounds, median ratio.
 *
 *   bench_gemm [--rounds R] [--rows N]
 *
 * Output: TSV rows  date  what  config  metric  value  spread  n. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atlas.h"
#include "check.h"
#include "kernels/kernels.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = 9, N = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) N = atoi(argv[i + 1]);
    }
    if (rounds < 1 || rounds > 1000 || N < 1) {
        fprintf(stderr, "usage: bench_gemm [--rounds R] [--rows N]\n");
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
    float *A = malloc(sizeof(float) * (size_t)N * 768), *B = malloc(sizeof(float) * (size_t)N * 768);
    float *C = malloc(sizeof(float) * (size_t)N * 768);
    t_fill_normal(A, (size_t)N * 768, 1, 1.0f);
    t_fill_normal(B, (size_t)N * 768, 2, 1.0f);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    printf("# threads %d, %d rounds; ratio = cblas_sgemm (OpenBLAS threads) time / dm_gemm time\n",
           threads, rounds);
    for (int c = 0; c < nc; c++) {
        int M = cs[c].M, Nn = cs[c].Nn, K = cs[c].K;
        int lda = cs[c].ta ? M : K, ldb = cs[c].tb ? K : Nn;
        double *t0 = malloc(sizeof(double) * (size_t)rounds), *t1 = malloc(sizeof(double) * (size_t)rounds);
        double *r = malloc(sizeof(double) * (size_t)rounds);
        for (int k = -1; k < rounds; k++) {
            double a = dm_now();
            dm_gemm(cs[c].ta, cs[c].tb, M, Nn, K, 1.0f, A, lda, B, ldb, 0.0f, C, Nn);
            double b = dm_now();
            cblas_sgemm(CblasRowMajor, cs[c].ta ? CblasTrans : CblasNoTrans,
                        cs[c].tb ? CblasTrans : CblasNoTrans, M, Nn, K, 1.0f, A, lda, B, ldb, 0.0f,
                        C, Nn);
            double e = dm_now();
            if (k < 0) continue; /* warm-up */
            t0[k] = b - a;
            t1[k] = e - b;
            r[k] = t1[k] / t0[k];
        }
        qsort(t0, (size_t)rounds, sizeof *t0, cmp);
        qsort(t1, (size_t)rounds, sizeof *t1, cmp);
        qsort(r, (size_t)rounds, sizeof *r, cmp);
        double fl = 2.0 * M * Nn * K;
        printf("%s\tbench_gemm\t%s,threads=%d\tdm_gemm_gflops\t%.1f\t%.1f\t%d\n", date, cs[c].name,
               threads, fl / t0[rounds / 2] / 1e9, fl / t0[0] / 1e9 - fl / t0[rounds - 1] / 1e9,
               rounds);
        printf("%s\tbench_gemm\t%s,threads=%d\topenblas_gflops\t%.1f\t%.1f\t%d\n", date,
               cs[c].name, threads, fl / t1[rounds / 2] / 1e9,
               fl / t1[0] / 1e9 - fl / t1[rounds - 1] / 1e9, rounds);
        printf("%s\tbench_gemm\t%s,threads=%d\topenblas_over_dm_gemm_time\t%.3f\t%.3f\t%d\n", date,
               cs[c].name, threads, r[rounds / 2], r[rounds - 1] - r[0], rounds);
        free(t0);
        free(t1);
        free(r);
    }
    free(A);
    free(B);
    free(C);
    return 0;
}
