/* blas.c — the matrix products through cuBLASLt: row-major products as cblas_sgemm takes
 * them, in true f32 (CUBLAS_COMPUTE_32F: TF32 off) or on bf16 operands with f32
 * accumulation, and the dense layer's three products on top.
 *
 * Determinism: the algorithm of each shape is chosen once (the heuristic's first answer
 * for the shape, the operands' alignment and the fixed workspace) and kept in the
 * context, so every later call of that shape runs the same algorithm; split-K schemes that
 * reduce in place in the output are excluded (the others reduce in a separate, fixed
 * step). cuBLAS documents bitwise-equal results run to run for the same algorithm on the
 * same GPU architecture, SM count and toolkit.
 *
 * Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: cuBLASLt
 * is called with the operands swapped and the dimensions read off as columns. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda.h"
#include "ref/ns_sched.h" /* the Stiefel retraction's schedule */

#define BLAS_WORKSPACE ((size_t)32 << 20) /* bytes: fixed, so the choices are too */
#define BLAS_CACHE 256                    /* shapes whose algorithm is kept */

typedef struct {
    int bf16, ta, tb, M, N, K, lda, ldb, ldc, align, batch;
    long long sa, sb, sc;
    cublasLtMatmulAlgo_t algo;
} blas_choice;

struct dm_cuda_blas {
    cublasLtHandle_t lt;
    void *ws;
    int n;
    blas_choice cache[BLAS_CACHE];
};

dm_cuda_blas *dm_cuda_blas_create(const char **why) {
    dm_cuda_blas *b = calloc(1, sizeof *b);
    if (!b) {
        *why = "out of host memory";
        return NULL;
    }
    cublasStatus_t st = cublasLtCreate(&b->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        *why = cublasLtGetStatusString(st);
        free(b);
        return NULL;
    }
    cudaError_t e = cudaMalloc(&b->ws, BLAS_WORKSPACE);
    if (e != cudaSuccess) {
        *why = cudaGetErrorString(e);
        cublasLtDestroy(b->lt);
        free(b);
        return NULL;
    }
    return b;
}

void dm_cuda_blas_free(dm_cuda_blas *b) {
    if (!b) return;
    cudaFree(b->ws);
    cublasLtDestroy(b->lt);
    free(b);
}

/* the largest power of two <= 256 that divides every operand's address */
static int alignment(const void *A, const void *B, const void *C) {
    uintptr_t u = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | 256;
    return (int)(u & (~u + 1));
}

#define LT(call)                                                                         \
    do {                                                                                 \
        cublasStatus_t st_ = (call);                                                     \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                              \
            err = DM_CUDA_EBLAS - (int)st_;                                              \
            goto done;                                                                   \
        }                                                                                \
    } while (0)

/* a layout of `batch` matrices `stride` elements apart */
static cublasStatus_t set_batch(cublasLtMatrixLayout_t l, int batch, long long stride) {
    if (batch == 1) return CUBLAS_STATUS_SUCCESS;
    cublasStatus_t st =
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof stride);
}

int dm_cuda_gemm(dm_cuda_blas *b, int bf16, int transA, int transB, int M, int N, int K,
                 float alpha, const void *A, int lda, const void *B, int ldb, float beta,
                 float *C, int ldc, dm_cuda_stream s) {
    return dm_cuda_gemm_batched(b, bf16, transA, transB, M, N, K, alpha, A, lda, 0, B, ldb, 0,
                                beta, C, ldc, 0, 1, s);
}

