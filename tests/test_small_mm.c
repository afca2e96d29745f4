/* test_small_mm.c — the small matrix products of the chunked delta core
 * (src/kernels/cpu/small_mm.h) against the plain product written as three loops.
 *
 * The kernel promises that each C element is one fixed-order sum over k,
 * acc = VFMA(a_k, b_k, acc), then alpha * acc (+ C when beta), whatever the register tile
 * it falls in: so it must equal the plain loops bit for bit, on every shape (rows past the
 * last full tile, columns past the last full vector), with A and B transposed or not,
 * strided, beta 0 and 1, and with the triangular skips (TRI_A_LOWER / TRI_A_UPPER skip
 * known zeros of A; TRI_C_LOWER computes only j <= i). It is also checked against the
 * product in double (each element within 1e-5 of |alpha| sum_k |a_k b_k| + |C0|, the
 * scale of fp32 rounding in such a sum), so the loops and the kernel cannot be wrong
 * together; and transpose() against a copy made element by element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu/small_mm.h"

/* op(X)[r][c] of X with leading dimension ld, transposed (t) or not */
static float at(const float *X, int ld, int t, int r, int c) {
    return t ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* C[M,N] = alpha op(A) op(B) (+ C when beta), the sum over k in order */
static void plain(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.f;
            for (int k = 0; k < K; k++)
                acc = VFMA(at(A, lda, ta, i, k), at(B, ldb, tb, k, j), acc);
            float *c = C + (size_t)i * ldc + j;
            *c = beta != 0.f ? alpha * acc + *c : alpha * acc;
        }
}

/* the same in double, from C0 (the C before the product), into R; into S the scale of
 * its rounding error: |alpha| sum_k |a_k b_k| (+ |C0| when beta) */
static void exact(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, const float *C0, int ldc, double *R,
                  double *S) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0, mag = 0, c0 = beta != 0.f ? C0[(size_t)i * ldc + j] : 0.0;
            for (int k = 0; k < K; k++) {
                double p = (double)at(A, lda, ta, i, k) * (double)at(B, ldb, tb, k, j);
                acc += p;
                mag += fabs(p);
            }
            R[(size_t)i * N + j] = alpha * acc + c0;
            S[(size_t)i * N + j] = fabs(alpha) * mag + fabs(c0);
        }
}

/* One product of shape M x N x K with the given transposes, beta and triangle: the kernel
 * against the plain loops (bitwise) and the double product. Returns the failures. */
static int one(int ta, int tb, int M, int N, int K, int beta, int tri, uint64_t seed) {
    const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    const int lda = ac + 3, ldb = bc + 5, ldc = N + 2; /* strided: the padding is not read */
    float *A = t_alloc((size_t)ar * lda), *B = t_alloc((size_t)br * ldb);
    float *C = t_alloc((size_t)M * ldc), *P = t_alloc((size_t)M * ldc);
    float *C0 = t_alloc((size_t)M * ldc), *scratch = t_alloc((size_t)N * K);
    double *R = t_allocd((size_t)M * N), *S = t_allocd((size_t)M * N);
    t_fill_normal(A, (size_t)ar * lda, seed, 1.f);
    t_fill_normal(B, (size_t)br * ldb, seed + 1, 1.f);
    t_fill_normal(C0, (size_t)M * ldc, seed + 2, 1.f);
    /* the zeros a triangle promises: op(A) lower (k <= i only) or upper (k >= i only) */
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            if ((tri == TRI_A_LOWER && k > i) || (tri == TRI_A_UPPER && k < i))
                A[ta ? (size_t)k * lda + i : (size_t)i * lda + k] = 0.f;
    const float alpha = 0.75f;
    memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
    memcpy(P, C0, sizeof(float) * (size_t)M * ldc);
    mm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta ? 1.f : 0.f, C, ldc, scratch, tri);
    plain(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta ? 1.f : 0.f, P, ldc);
    exact(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta ? 1.f : 0.f, C0, ldc, R, S);
    int bad = 0, first = 1;
    double worst = 0; /* the largest error relative to its scale */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            if (tri == TRI_C_LOWER && j > i) continue; /* not computed */
            float c = C[(size_t)i * ldc + j], p = P[(size_t)i * ldc + j];
            double e = fabs(c - R[(size_t)i * N + j]), sc = S[(size_t)i * N + j];
            if (sc > 0) e /= sc; /* a zero scale (a row of zeros): the error itself */
            if (!(e <= worst)) worst = e; /* NaN included */
            if (memcmp(&c, &p, sizeof c) != 0) {
                bad++;
                if (first)
                    printf("  ta %d tb %d %dx%dx%d beta %d tri %d: C[%d][%d] = %.9g, the plain "
                           "loops give %.9g\n", ta, tb, M, N, K, beta, tri, i, j, c, p);
                first = 0;
            }
        }
    CHECKF(worst <= 1e-5, "ta %d tb %d %dx%dx%d beta %d tri %d: error %.3g of the scale "
           "(|alpha| sum |a b| + |C0|) against the double product", ta, tb, M, N, K, beta, tri,
           worst);
    for (int i = 0; i < M; i++) /* the padding of C is never written */
        for (int j = N; j < ldc; j++)
            CHECKF(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j],
                   "%dx%dx%d: C[%d][%d] past N written", M, N, K, i, j);
    free(A), free(B), free(C), free(P), free(C0), free(scratch), free(R), free(S);
    return bad;
}

