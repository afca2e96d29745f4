/* onednn.h — oneDNN's matmul primitive as a GEMM backend (Debian libdnnl-dev, C API).
 *
 * Same contract as dm_gemm (kernels.h): C[M,N] = alpha op(A) op(B) + beta C, row-major,
 * over the same shape-fixed tiles (dm_gemm_tile_shape), one tile per thread inside one
 * OpenMP region. Three things make that bitwise independent of the thread count:
 *   - every primitive is created while the OpenMP thread count is 1, so oneDNN plans it
 *     for one thread (no split of K across threads);
 *   - a primitive executed inside our parallel region runs on the calling thread;
 *   - each thread passes its own scratchpad: a primitive's default (library-owned)
 *     scratchpad is shared by every concurrent execution of that primitive, and tiles
 *     running at once would overwrite each other's packed operands (measured: wrong and
 *     thread-count-dependent results with transposed weights).
 * Primitives are cached per (tile shape, transposes, strides, alpha, beta) in the
 * context, which the caller owns (one per dm_ops, no globals). A thread's asynchronous
 * signals are blocked while a primitive runs on it (onednn.c says why).
 */
#ifndef DM_KERNELS_ONEDNN_H
#define DM_KERNELS_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

typedef struct dm_onednn dm_onednn;

/* A context: oneDNN's CPU engine, the primitive cache, per-thread streams and scratchpads.
 * NULL when oneDNN cannot start (*why names the reason, a static string). */
dm_onednn *dm_onednn_create(const char **why);
void dm_onednn_free(dm_onednn *d);

/* NULL when oneDNN computes this product with one of its optimized kernels; else why
 * not (a static string): no primitive for it, or only oneDNN's reference implementation
 * (a CPU without the instructions its fast kernels need). Builds and caches the
 * primitives of every tile of the product. */
const char *dm_onednn_supports(dm_onednn *d, int transA, int transB, int M, int N, int K,
                               int lda, int ldb, int ldc, float alpha, float beta);

/* The product (dm_gemm_fn signature; ctx is the dm_onednn). Builds what it needs first
 * when dm_onednn_supports was not asked; a product that dm_onednn_supports declines
 * aborts (check first when a CPU may lack oneDNN's fast kernels). */
void dm_onednn_gemm(void *ctx, int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc);

/* The same with A and B in bf16 (round to nearest even: dm_bf16_from_f32), f32
 * accumulation and an f32 C. */
const char *dm_onednn_supports_bf16(dm_onednn *d, int transA, int transB, int M, int N, int K,
                                    int lda, int ldb, int ldc, float alpha, float beta);
void dm_onednn_gemm_bf16(dm_onednn *d, int transA, int transB, int M, int N, int K, float alpha,
                         const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                         float *C, int ldc);

/* The same with C written in bf16 (f32 accumulation, then C = bf16(alpha op(A) op(B)),
 * rounded to nearest even by oneDNN; no beta): a product whose output is only ever read
 * as the bf16 operand of the next one skips the f32 store and the pass that rounds it. */
void dm_onednn_gemm_bf16_c16(dm_onednn *d, int transA, int transB, int M, int N, int K,
                             float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                             uint16_t *C, int ldc);

/* The whole bf16 product on the calling thread with scratchpad slot `slot` (no tiling),
 * for code that runs its own parallel loop around it: returns 0, or 1 when it cannot (a
 * primitive not built yet inside a parallel region, which must not build one, or one that
 * oneDNN declines). Its primitive is built on first use outside a parallel region, with
 * slots for the threads there are then; the loop's threads must not be more. C is f32
 * (cbf16 = 0) or bf16 (cbf16 = 1: written as dm_onednn_gemm_bf16_c16 does; beta 0). */
int dm_onednn_gemm_bf16_here(dm_onednn *d, int slot, int transA, int transB, int M, int N,
                             int K, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                             int ldb, float beta, void *C, int ldc, int cbf16);

/* Build what dm_onednn_gemm_bf16_here needs for such a product (its primitive, and slots
 * for the threads there are now) without running it, outside a parallel region: 0, or 1
 * when it cannot (oneDNN declines, out of memory, or called inside a parallel region). */
int dm_onednn_prepare_bf16_here(dm_onednn *d, int transA, int transB, int M, int N, int K,
                                float alpha, int lda, int ldb, float beta, int ldc, int cbf16);

/* The implementation oneDNN picked for the most recently built primitive
 * ("brg:avx512_core", "gemm:jit", ...), for reports; "" when none was built. */
const char *dm_onednn_impl(const dm_onednn *d);

#endif
