/* small_mm.h — the small matrix products of the chunked delta core (delta_chunk.c):
 *
 *   mm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch, tri)
 *       C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, beta 0 or 1, row-major, in
 *       cblas_sgemm's argument order; op(A) = A [M, K] (ta 0) or A^T with A [K, M] (ta 1),
 *       op(B) likewise with B [K, N] or [N, K]; scratch >= N*K floats when tb.
 *   transpose(T, B, N, K, ldb)     T[K, N] = B^T, B [N, K] with row stride ldb
 *
 * The chunk's products are small (sides <= 2*64 and <= 256) and run once per chunk on
 * one thread. A register-tiled kernel of our own takes them rather than cblas_sgemm: no
 * packing, no OpenBLAS buffer lock shared by the threads, and no OpenBLAS threading when
 * the caller runs us on one thread (which changed the last bits between 1 and 2 threads;
 * the measurements: docs/kernels.md). Each C element is one fixed-order sum over k,
 * acc = VFMA(a_k, b_k, acc) for k = k0 .. k1 - 1 (then alpha * acc, + C when beta),
 * whatever the shape of the tile it falls in: bitwise reproducible, and bitwise equal to
 * that loop written plainly (tests/test_small_mm.c).
 *
 * The functions are static, defined here: the delta core compiles them with its call
 * sites, whose shapes and flags are constants there. */
#ifndef DM_SMALL_MM_H
#define DM_SMALL_MM_H

#include <stddef.h>

#include "kernels/cpu/vmath.h"

#define MR 4                      /* rows per tile */
#define NV (VL == 16 ? 4 : 2)     /* vectors per tile: 4 x 64 or 4 x 2VL accumulators */

/* C[i][j] (=|+=) alpha * sum_k A(i,k) B[k][j] over a tile of mr <= MR rows and nv <= NV full
 * vectors; A(i,k) = A[i*sai + k*sak]. Called with constant mr, nv (see mm_tiles) so that
 * the accumulators live in registers. */
