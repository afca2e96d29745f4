/* selftest.cu — the CUDA emulator's own tests (docs/emulator.md): each case runs a
 * kernel or a runtime call with one classic GPU bug and shows the emulator reports it (a
 * "emu: FAULT: ..." line, or the runtime's error code), and a few correct ones show it
 * reports nothing. CMakeLists.txt registers each case as emu_selftest_<case> with the
 * line its output must contain. Usage: emu_selftest CASE */
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc failed\n");
        exit(1);
    }
    return p;
}
/* the case's verdict when it ends without a fault: the error code the runtime gave */
static int said(const char *what, int got, int want) {
    printf("%s: %s\n", got == want ? "ok" : "unexpected", what);
    return got == want ? 0 : 1;
}

/* C [32, 16] = A [32, 32] B [32, 16] on the warps' matrix operations (bf16 bits, float
 * sums): warp w takes rows 16 w; A read from `off` elements in (misaligned when off is not
 * a multiple of 16) */
static __global__ void k_wmma(float *C, const uint16_t *A, const uint16_t *B, int off) {
    using namespace nvcuda;
    const int w = threadIdx.x / 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < 32; k += 16) {
        wmma::load_matrix_sync(a, (const __nv_bfloat16 *)(const void *)(A + off + 16 * w * 32 + k),
                               32);
        wmma::load_matrix_sync(b, (const __nv_bfloat16 *)(const void *)(B + k * 16), 16);
        wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + 16 * w * 16, c, 16, wmma::mem_row_major);
}

