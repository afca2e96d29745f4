/* device.cuh — what the .cu files share: the launch shapes, the scalar math of the
 * activations, and the deterministic reductions (fixed-order warp butterflies and
 * block trees; no atomics anywhere). */
#ifndef DM_KERNELS_CUDA_DEVICE_CUH
#define DM_KERNELS_CUDA_DEVICE_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"

#define DM_EW_THREADS 256   /* threads of an elementwise block */
#define DM_EW_MAXBLOCKS 4096 /* grid-stride loops past this many blocks */

/* the blocks of an elementwise launch over n elements */
static inline unsigned dm_ew_blocks(size_t n) {
    size_t b = (n + DM_EW_THREADS - 1) / DM_EW_THREADS;
    return (unsigned)(b < 1 ? 1 : b > DM_EW_MAXBLOCKS ? DM_EW_MAXBLOCKS : b);
}

/* the result of a launch: 0 or its error (the launch's, not a later kernel's) */
static inline int dm_launched(void) { return (int)cudaGetLastError(); }

#define DM_GRID_STRIDE(i, n)                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (size_t)gridDim.x * blockDim.x)

/* x rounded to bf16, to nearest even: dm_bf16_of's bits (a NaN stays a NaN) */
static __device__ __forceinline__ uint16_t dm_bf16_bits(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* stable logistic, the CPU's formula (vmath.h sigm): one exp of -|x| */
static __device__ __forceinline__ float dm_sigm(float x) {
    float e = expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
/* SiLU's derivative from x and s = sigmoid(x) */
static __device__ __forceinline__ float dm_dsilu(float x, float s) {
    return s * (1.0f + x * (1.0f - s));
}

/* the sum over a warp, every lane the same bits (a + b == b + a at each butterfly step) */
static __device__ __forceinline__ float dm_warp_sum(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}
static __device__ __forceinline__ float dm_warp_max(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

/* Column sums in a fixed order: dst[c] += sum_{r < rows} term(r, c) for c < cols.
 * A block of 32 x DM_CS_ROWS threads takes 32 columns; thread (x, y) sums rows y,
 * y + DM_CS_ROWS, ... in order, then the DM_CS_ROWS partials of a column are added in a
 * fixed tree. Acc: the accumulator (float, or double where the CPU sums in double). */
#define DM_CS_ROWS 16
template <typename Acc, typename Term>
__global__ void dm_colsum_kernel(float *dst, int rows, int cols, Term term) {
    __shared__ Acc part[DM_CS_ROWS][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    Acc acc = 0;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += DM_CS_ROWS) acc += (Acc)term(r, c);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int h = DM_CS_ROWS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols) dst[c] += (float)part[0][threadIdx.x];
}
template <typename Acc, typename Term>
static int dm_colsum(float *dst, int rows, int cols, Term term, cudaStream_t s) {
    if (cols <= 0) return 0;
    dim3 block(32, DM_CS_ROWS), grid((unsigned)((cols + 31) / 32));
    dm_colsum_kernel<Acc, Term><<<grid, block, 0, s>>>(dst, rows, cols, term);
    return dm_launched();
}

/* The sum of n terms by one block of DM_BS_THREADS: thread t sums t, t + DM_BS_THREADS,
 * ... in order, then a fixed tree; the block's total on every thread. */
#define DM_BS_THREADS 256
template <typename Acc>
static __device__ Acc dm_block_sum(Acc v) {
    __shared__ Acc part[DM_BS_THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (int h = DM_BS_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    Acc total = part[0];
    __syncthreads();
    return total;
}

#endif
