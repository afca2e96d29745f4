/* emu_blaslt.cpp — cuBLASLt on the CUDA emulator (docs/emulator.md): D = alpha op(A)
 * op(B) + beta C with the library's column-major layouts, strided batches, and its
 * refusals: a layout whose rows and columns do not fit the operation (INVALID_VALUE), a
 * type or compute type outside what is emulated (f32 x f32 or bf16 x bf16 into f32 with
 * CUBLAS_COMPUTE_32F: NOT_SUPPORTED), a leading dimension below the rows, batch counts
 * that differ, an algorithm used on pointers less aligned than the preference promised
 * when it was chosen. Every operand's extent (all its batches) must lie in one device
 * allocation (a fault otherwise, as a kernel's out-of-bounds access). The products run in
 * issue order on the stream, under capture as a node of the graph.
 *
 * Arithmetic: each dot product in double from the f32 operands (bf16 widened exactly),
 * then alpha acc + beta C rounded once to f32; C is not read when beta == 0 (as the
 * library). A GPU accumulates in f32 in an order of its own: the emulator's products are
 * at least as accurate, and deterministic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cublasLt.h"
#include "emu.h"

struct cublasLtContext {
    int live;
};
struct cublasLtMatmulDescOpaque_emu {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
};
struct cublasLtMatrixLayoutOpaque_emu {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};
struct cublasLtMatmulPreferenceOpaque_emu {
    size_t max_ws;
    uint32_t align[4]; /* A, B, C, D minimum alignments promised (bytes) */
};

#define ALGO_MAGIC 0xD0E3A160ull

static void note(const char *what) { fprintf(stderr, "emu: cuBLASLt: %s\n", what); }