/* ---- kernels, each with its bug ---- */
static __global__ void k_write_n(float *x, int n) { /* one element past the end */
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.0f;
}
static __global__ void k_read(float *y, const float *x) { y[threadIdx.x] = x[threadIdx.x]; }
static __global__ void k_read_double(double *y, const double *x) { y[0] = x[0]; }
static __global__ void k_no_barrier(float *out) { /* thread 0 fills, the others read at once */
    __shared__ float s[32];
    float *p = s; /* accesses through a pointer are race-checked (docs/emulator.md) */
    if (threadIdx.x == 0)
        for (int i = 0; i < 32; i++) p[i] = (float)i;
    out[threadIdx.x] = p[threadIdx.x];
}
static __global__ void k_no_barrier_dyn(float *out) {
    extern __shared__ float sm[];
    sm[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = sm[(threadIdx.x + 1) % blockDim.x]; /* the neighbour's, unsynchronised */
}
static __global__ void k_all_blocks_write(float *out) {
    if (threadIdx.x == 0) out[0] = (float)blockIdx.x;
}
static __global__ void k_divergent_barrier(float *out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
static __global__ void k_shfl_exited(float *out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
static __global__ void k_big_smem(float *out) {
    extern __shared__ float sm[];
    sm[threadIdx.x] = 1.0f;
    out[threadIdx.x] = sm[threadIdx.x];
}
/* correct: a block sum with a shared tree and barriers, then warp shuffles and a vote */
static __global__ void k_sum(float *out, const float *x) {
    extern __shared__ float part[];
    part[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h >= 32; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        float v = part[threadIdx.x];
        for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
        unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
        if (threadIdx.x == 0) out[blockIdx.x] = b == 0xffffffffu ? v : -1.0f;
    }
}

static int case_oob(void) {
    float *x = (float *)dalloc(100 * sizeof(float));
    k_write_n<<<1, 128>>>(x, 100);
    return said("no fault", cudaDeviceSynchronize(), 1);
}
static int case_host_pointer(void) {
    float host[32] = {0};
    float *y = (float *)dalloc(sizeof host);
    k_read<<<1, 32>>>(y, (const float *)host);
    return said("no fault", 0, 1);
}
static int case_use_after_free(void) {
    float *x = (float *)dalloc(32 * sizeof(float)), *y = (float *)dalloc(32 * sizeof(float));
    cudaFree(x);
    k_read<<<1, 32>>>(y, (const float *)x);
    return said("no fault", 0, 1);
}
static int case_misaligned(void) {
    char *m = (char *)dalloc(64);
    k_read_double<<<1, 1>>>((double *)(m + 16), (const double *)(m + 4));
    return said("no fault", 0, 1);
}
static int case_missing_barrier(void) {
    float *out = (float *)dalloc(32 * sizeof(float));
    k_no_barrier<<<1, 32>>>(out);
    return said("no fault", 0, 1);
}
static int case_missing_barrier_dynamic(void) {
    float *out = (float *)dalloc(64 * sizeof(float));
    k_no_barrier_dyn<<<1, 64, 64 * sizeof(float)>>>(out);
    return said("no fault", 0, 1);
}
static int case_cross_block(void) {
    float *out = (float *)dalloc(sizeof(float));
    k_all_blocks_write<<<4, 32>>>(out);
    return said("no fault", 0, 1);
}
static int case_divergent_barrier(void) {
    float *out = (float *)dalloc(64 * sizeof(float));
    k_divergent_barrier<<<1, 64>>>(out);
    return said("no fault", 0, 1);
}
static int case_shuffle_exited(void) {
    float *out = (float *)dalloc(32 * sizeof(float));
    k_shfl_exited<<<1, 32>>>(out);
    return said("no fault", 0, 1);
}
static int case_smem_limit(void) {
    float *out = (float *)dalloc(32 * sizeof(float));
    k_big_smem<<<1, 32, 64 * 1024>>>(out); /* over 48 KiB without the attribute */
    int e1 = cudaGetLastError();
    cudaFuncSetAttribute((const void *)k_big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         64 * 1024);
    k_big_smem<<<1, 32, 64 * 1024>>>(out);
    int e2 = cudaGetLastError();
    return said("64 KiB refused, then accepted once raised",
                e1 == cudaErrorInvalidValue && e2 == cudaSuccess, 1);
}
static int case_block_too_big(void) {
    float *out = (float *)dalloc(32 * sizeof(float));
    k_big_smem<<<1, 2048>>>(out);
    return said("2048 threads refused", cudaGetLastError(), cudaErrorInvalidConfiguration);
}
static int case_capture_legacy(void) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *x = (float *)dalloc(32 * sizeof(float)), *y = (float *)dalloc(32 * sizeof(float));
    cudaMemsetAsync(x, 0, 32 * sizeof(float), s);
    cudaStreamSynchronize(s);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    k_read<<<1, 32, 0, s>>>(y, (const float *)x);
    k_read<<<1, 32>>>(y, (const float *)x); /* the legacy stream while capturing */
    int e1 = cudaGetLastError();
    cudaGraph_t g = NULL;
    int e2 = cudaStreamEndCapture(s, &g);
    return said("the legacy-stream launch refused and the capture invalidated",
                e1 == cudaErrorStreamCaptureImplicit && e2 == cudaErrorStreamCaptureInvalidated &&
                    g == NULL,
                1);
}
static int case_stream_race(void) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *x = (float *)dalloc(32 * sizeof(float)), *y = (float *)dalloc(32 * sizeof(float));
    cudaMemsetAsync(x, 0, 32 * sizeof(float), NULL); /* legacy stream */
    k_read<<<1, 32, 0, s>>>(y, (const float *)x);     /* a non-blocking stream: unordered */
    return said("no fault", 0, 1);
}
static int case_stream_event_orders(void) { /* correct: an event orders the two streams */
    cudaStream_t s;
    cudaEvent_t e;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEventCreate(&e);
    float *x = (float *)dalloc(32 * sizeof(float)), *y = (float *)dalloc(32 * sizeof(float));
    cudaMemsetAsync(x, 0, 32 * sizeof(float), NULL);
    cudaEventRecord(e, NULL);
    cudaStreamWaitEvent(s, e, 0);
    k_read<<<1, 32, 0, s>>>(y, (const float *)x);
    float h[32];
    cudaStreamSynchronize(s);
    cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
    cudaEventDestroy(e);
    cudaStreamDestroy(s);
    return said("ordered by an event, no fault", h[0] == 0.0f && h[31] == 0.0f, 1);
}
static int case_graph_replays(void) { /* correct: a captured graph replays its launch */
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float hx[256], hy[1] = {0};
    for (int i = 0; i < 256; i++) hx[i] = 1.0f + (float)(i % 3);
    float *x = (float *)dalloc(sizeof hx), *y = (float *)dalloc(sizeof(float));
    cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
    cudaMemset(y, 0, sizeof(float));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    k_sum<<<1, 256, 256 * sizeof(float), s>>>(y, (const float *)x);
    int e = cudaStreamEndCapture(s, &g);
    float before;
    cudaMemcpy(&before, y, sizeof before, cudaMemcpyDeviceToHost); /* captured, not run */
    if (!e) e = cudaGraphInstantiate(&ge, g, 0);
    if (!e) e = cudaGraphLaunch(ge, s);
    if (!e) e = cudaStreamSynchronize(s);
    cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost);
    float want = 0;
    for (int i = 0; i < 256; i++) want += hx[i];
    printf("sum %g (want %g), before the replay %g\n", hy[0], want, before);
    if (!e) {
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    cudaStreamDestroy(s);
    return said("the replay computes the sum", !e && before == 0.0f && hy[0] == want, 1);
}
static int case_block_sum(void) { /* correct: barriers and shuffles in every order */
    float hx[512], hy[2];
    for (int i = 0; i < 512; i++) hx[i] = (float)(i % 7) + 0.5f;
    float *x = (float *)dalloc(sizeof hx), *y = (float *)dalloc(sizeof hy);
    cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
    k_sum<<<2, 256, 256 * sizeof(float)>>>(y, (const float *)x);
    k_sum<<<2, 256, 256 * sizeof(float)>>>(y, (const float *)x);
    int e = cudaGetLastError();
    cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost);
    float w0 = 0, w1 = 0;
    for (int i = 0; i < 256; i++) w0 += hx[i], w1 += hx[256 + i];
    printf("sums %g %g (want %g %g)\n", hy[0], hy[1], w0, w1);
    return said("block sums", !e && hy[0] == w0 && hy[1] == w1, 1);
}
static int case_blas_shapes(void) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    /* A 4x3, B 4x5: op(A) op(B) does not fit (3 != 4) */
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 3, 4);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 4, 5, 4);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 4, 5, 4);
    void *A = dalloc(4096), *B = dalloc(4096), *C = dalloc(4096);
    float one = 1.0f, zero = 0.0f;
    int st = cublasLtMatmul(h, d, &one, A, la, B, lb, &zero, C, lc, C, lc, NULL, NULL, 0, NULL);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
    return said("CUBLAS_STATUS_INVALID_VALUE", st, CUBLAS_STATUS_INVALID_VALUE);
}
static int case_blas_range(void) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 8, 8, 8);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 8, 8, 8);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 8, 8, 8);
    void *A = dalloc(64 * 4), *B = dalloc(63 * 4), *C = dalloc(64 * 4); /* B one short */
    float one = 1.0f, zero = 0.0f;
    cublasLtMatmul(h, d, &one, A, la, B, lb, &zero, C, lc, C, lc, NULL, NULL, 0, NULL);
    return said("no fault", 0, 1);
}