/* rows: below, at and past the 4-row tile; columns: below, at and past a vector and the
 * 4-vector tile, the delta core's 16..256; K: 1 to the delta core's 256 */
static const int Ms[] = {1, 3, 4, 5, 17, 32, 64, 65};
static const int Ns[] = {1, 3, 7, 8, 9, 16, 17, 33, 64, 65, 128, 256};
static const int Ks[] = {1, 2, 5, 16, 33, 64, 128, 256};
#define LEN(x) ((int)(sizeof(x) / sizeof(x)[0]))

/* every shape with transposes ta, tb, both betas, under triangle tri */
static void sweep(int tri) {
    int bad = 0, n = 0;
    uint64_t seed = 100 + 1000 * (uint64_t)tri;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int a = 0; a < LEN(Ms); a++)
                for (int b = 0; b < LEN(Ns); b++)
                    for (int c = 0; c < LEN(Ks); c++, seed += 3) {
                        int M = Ms[a], N = Ns[b], K = Ks[c];
                        if ((long)M * N * K > 2000000) continue; /* enough of the biggest */
                        if (tri == TRI_C_LOWER && N > M + 64) continue;
                        bad += one(ta, tb, M, N, K, (int)(seed % 2), tri, seed);
                        n++;
                    }
    printf("  %d products, %d elements differ from the plain loops\n", n, bad);
    CHECK(n > 500);
    CHECKF(bad == 0, "%d elements differ from the plain loops", bad);
}

TEST(small_mm_full_matches_plain_loops) { sweep(TRI_NONE); }
TEST(small_mm_lower_a_matches_plain_loops) { sweep(TRI_A_LOWER); }
TEST(small_mm_upper_a_matches_plain_loops) { sweep(TRI_A_UPPER); }
TEST(small_mm_lower_c_matches_plain_loops) { sweep(TRI_C_LOWER); }

TEST(small_mm_transpose_matches_copy) {
    static const int sides[] = {1, 5, 15, 16, 17, 31, 32, 33, 48, 64, 65};
    int bad = 0;
    for (int a = 0; a < LEN(sides); a++)
        for (int b = 0; b < LEN(sides); b++) {
            int N = sides[a], K = sides[b], ldb = K + 7;
            float *B = t_alloc((size_t)N * ldb), *T = t_alloc((size_t)K * N);
            t_fill_normal(B, (size_t)N * ldb, (uint64_t)(7 + a * 31 + b), 1.f);
            transpose(T, B, N, K, ldb);
            for (int k = 0; k < K; k++)
                for (int j = 0; j < N; j++)
                    bad += T[(size_t)k * N + j] != B[(size_t)j * ldb + k];
            free(B), free(T);
        }
    CHECKF(bad == 0, "%d elements of the transposes are not B's", bad);
}