int dm_cuda_gemm_batched(dm_cuda_blas *b, int bf16, int transA, int transB, int M, int N, int K,
                         float alpha, const void *A, int lda, long long strideA, const void *B,
                         int ldb, long long strideB, float beta, float *C, int ldc,
                         long long strideC, int batch, dm_cuda_stream s) {
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0) return DM_CUDA_EBADSHAPE; /* C = beta C: not a product; callers skip it */
    int err = 0;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cudaDataType_t in_t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    /* column-major: D[N,M] = opX(B) opY(A); X = T when B is stored [N,K] row-major */
    cublasOperation_t opx = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opy = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opx, sizeof opx));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opy, sizeof opy));
    /* the stored matrices, column-major: B as [N,K] (or [K,N] when transposed), A as
     * [K,M] (or [M,K]), C as [N,M] */
    LT(cublasLtMatrixLayoutCreate(&la, in_t, transB ? K : N, transB ? N : K, ldb));
    LT(cublasLtMatrixLayoutCreate(&lb, in_t, transA ? M : K, transA ? K : M, lda));
    LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, ldc));
    LT(set_batch(la, batch, strideB));
    LT(set_batch(lb, batch, strideA));
    LT(set_batch(lc, batch, strideC));

    int align = alignment(A, B, C);
    blas_choice *ch = NULL;
    for (int i = 0; i < b->n; i++) {
        blas_choice *c = &b->cache[i];
        if (c->bf16 == bf16 && c->ta == transA && c->tb == transB && c->M == M && c->N == N &&
            c->K == K && c->lda == lda && c->ldb == ldb && c->ldc == ldc && c->align == align &&
            c->batch == batch && c->sa == strideA && c->sb == strideB && c->sc == strideC) {
            ch = c;
            break;
        }
    }
    cublasLtMatmulAlgo_t algo;
    if (ch) {
        algo = ch->algo;
    } else {
        size_t ws = BLAS_WORKSPACE;
        uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                           CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
        uint32_t al = (uint32_t)align;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws, sizeof ws));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &schemes, sizeof schemes));
        const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4; i++)
            LT(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        LT(cublasLtMatmulAlgoGetHeuristic(b->lt, desc, la, lb, lc, lc, pref, 1, &res, &found));
        if (found < 1) {
            err = DM_CUDA_EBLAS - (int)CUBLAS_STATUS_NOT_SUPPORTED;
            goto done;
        }
        algo = res.algo;
        if (b->n < BLAS_CACHE)
            b->cache[b->n++] = (blas_choice){bf16, transA, transB, M, N, K, lda, ldb, ldc,
                                             align, batch, strideA, strideB, strideC, algo};
    }
    LT(cublasLtMatmul(b->lt, desc, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &algo, b->ws,
                      BLAS_WORKSPACE, s));
    err = (int)cudaGetLastError();
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return err;
}

int dm_cuda_matmul_fwd(dm_cuda_blas *b, int bf16, float *out, const void *in, const void *W,
                       const float *bias, int N, int K, int O, dm_cuda_stream s) {
    int err = K > 0 ? dm_cuda_gemm(b, bf16, 0, 1, N, O, K, 1.0f, in, K, W, K, 0.0f, out, O, s)
                    : dm_cuda_zero(out, (size_t)N * O * sizeof(float), s);
    if (!err && bias) err = dm_cuda_bias_add(out, bias, N, O, s);
    return err;
}

int dm_cuda_matmul_bwd_data(dm_cuda_blas *b, int bf16, float *din, const void *dout,
                            const void *W, int N, int K, int O, int din_acc, dm_cuda_stream s) {
    if (O <= 0) return din_acc ? 0 : dm_cuda_zero(din, (size_t)N * K * sizeof(float), s);
    return dm_cuda_gemm(b, bf16, 0, 0, N, K, O, 1.0f, dout, O, W, K, din_acc ? 1.0f : 0.0f, din,
                        K, s);
}

int dm_cuda_matmul_bwd_weight(dm_cuda_blas *b, int bf16, float *dW, float *dbias,
                              const void *dout, const float *dout_f32, const void *in, int N,
                              int K, int O, dm_cuda_stream s) {
    if (N <= 0) return 0;
    int err = dm_cuda_gemm(b, bf16, 1, 0, O, K, N, 1.0f, dout, O, in, K, 1.0f, dW, K, s);
    if (!err && dbias) err = dm_cuda_bias_grad(dbias, dout_f32, N, O, s);
    return err;
}

/* Newton–Schulz: work = [X ping-pong: n len][A: n m m][B: n m m][pad][norms: n doubles],
 * the pad (0 or 1 float) aligning the doubles to 8 bytes when n (len + 2 m m) is odd */
static size_t ns_norms_at(int n, size_t len, size_t mm) {
    size_t off = (size_t)n * (len + 2 * mm);
    return off + (off & 1);
}
size_t dm_cuda_ns_work(int n, int rows, int cols) {
    size_t len = (size_t)rows * cols, m = (size_t)(rows < cols ? rows : cols);
    return ns_norms_at(n, len, m * m) + 2 * (size_t)n;
}

/* the iteration's two shapes of product over n slices of [rows, cols] (m = min):
 * the Gram matrix A = X X^T (X^T X when tall), and Y = B X (X B^T when tall); operands f32
 * or bf16 as `bf16` */
static int ns_gram(dm_cuda_blas *b, int bf16, int rows, int cols, int m, const void *X,
                   float *A, int n, dm_cuda_stream s) {
    const int wide = rows <= cols;
    const long long len = (long long)rows * cols, mm = (long long)m * m;
    return dm_cuda_gemm_batched(b, bf16, !wide, wide, m, m, wide ? cols : rows, 1.0f, X, cols,
                                len, X, cols, len, 0.0f, A, m, mm, n, s);
}
static int ns_times(dm_cuda_blas *b, int bf16, int rows, int cols, int m, const void *B,
                    const void *X, float *Y, int n, dm_cuda_stream s) {
    const long long len = (long long)rows * cols, mm = (long long)m * m;
    if (rows <= cols)
        return dm_cuda_gemm_batched(b, bf16, 0, 0, rows, cols, m, 1.0f, B, m, mm, X, cols, len,
                                    0.0f, Y, cols, len, n, s);
    return dm_cuda_gemm_batched(b, bf16, 0, 1, rows, cols, m, 1.0f, X, cols, len, B, m, mm, 0.0f,
                                Y, cols, len, n, s);
}