/* the product of bf16 small integers (exact in any order) run on `threads` threads: 1 when
 * it equals the host's, 0 when not, -1 when the launch failed */
static int wmma_run(int threads, int off) {
    static float got[512], want[512];
    uint16_t hA[32 * 32 + 16], hB[32 * 16];
    for (int i = 0; i < 32 * 32 + 16; i++) {
        float f = (float)((i * 7) % 9 - 4);
        uint32_t u;
        memcpy(&u, &f, 4);
        hA[i] = (uint16_t)(u >> 16);
    }
    for (int i = 0; i < 32 * 16; i++) {
        float f = (float)((i * 5) % 7 - 3);
        uint32_t u;
        memcpy(&u, &f, 4);
        hB[i] = (uint16_t)(u >> 16);
    }
    uint16_t *A = (uint16_t *)dalloc(sizeof hA), *B = (uint16_t *)dalloc(sizeof hB);
    float *C = (float *)dalloc(32 * 16 * sizeof(float));
    cudaMemcpy(A, hA, sizeof hA, cudaMemcpyHostToDevice);
    cudaMemcpy(B, hB, sizeof hB, cudaMemcpyHostToDevice);
    k_wmma<<<1, threads>>>(C, (const uint16_t *)A, (const uint16_t *)B, off);
    int e = cudaGetLastError();
    cudaMemcpy(got, C, 32 * 16 * sizeof(float), cudaMemcpyDeviceToHost);
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 16; c++) {
            float s = 0;
            for (int k = 0; k < 32; k++) {
                uint32_t ua = (uint32_t)hA[off + r * 32 + k] << 16;
                uint32_t ub = (uint32_t)hB[k * 16 + c] << 16;
                float fa, fb;
                memcpy(&fa, &ua, 4);
                memcpy(&fb, &ub, 4);
                s += fa * fb;
            }
            want[r * 16 + c] = s;
        }
    printf("C[0] %g (want %g), C[511] %g (want %g)\n", got[0], want[0], got[511], want[511]);
    return e ? -1 : memcmp(got, want, sizeof got) == 0;
}
static int case_wmma_product(void) { /* correct: a product of two warps' tiles */
    return said("the tiles' product", wmma_run(64, 0), 1);
}
static int case_wmma_misaligned(void) { /* A 8 bytes past a 256-bit boundary */
    wmma_run(64, 4);
    return said("no fault", 0, 1);
}
static int case_wmma_partial_warp(void) { /* a block of 48 threads: its second warp has 16 */
    wmma_run(48, 0);
    return said("no fault", 0, 1);
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"oob", case_oob},
        {"host_pointer", case_host_pointer},
        {"use_after_free", case_use_after_free},
        {"misaligned", case_misaligned},
        {"missing_barrier", case_missing_barrier},
        {"missing_barrier_dynamic", case_missing_barrier_dynamic},
        {"cross_block", case_cross_block},
        {"divergent_barrier", case_divergent_barrier},
        {"shuffle_exited", case_shuffle_exited},
        {"smem_limit", case_smem_limit},
        {"block_too_big", case_block_too_big},
        {"capture_legacy", case_capture_legacy},
        {"stream_race", case_stream_race},
        {"stream_event_orders", case_stream_event_orders},
        {"graph_replays", case_graph_replays},
        {"block_sum", case_block_sum},
        {"blas_shapes", case_blas_shapes},
        {"blas_range", case_blas_range},
        {"wmma_product", case_wmma_product},
        {"wmma_misaligned", case_wmma_misaligned},
        {"wmma_partial_warp", case_wmma_partial_warp},
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(argv[1], cases[i].name)) return cases[i].fn();
    fprintf(stderr, "usage: emu_selftest CASE\n");
    return 2;
}