static inline __attribute__((always_inline)) void mm_tile(int mr, int nv, int K, float alpha,
                                                          const float *A, size_t sai, size_t sak,
                                                          const float *B, size_t ldb, int beta,
                                                          float *C, size_t ldc) {
    vf acc[MR][NV];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[i][v] = vsplat(0.f);
    for (int k = 0; k < K; k++) {
        const float *bk = B + (size_t)k * ldb;
        vf bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) bv[v] = vld(bk + v * VL);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const vf a = vsplat(A[(size_t)i * sai + (size_t)k * sak]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[i][v] = vfma(a, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) {
            float *c = C + (size_t)i * ldc + v * VL;
            vf r = acc[i][v] * alpha;
            if (beta) r += vld(c);
            vst(c, r);
        }
}

#define MM_ARGS K, alpha, A, sai, sak, B, ldb, beta, C, ldc
static void mm_tiles(int mr, int nv, int K, float alpha, const float *A, size_t sai, size_t sak,
                     const float *B, size_t ldb, int beta, float *C, size_t ldc) {
    if (mr == MR) {
        switch (nv) {
        case 1: mm_tile(MR, 1, MM_ARGS); return;
        case 2: mm_tile(MR, 2, MM_ARGS); return;
#if NV == 4
        case 3: mm_tile(MR, 3, MM_ARGS); return;
        case 4: mm_tile(MR, 4, MM_ARGS); return;
#endif
        }
    }
    for (int i = 0; i < mr; i++) {
        const float *Ai = A + (size_t)i * sai;
        float *Ci = C + (size_t)i * ldc;
        switch (nv) {
        case 1: mm_tile(1, 1, K, alpha, Ai, sai, sak, B, ldb, beta, Ci, ldc); break;
        case 2: mm_tile(1, 2, K, alpha, Ai, sai, sak, B, ldb, beta, Ci, ldc); break;
#if NV == 4
        case 3: mm_tile(1, 3, K, alpha, Ai, sai, sak, B, ldb, beta, Ci, ldc); break;
        case 4: mm_tile(1, 4, K, alpha, Ai, sai, sak, B, ldb, beta, Ci, ldc); break;
#endif
        }
    }
}
#undef MM_ARGS

/* what mm may skip (below) */
enum { TRI_NONE = 0, TRI_A_LOWER, TRI_A_UPPER, TRI_C_LOWER };

/* T[K, N] = B^T, B [N, K] with row stride ldb: 16 x 16 blocks through the registers
 * where AVX-512 has them (the element loop writes with stride N: docs/kernels.md), the
 * rest element by element */
static void transpose(float *restrict T, const float *restrict B, int N, int K, int ldb) {
    int j0 = 0;
#if VL == 16
    for (; j0 + 16 <= N; j0 += 16) {
        int k0 = 0;
        for (; k0 + 16 <= K; k0 += 16) {
            __m512 r[16], u[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(B + (size_t)(j0 + i) * ldb + k0);
            /* 2 x 2, 4 x 4, 8 x 8 then 16 x 16 blocks of lanes swap places */
            for (int i = 0; i < 16; i += 2) {
                u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
                u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int i = 0; i < 16; i += 4)
                for (int h = 0; h < 2; h++) {
                    const __m512d lo = (__m512d)u[i + h], hi = (__m512d)u[i + 2 + h];
                    r[i + h] = (__m512)_mm512_unpacklo_pd(lo, hi);
                    r[i + 2 + h] = (__m512)_mm512_unpackhi_pd(lo, hi);
                }
            for (int i = 0; i < 16; i += 8)
                for (int h = 0; h < 4; h++) {
                    u[i + h] = _mm512_shuffle_f32x4(r[i + h], r[i + 4 + h], 0x88);
                    u[i + 4 + h] = _mm512_shuffle_f32x4(r[i + h], r[i + 4 + h], 0xdd);
                }
            for (int h = 0; h < 8; h++) {
                r[h] = _mm512_shuffle_f32x4(u[h], u[8 + h], 0x88);
                r[8 + h] = _mm512_shuffle_f32x4(u[h], u[8 + h], 0xdd);
            }
            /* r[i] now holds column k0 + c(i) of the block, c = the lane order below */
            static const int c[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(T + (size_t)(k0 + c[i]) * N + j0, r[i]);
        }
        for (; k0 < K; k0++)
            for (int j = j0; j < j0 + 16; j++) T[(size_t)k0 * N + j] = B[(size_t)j * ldb + k0];
    }
#endif
    for (int j = j0; j < N; j++)
        for (int k = 0; k < K; k++) T[(size_t)k * N + j] = B[(size_t)j * ldb + k];
}

/* C[M,N] = alpha op(A) op(B) + beta C (beta 0 or 1), row-major, cblas argument order.
 * op(B) = B^T is first transposed into scratch (>= N*K floats). tri skips known zeros:
 *   TRI_A_LOWER  op(A) is lower triangular (row i has k <= i only)
 *   TRI_A_UPPER  op(A) is upper triangular (row i has k >= i only)
 *   TRI_C_LOWER  only C[i][j] with j <= i is wanted (others may hold anything after) */
static void mm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc, float *scratch, int tri) {
    if (M <= 0 || N <= 0) return;
    const int bet = beta != 0.f;
    if (tb) { /* B is [N, K]: scratch = B^T [K, N] */
        transpose(scratch, B, N, K, ldb);
        B = scratch;
        ldb = N;
    }
    const size_t sai = ta ? 1 : (size_t)lda, sak = ta ? (size_t)lda : 1;
    const int nvec = N / VL, jt = nvec * VL;
    for (int i0 = 0; i0 < M; i0 += MR) {
        const int mr = M - i0 < MR ? M - i0 : MR;
        int k0 = 0, k1 = K, nve = nvec, je = N;
        if (tri == TRI_A_LOWER && i0 + mr < K) k1 = i0 + mr;
        if (tri == TRI_A_UPPER) k0 = i0 < K ? i0 : K;
        if (tri == TRI_C_LOWER) {
            je = i0 + mr < N ? i0 + mr : N;
            nve = (je + VL - 1) / VL < nvec ? (je + VL - 1) / VL : nvec;
        }
        const float *Ai = A + (size_t)i0 * sai + (size_t)k0 * sak;
        const float *Bk = B + (size_t)k0 * ldb;
        for (int v0 = 0; v0 < nve; v0 += NV) {
            const int nv = nve - v0 < NV ? nve - v0 : NV;
            mm_tiles(mr, nv, k1 - k0, alpha, Ai, sai, sak, Bk + (size_t)v0 * VL, (size_t)ldb, bet,
                     C + (size_t)i0 * ldc + (size_t)v0 * VL, (size_t)ldc);
        }
        for (int i = i0; i < i0 + mr; i++) /* columns past the last full vector */
            for (int j = jt; j < je; j++) {
                float acc = 0.f;
                for (int k = k0; k < k1; k++)
                    acc = VFMA(A[(size_t)i * sai + (size_t)k * sak], B[(size_t)k * ldb + j], acc);
                float *c = C + (size_t)i * ldc + j;
                *c = bet ? alpha * acc + *c : alpha * acc;
            }
    }
}

#endif