/* bf16 Newton–Schulz: work = [Y: n len f32][A: n m m f32][pad][norms: n doubles], then the
 * bf16 copies [X0: n len][X1: n len][Ab: n m m][Bb: n m m], each starting 256 bytes
 * aligned: their offsets in floats from work */
typedef struct { size_t norms, x0, x1, ab, bb, end; } ns_bf16_layout;
static size_t up64(size_t floats) { return (floats + 63) & ~(size_t)63; }
static ns_bf16_layout ns_bf16_at(int n, int rows, int cols) {
    size_t m = (size_t)(rows < cols ? rows : cols);
    size_t nl = (size_t)n * rows * cols, nm = (size_t)n * m * m; /* elements */
    ns_bf16_layout l;
    l.norms = (nl + nm) + ((nl + nm) & 1);
    l.x0 = up64(l.norms + 2 * (size_t)n);
    l.x1 = l.x0 + up64((nl + 1) / 2);
    l.ab = l.x1 + up64((nl + 1) / 2);
    l.bb = l.ab + up64((nm + 1) / 2);
    l.end = l.bb + up64((nm + 1) / 2);
    return l;
}
size_t dm_cuda_ns_bf16_work(int n, int rows, int cols) { return ns_bf16_at(n, rows, cols).end; }

int dm_cuda_ns_bf16(dm_cuda_blas *b, float *out, const float *G, int n, int rows, int cols,
                    const float (*abc)[3], int steps, double safety, float *work,
                    dm_cuda_stream s) {
    if (n <= 0 || rows <= 0 || cols <= 0) return 0;
    const int wide = rows <= cols, m = wide ? rows : cols;
    const long long len = (long long)rows * cols, mm = (long long)m * m;
    size_t nl = (size_t)n * (size_t)len, nm = (size_t)n * (size_t)mm;
    ns_bf16_layout l = ns_bf16_at(n, rows, cols);
    float *Y = work, *A = work + nl;
    double *norms = (double *)(work + l.norms);
    uint16_t *xb[2] = {(uint16_t *)(work + l.x0), (uint16_t *)(work + l.x1)};
    uint16_t *ab = (uint16_t *)(work + l.ab), *bb = (uint16_t *)(work + l.bb);
    int err = dm_cuda_ns_scale(Y, norms, G, n, (size_t)len, safety, s);
    if (!err) err = dm_cuda_bf16_from_f32(xb[0], Y, nl, s);
    for (int t = 0; t < steps && !err; t++) {
        const uint16_t *X = xb[t & 1];
        int last = t == steps - 1;
        float *P = last ? out : Y; /* the product B X, f32 */
        err = ns_gram(b, 1, rows, cols, m, X, A, n, s);
        if (!err) err = dm_cuda_bf16_from_f32(ab, A, nm, s);
        if (!err)
            err = dm_cuda_gemm_batched(b, 1, 0, 0, m, m, m, abc[t][2], ab, m, mm, ab, m, mm,
                                       abc[t][1], A, m, mm, n, s);
        if (!err) err = dm_cuda_ns_linear(A, A, n, m, abc[t][0], 1.0f, s); /* A_ii += a */
        if (!err) err = dm_cuda_bf16_from_f32(bb, A, nm, s);
        if (!err) err = ns_times(b, 1, rows, cols, m, bb, X, P, n, s);
        if (!err && !last) err = dm_cuda_bf16_from_f32(xb[(t + 1) & 1], P, nl, s);
    }
    return err;
}