extern "C" {

const char *cublasLtGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

size_t cublasLtGetVersion(void) { return 120800; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cublasLtContext{1};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    *d = new cublasLtMatmulDescOpaque_emu{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n) {
    if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        int32_t v;
        memcpy(&v, buf, n);
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
        (a == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = (cublasOperation_t)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* not emulated */
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    *l = nullptr;
    if (ld < 1 || (uint64_t)ld < rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new cublasLtMatrixLayoutOpaque_emu{type, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t n) {
    if (!l || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        if (n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&l->batch, buf, n);
        return l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        if (n != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&l->stride, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    /* unset alignments: the library assumes 256-byte aligned operands */
    *p = new cublasLtMatmulPreferenceOpaque_emu{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n) {
    if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (n != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->max_ws, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
        return n == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        if (n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, n);
        return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

} /* extern "C" */

static size_t elem_size(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : t == CUDA_R_64F ? 8 : 0;
}

/* the problem D[m,n] = op(A)[m,k] op(B)[k,n] the descriptors describe, or the status the
 * library gives it */
struct problem {
    uint64_t m, n, k;
    int batch;
};
static cublasStatus_t check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                            cublasLtMatrixLayout_t dl, problem *p) {
    if (!d || !a || !b || !c || !dl) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) {
        note("only CUBLAS_COMPUTE_32F with f32 scaling is emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (a->type != b->type || (a->type != CUDA_R_32F && a->type != CUDA_R_16BF) ||
        c->type != CUDA_R_32F || dl->type != CUDA_R_32F) {
        note("types: A and B both f32 or both bf16, C and D f32 are emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    uint64_t m = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
    uint64_t k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols;
    uint64_t n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (kb != k || c->rows != m || c->cols != n) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "shapes do not fit: op(A) is %llux%llu, op(B) %llux%llu, C %llux%llu",
                 (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb,
                 (unsigned long long)n, (unsigned long long)c->rows, (unsigned long long)c->cols);
        note(msg);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (dl->rows != c->rows || dl->cols != c->cols || dl->ld != c->ld || dl->batch != c->batch ||
        dl->stride != c->stride)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* D laid out as C only */
    if (a->batch != c->batch || b->batch != c->batch) {
        note("batch counts of A, B and C differ");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!m || !n || !k) return CUBLAS_STATUS_INVALID_VALUE;
    *p = problem{m, n, k, c->batch};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t pref,
    int requested, cublasLtMatmulHeuristicResult_t *results, int *found) {
    *found = 0;
    if (!h || !pref || requested < 1 || !results) return CUBLAS_STATUS_INVALID_VALUE;
    problem p;
    cublasStatus_t st = check(d, a, b, c, dl, &p);
    if (st) return st;
    uint32_t al = pref->align[0];
    for (int i = 1; i < 4; i++)
        if (pref->align[i] < al) al = pref->align[i];
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MAGIC;
    results[0].algo.data[1] = al; /* the alignment the choice relies on */
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* element i of a matrix of type t, as f32 */
static inline float load(const void *base, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)base)[i];
    uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the bytes a layout's batches span from their base */
static size_t extent(const cublasLtMatrixLayoutOpaque_emu *l) {
    size_t one = ((l->cols - 1) * (size_t)l->ld + l->rows) * elem_size(l->type);
    return one + (size_t)(l->batch - 1) * (size_t)l->stride * elem_size(l->type);
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                         const void *alpha, const void *A,
                                         cublasLtMatrixLayout_t la, const void *B,
                                         cublasLtMatrixLayout_t lb, const void *beta,
                                         const void *C, cublasLtMatrixLayout_t lc, void *D,
                                         cublasLtMatrixLayout_t ld,
                                         const cublasLtMatmulAlgo_t *algo, void *workspace,
                                         size_t workspace_bytes, cudaStream_t s) {
    if (!h || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    problem p;
    cublasStatus_t st = check(d, la, lb, lc, ld, &p);
    if (st) return st;
    if (la->stride < 0 || lb->stride < 0 || lc->stride < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (algo && algo->data[0] == ALGO_MAGIC) {
        uintptr_t u = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D;
        if (u % algo->data[1]) {
            note("an operand is less aligned than the preference promised when the algorithm "
                 "was chosen");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    } else if (algo) {
        note("an algorithm the heuristic did not give");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const cublasOperation_t ta = d->ta, tb = d->tb;
    const cublasLtMatrixLayoutOpaque_emu a = *la, b = *lb, c = *lc;
    auto op = [=](cudaStream_t t) {
        dm_emu::run_on(t, "cublasLtMatmul", [&]() {
            /* every operand inside one live allocation, all its batches (checked when it
             * runs: a replayed graph's operands may have been freed since the capture) */
            dm_emu::region *ra = dm_emu::device_range(A, extent(&a), "cublasLtMatmul", "A");
            dm_emu::region *rb = dm_emu::device_range(B, extent(&b), "cublasLtMatmul", "B");
            dm_emu::region *rc = dm_emu::device_range(C, extent(&c), "cublasLtMatmul", "C");
            dm_emu::region *rd = dm_emu::device_range(D, extent(&c), "cublasLtMatmul", "D");
            dm_emu::region *rw = workspace_bytes ? dm_emu::device_range(workspace, workspace_bytes,
                                                                        "cublasLtMatmul", "workspace")
                                                 : nullptr;
            dm_emu::note_access(ra, false);
            dm_emu::note_access(rb, false);
            if (be != 0.0f) dm_emu::note_access(rc, false);
            dm_emu::note_access(rd, true);
            if (rw) dm_emu::note_access(rw, true);
            const size_t M = p.m, N = p.n, K = p.k;
            std::vector<float> opa(M * K), opb(N * K), out(M * N);
            for (int q = 0; q < p.batch; q++) {
                const char *Ab = (const char *)A + q * a.stride * elem_size(a.type);
                const char *Bb = (const char *)B + q * b.stride * elem_size(b.type);
                const float *Cb = (const float *)C + q * c.stride;
                float *Db = (float *)D + q * c.stride;
                /* op(A) as rows [m][k], op(B) as columns [n][k] */
                for (size_t i = 0; i < M; i++)
                    for (size_t kk = 0; kk < K; kk++)
                        opa[i * K + kk] =
                            load(Ab, a.type, ta == CUBLAS_OP_N ? i + kk * a.ld : kk + i * a.ld);
                for (size_t j = 0; j < N; j++)
                    for (size_t kk = 0; kk < K; kk++)
                        opb[j * K + kk] =
                            load(Bb, b.type, tb == CUBLAS_OP_N ? kk + j * b.ld : j + kk * b.ld);
                for (size_t j = 0; j < N; j++)
                    for (size_t i = 0; i < M; i++) {
                        const float *x = &opa[i * K], *y = &opb[j * K];
                        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                        size_t kk = 0;
                        for (; kk + 4 <= K; kk += 4) {
                            s0 += (double)x[kk] * y[kk];
                            s1 += (double)x[kk + 1] * y[kk + 1];
                            s2 += (double)x[kk + 2] * y[kk + 2];
                            s3 += (double)x[kk + 3] * y[kk + 3];
                        }
                        for (; kk < K; kk++) s0 += (double)x[kk] * y[kk];
                        double v = (double)al * ((s0 + s1) + (s2 + s3));
                        if (be != 0.0f) v += (double)be * Cb[i + j * c.ld];
                        out[i + j * M] = (float)v;
                    }
                for (size_t j = 0; j < N; j++)
                    for (size_t i = 0; i < M; i++) Db[i + j * c.ld] = out[i + j * M];
            }
        });
    };
    cudaError_t e = dm_emu::submit_op(s, "cublasLtMatmul", op);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
