/* gemm.c — the one entry to BLAS sgemm for the whole library, and the shape-fixed tiling
 * that every GEMM backend shares (OpenBLAS here, oneDNN in onednn.c).
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
#include <math.h>
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

void dm_gemm_tiles(dm_tile_fn tile, void *ctx, const dm_gemm_args *g, int mb, int nb) {
    if (g->M <= 0 || g->N <= 0) return;
    int tm = (g->M + mb - 1) / mb, tn = (g->N + nb - 1) / nb;
    if (tm * tn == 1) { /* one tile: on the calling thread */
        tile(ctx, g);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tm * tn; t++) {
        int i0 = (t / tn) * mb, j0 = (t % tn) * nb;
        dm_gemm_args x = *g;
        x.M = g->M - i0 < mb ? g->M - i0 : mb;
        x.N = g->N - j0 < nb ? g->N - j0 : nb;
        /* row-major: A is [M,K] (or [K,M] when transposed), B is [K,N] (or [N,K]) */
        size_t ai = g->ta ? (size_t)i0 : (size_t)i0 * g->lda;
        size_t bj = g->tb ? (size_t)j0 * g->ldb : (size_t)j0;
        x.A = (const char *)g->A + ai * g->elem;
        x.B = (const char *)g->B + bj * g->elem;
        x.C = (char *)g->C + ((size_t)i0 * g->ldc + j0) * g->celem;
        tile(ctx, &x);
    }
}

static void sgemm_tile(void *ctx, const dm_gemm_args *t) {
    (void)ctx;
    dm_gemm_serial(t->ta, t->tb, t->M, t->N, t->K, t->alpha, t->A, t->lda, t->B, t->ldb,
                   t->beta, t->C, t->ldc);
}

void dm_gemm_tiled(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc, int mb,
                   int nb) {
    dm_gemm_args g = {transA, transB, M, N, K, lda, ldb, ldc, alpha, beta, A, B, sizeof(float), C,
                      sizeof(float)};
    dm_gemm_tiles(sgemm_tile, NULL, &g, mb, nb);
}

/* The tiles of a product, from its shape alone: a product below DM_GEMM_ONE_TILE FLOPs
 * is one tile; a bigger one has the larger of M, N cut into rows of a multiple of 32 (at
 * least 64), in a multiple of 4 tiles of about DM_GEMM_TILE_FLOPS each (at least 4): a
 * multiple of 4 keeps 1, 2 and 4 threads evenly busy (5 tiles on 2 threads left one idle
 * for a fifth of the product: docs/kernels.md). The other dimension is left whole: each
 * operand panel is packed as few times as possible. The bits never depend on the thread
 * count, whatever the tiling; on the machines measured they do not depend on the tiling
 * either (each element's sum over K runs in the same order in any tile), so the count
 * only trades packing against parallelism. Measured: docs/ops.md, "GEMM backends". */
#define DM_GEMM_ONE_TILE 4e6
#define DM_GEMM_TILE_FLOPS 4e8
void dm_gemm_tile_shape(int M, int N, int K, int *mb, int *nb) {
    *mb = M;
    *nb = N;
    double flops = 2.0 * M * N * (K > 0 ? K : 1);
    if (M <= 0 || N <= 0 || flops < DM_GEMM_ONE_TILE) return;
    int big = M >= N ? M : N;
    double groups = floor(flops / (4 * DM_GEMM_TILE_FLOPS) + 0.5); /* of 4 tiles */
    int parts = groups > 1 ? (groups < big / 4 ? 4 * (int)groups : big) : 4;
    int t = clamp(round_up((big + parts - 1) / parts, 32), 64, big > 64 ? big : 64);
    if (M >= N) *mb = t;
    else *nb = t;
}

void dm_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    int mb, nb; /* from the shape only, never from the thread count */
    dm_gemm_tile_shape(M, N, K, &mb, &nb);
    dm_gemm_tiled(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, mb, nb);
}

void dm_gemm_openblas(void *ctx, int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
    (void)ctx;
    dm_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
