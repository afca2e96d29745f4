/* tc.cuh — products on the tensor cores: bf16 operands (their bits, uint16_t, as
 * dm_bf16_of rounds them) in shared memory, float sums, through the warp's 16 x 16 x 16
 * matrix operations (nvcuda::wmma). A block's warps share one product: each takes 16 x 16
 * tiles of the result in turn. */
#ifndef DM_KERNELS_CUDA_TC_CUH
#define DM_KERNELS_CUDA_TC_CUH

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

#include "kernels/cuda/device.cuh"

/* p rounded up to 32 bytes: the fragments' loads and stores need 256-bit alignment (a
 * kernel's dynamic shared memory is asked 32 bytes more than its tiles) */
static __device__ __forceinline__ float *dm_align32(float *p) {
    return (float *)(((uintptr_t)(void *)p + 31) & ~(uintptr_t)31);
}

template <class L> using dm_tc_a =
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, L>;
template <class L> using dm_tc_b =
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, L>;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> dm_tc_c;

static __device__ __forceinline__ const __nv_bfloat16 *dm_tc_at(const uint16_t *p, size_t off) {
    return (const __nv_bfloat16 *)(const void *)(p + off);
}

template <bool TA, bool TB>
static __device__ void dm_tc_mm_t(int M, int N, int K, const uint16_t *A, int lda,
                                  const uint16_t *B, int ldb, float *C, int ldc, bool acc) {
    using namespace nvcuda;
    typedef typename std::conditional<TA, wmma::col_major, wmma::row_major>::type LA;
    typedef typename std::conditional<TB, wmma::col_major, wmma::row_major>::type LB;
    const int warp = threadIdx.x / 32, nw = blockDim.x / 32, tn = N / 16;
    for (int tile = warp; tile < (M / 16) * tn; tile += nw) {
        const int m = tile / tn * 16, n = tile % tn * 16;
        dm_tc_a<LA> a;
        dm_tc_b<LB> b;
        dm_tc_c c;
        if (acc) wmma::load_matrix_sync(c, C + (size_t)m * ldc + n, ldc, wmma::mem_row_major);
        else wmma::fill_fragment(c, 0.0f);
        for (int k = 0; k < K; k += 16) {
            wmma::load_matrix_sync(a, dm_tc_at(A, TA ? (size_t)k * lda + m : (size_t)m * lda + k),
                                   lda);
            wmma::load_matrix_sync(b, dm_tc_at(B, TB ? (size_t)n * ldb + k : (size_t)k * ldb + n),
                                   ldb);
            wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(C + (size_t)m * ldc + n, c, ldc, wmma::mem_row_major);
    }
}

/* C[M,N] = (acc ? C : 0) + op(A) op(B), C float row-major (ldc); op(A)[M,K] is A [M,K]
 * row-major (lda) or, ta, A^T with A stored [K,M]; op(B)[K,N] is B [K,N] or, tb, B^T with
 * B stored [N,K]. M, N, K multiples of 16; A, B, C 32-byte aligned; lda, ldb multiples of
 * 8, ldc of 4. Every thread of the block calls it (whole warps); the caller syncs before
 * C is read. */
static __device__ void dm_tc_mm(int M, int N, int K, const uint16_t *A, int lda, bool ta,
                                const uint16_t *B, int ldb, bool tb, float *C, int ldc,
                                bool acc) {
    if (ta && tb) dm_tc_mm_t<true, true>(M, N, K, A, lda, B, ldb, C, ldc, acc);
    else if (ta) dm_tc_mm_t<true, false>(M, N, K, A, lda, B, ldb, C, ldc, acc);
    else if (tb) dm_tc_mm_t<false, true>(M, N, K, A, lda, B, ldb, C, ldc, acc);
    else dm_tc_mm_t<false, false>(M, N, K, A, lda, B, ldb, C, ldc, acc);
}

#endif
