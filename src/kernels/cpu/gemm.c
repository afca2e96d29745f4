/* gemm.c — the one entry to BLAS sgemm for the whole library.
 *
 * OpenBLAS's own threading does not give the same bits on 1 and 2 threads (measured:
 * 4096x768x256 and 256x256x4096 products differ in the last bits). dm_gemm tiles C into
 * blocks fixed by the SHAPE alone and runs one single-threaded sgemm per tile inside our
 * OpenMP region (OpenBLAS's OpenMP build runs single-threaded inside a parallel region:
 * one thread pool, never two). Every output element is then computed by the same call
 * whatever the thread count, so results are bitwise reproducible, and at our shapes it
 * is faster than OpenBLAS's own threading (bench_gemm; see dm_gemm_tile_shape). */
#include "kernels/cpu/kernels.h" /* before cblas.h (see kernels.h) */

#include <cblas.h>
#include <omp.h>

/* (Only whether a call is tiled, and how, must never depend on the thread count; so that
 * choice is made from the shape alone, and callers that run their own parallel loops
 * call dm_gemm_serial explicitly rather than relying on omp_in_parallel(), which is
 * false in a team of one thread.) */
static int round_up(int x, int m) { return (x + m - 1) / m * m; }
static int clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* one sgemm call on one thread, whatever the context */
void dm_gemm_serial(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    if (omp_in_parallel()) { /* OpenBLAS runs single-threaded inside an active region */
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(1)
    {
        omp_set_num_threads(1); /* this region's task only: OpenBLAS reads it */
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

void dm_gemm_tiled(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc, int mb,
                   int nb) {
    int tm = (M + mb - 1) / mb, tn = (N + nb - 1) / nb;
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tm * tn; t++) {
        int i0 = (t / tn) * mb, j0 = (t % tn) * nb;
        int mi = M - i0 < mb ? M - i0 : mb, nj = N - j0 < nb ? N - j0 : nb;
        /* row-major: A is [M,K] (or [K,M] when transposed), B is [K,N] (or [N,K]) */
        const float *Ai = transA ? A + i0 : A + (size_t)i0 * lda;
        const float *Bj = transB ? B + (size_t)j0 * ldb : B + j0;
        dm_gemm_serial(transA, transB, mi, nj, K, alpha, Ai, lda, Bj, ldb, beta,
                       C + (size_t)i0 * ldc + j0, ldc);
    }
}

/* The larger of M, N cut into 4 tiles (multiples of 64), the other left whole: every
 * operand panel is packed as few times as possible. Measured (bench_gemm --tilings, the
 * d2 step's products, 2 threads): 1-D quarters run at 148-173 GFLOP/s against 133-158 for
 * 2-D 64..256 x 64..512 tiles and 147-168 for OpenBLAS's own threading; cutting in 8 costs
 * 1-4% more, in 2 gains up to 4% on the weight gradients only. The price: at most 4
 * threads share one product. */
void dm_gemm_tile_shape(int M, int N, int K, int *mb, int *nb) {
    (void)K;
    *mb = M;
    *nb = N;
    if (M >= N) *mb = clamp(round_up((M + 3) / 4, 64), 64, M > 64 ? M : 64);
    else *nb = clamp(round_up((N + 3) / 4, 64), 64, N > 64 ? N : 64);
}

void dm_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    double flops = 2.0 * M * N * (K > 0 ? K : 1);
    if (flops < 4e6) { /* one tile (OpenBLAS would thread it from ~3e5 on) */
        dm_gemm_serial(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int mb, nb; /* from the shape only, never from the thread count */
    dm_gemm_tile_shape(M, N, K, &mb, &nb);
    dm_gemm_tiled(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, mb, nb);
}