int dm_cuda_ns(dm_cuda_blas *b, float *out, const float *G, int n, int rows, int cols,
               const float (*abc)[3], int steps, double safety, float *work, dm_cuda_stream s) {
    if (n <= 0 || rows <= 0 || cols <= 0) return 0;
    const int wide = rows <= cols, m = wide ? rows : cols;
    const long long len = (long long)rows * cols, mm = (long long)m * m;
    float *A = work + (size_t)n * len, *B = A + (size_t)n * mm;
    double *norms = (double *)(work + ns_norms_at(n, (size_t)len, (size_t)mm));
    /* ping-pong between out and work so that the last step lands in out (X0 into work
     * when the step count is odd; safe when out == G: the scaling is elementwise) */
    float *buf[2] = {out, work};
    int cur = steps & 1;
    int err = dm_cuda_ns_scale(buf[cur], norms, G, n, (size_t)len, safety, s);
    for (int t = 0; t < steps && !err; t++) {
        const float *X = buf[cur];
        float *Y = buf[cur ^ 1];
        err = ns_gram(b, 0, rows, cols, m, X, A, n, s);
        if (!err) err = dm_cuda_ns_linear(B, A, n, m, abc[t][0], abc[t][1], s);
        if (!err)
            err = dm_cuda_gemm_batched(b, 0, 0, 0, m, m, m, abc[t][2], A, m, mm, A, m, mm, 1.0f, B,
                                       m, mm, n, s);
        if (!err) err = ns_times(b, 0, rows, cols, m, B, X, Y, n, s);
        cur ^= 1;
    }
    return err;
}

/* The Stiefel retraction: work = [X: n len][Y: n len][A: n m m][B: n m m][pad][state: n
 * DM_RS_STATE doubles] */
static size_t rs_state_at(int n, size_t len, size_t mm) {
    size_t off = (size_t)n * (2 * len + 2 * mm);
    return off + (off & 1);
}
size_t dm_cuda_retract_stiefel_work(int n, int rows, int cols) {
    size_t len = (size_t)rows * cols, m = (size_t)(rows < cols ? rows : cols);
    return rs_state_at(n, len, m * m) + 2 * (size_t)n * DM_RS_STATE;
}

/* Y = (a I + b A + c A^2) X over the n slices (dm_cuda_ns's step, A their Gram matrices) */
static int rs_poly(dm_cuda_blas *b, int rows, int cols, int m, const float *X, const float *A,
                   float *B, float *Y, int n, float a, float bb, float c, dm_cuda_stream s) {
    const long long mm = (long long)m * m;
    int err = dm_cuda_ns_linear(B, A, n, m, a, bb, s);
    if (!err)
        err = dm_cuda_gemm_batched(b, 0, 0, 0, m, m, m, c, A, m, mm, A, m, mm, 1.0f, B, m, mm, n,
                                   s);
    return err ? err : ns_times(b, 0, rows, cols, m, B, X, Y, n, s);
}

int dm_cuda_retract_stiefel(dm_cuda_blas *b, float *W, const float *sc, int n, int rows, int cols,
                            float *work, dm_cuda_stream s) {
    if (n <= 0 || rows <= 0 || cols <= 0) return 0;
    const int m = rows < cols ? rows : cols;
    const size_t len = (size_t)rows * cols, mm = (size_t)m * m;
    float *X = work, *Y = X + (size_t)n * len, *A = Y + (size_t)n * len, *B = A + (size_t)n * mm;
    double *st = (double *)(work + rs_state_at(n, len, mm));
    int err = dm_cuda_rs_init(st, sc, n, s);
    if (!err) err = dm_cuda_rs_begin(X, W, sc, st, len, n, s); /* X = W / s */
    if (!err) err = ns_gram(b, 0, rows, cols, m, X, A, n, s);
    if (!err) err = dm_cuda_rs_defect(st, A, n, m, 0, s);
    for (int round = 0; round < DM_PE8_ROUNDS && !err; round++) {
        err = dm_cuda_rs_round(st, X, A, n, len, m, round, s);
        if (!err) err = dm_cuda_rs_apply(X, NULL, st, sc, len, n, 0, s); /* X / (1.01 bound) */
        for (int t = 0; t < 8 && !err; t++) {
            float a, bb, c;
            dm_pe8_coeffs(t, &a, &bb, &c);
            err = ns_gram(b, 0, rows, cols, m, X, A, n, s);
            if (!err) err = rs_poly(b, rows, cols, m, X, A, B, Y, n, a, bb, c, s);
            if (!err) err = dm_cuda_rs_apply(X, Y, st, sc, len, n, 1, s);
        }
        if (!err) err = ns_gram(b, 0, rows, cols, m, X, A, n, s);
        if (!err) err = dm_cuda_rs_defect(st, A, n, m, 1, s);
    }
    for (int it = 0; it < DM_RETRACT_QUINTIC_MAX && !err; it++) {
        err = dm_cuda_rs_quintic(st, n, s);
        if (!err) err = rs_poly(b, rows, cols, m, X, A, B, Y, n, 1.875f, -1.25f, 0.375f, s);
        if (!err) err = dm_cuda_rs_apply(X, Y, st, sc, len, n, 1, s);
        if (!err) err = ns_gram(b, 0, rows, cols, m, X, A, n, s);
        if (!err) err = dm_cuda_rs_defect(st, A, n, m, 2, s);
    }
    if (!err) err = dm_cuda_rs_apply(W, X, st, sc, len, n, 2, s); /* W = s X */
    return err;
}
