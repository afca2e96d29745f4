/* mem.c — the cuda backend's memory, policy and state (cuda.h): device memory through the
 * CUDA runtime (runtime.c), every copy and zeroing on the backend's one stream. Host
 * synchronisation: a copy to the host waits for it (its bytes are the caller's on return);
 * a copy from the host waits too (the caller may free its buffer on return); release
 * waits (cudaFree does). None of these run inside a step except the loss and the gradient
 * norm (ops.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda.h"
#include "backends/cuda/priv.h"
#include "ops/policy.h"

void dm_cuda_check(int rc, const char *what) {
    if (!rc) return;
    fprintf(stderr, "dormouse: cuda: %s: %s\n", what, dm_cuda_error(rc));
    fflush(stderr);
    abort();
}

static void *cu_alloc(dm_backend *be, size_t bytes) {
    dm_cuda_state *st = be->priv;
    void *p = NULL;
    if (dm_cuda_malloc(&p, bytes ? bytes : 256)) return NULL;
    dm_cuda_check(dm_cuda_zero(p, bytes ? bytes : 256, st->s), "zeroing a new allocation");
    return p;
}
static void cu_release(dm_backend *be, void *p) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_sync(st->s), "the work before a release");
    dm_cuda_check(dm_cuda_free(p), "cudaFree");
}
static void cu_to_host(dm_backend *be, void *host, const void *src, size_t bytes) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_download(host, src, bytes, st->s), "a copy to the host");
    dm_cuda_check(dm_cuda_sync(st->s), "a copy to the host");
}
static void cu_from_host(dm_backend *be, void *dst, const void *host, size_t bytes) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_upload(dst, host, bytes, st->s), "a copy from the host");
    dm_cuda_check(dm_cuda_sync(st->s), "a copy from the host");
}
static void cu_copy(dm_backend *be, void *dst, const void *src, size_t bytes) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_copy(dst, src, bytes, st->s), "a copy on the device");
}
static void cu_zero(dm_backend *be, void *p, size_t bytes) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_zero(p, bytes, st->s), "zeroing");
}
static void cu_sync(dm_backend *be) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_sync(st->s), "the backend's stream");
}
static void cu_destroy(dm_backend *be) {
    dm_cuda_state *st = be->priv;
    if (st) {
        dm_cuda_sync(st->s);
        dm_cuda_free(st->dbl);
        dm_cuda_free(st->slice_sq);
        dm_cuda_free(st->losses);
        dm_cuda_blas_free(st->blas);
        dm_cuda_stream_destroy(st->s);
        free(st);
    }
    free(be);
}

/* the execution policy: fp32 products on cuBLASLt (true f32, no TF32), the delta core
 * chunked unless kda_impl=reference, the fused norms */
static int cu_policy(dm_backend *be, const dm_config *c, dm_ops *ops, const dm_delta_dims *d,
                     dm_policy *p, char *err, size_t errlen) {
    (void)ops, (void)d;
    if (c->precision == DM_PRECISION_BF16 || c->ns_precision == DM_PRECISION_BF16) {
        if (err)
            snprintf(err, errlen, "precision=bf16: the cuda backend runs fp32 only so far "
                                  "(its bf16 products are not wired); use precision=fp32");
        return 1;
    }
    /* what would reach an op the backend declines, refused here rather than mid-run */
    const char *no = c->verify_fused > 0 ? "verify_fused: the cuda backend has no second "
                                           "implementation to verify against yet"
                   : c->grad_accum > 1   ? "grad_accum > 1: the cuda backend has no kernel for "
                                           "the mean of several micro-batches yet"
                   : c->retract == DM_RETRACT_STIEFEL
                       ? "retract=stiefel: the cuda backend has no Stiefel retraction yet"
                       : NULL;
    if (no) {
        if (err) snprintf(err, errlen, "%s; use backend=cpu", no);
        return 1;
    }
    static const char *no_bf16 = "the cuda backend runs fp32 only so far";
    *p = (dm_policy){.backend = be->name, .threads = 1, .gemm = DM_GEMM_OPENBLAS,
                     .gemm_why = "on the GPU: cuBLASLt, true f32",
                     .chunk = 32, .norm = DM_IMPL_CHUNKED,
                     .prec = {.why = no_bf16}};
    p->delta = c->kda_impl == DM_IMPL_REFERENCE ? DM_IMPL_REFERENCE : DM_IMPL_CHUNKED;
    return 0;
}

/* the delta core's backward work: the chunked backward's chunk-start states and dh, or
 * the serial backward's states before every token */
static size_t cu_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
                            size_t *saved) {
    (void)nthreads, (void)both;
    *saved = 0;
    size_t serial = dm_cuda_delta_serial_bwd_work(d), chunked = dm_cuda_delta_chunk_bwd_work(d);
    /* the path the ops will take (ops.c: the chunked one unless asked for the reference
     * or too large for shared memory) */
    return ops->kda_impl != DM_IMPL_REFERENCE && dm_cuda_delta_chunk_fits(d) ? chunked : serial;
}

static const char *cu_bf16_missing(void) { return "the cuda backend runs fp32 only so far"; }
static const char *cu_ns_bf16(struct dm_ops *ops) {
    (void)ops;
    return "the cuda backend has no bf16 Newton-Schulz yet";
}
static size_t cu_ns_work(int n, int rows, int cols, int bf16) {
    (void)bf16;
    return dm_cuda_ns_work(n, rows, cols);
}
static size_t cu_retract_work(int n, int rows, int cols) {
    (void)n, (void)rows, (void)cols;
    return 0;
}
/* the retraction's constants from the initial weights W0 (host memory): R[i] = ||W0_i||_F,
 * s[i] = R[i] / sqrt(min(rows, cols)) (as the cpu's dm_retract_init) */
static void cu_retract_init(float *R, float *s, const float *W0, int n, int rows, int cols) {
    size_t len = (size_t)rows * cols;
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (size_t j = 0; j < len; j++) ss += (double)W0[i * len + j] * W0[i * len + j];
        R[i] = (float)sqrt(ss);
        s[i] = (float)(sqrt(ss) / sqrt((double)(rows < cols ? rows : cols)));
    }
}

static const dm_backend_calls CALLS = {
    .bf16_missing = cu_bf16_missing,
    .ns_bf16_context = cu_ns_bf16,
    .ns_work = cu_ns_work,
    .retract_work = cu_retract_work,
    .retract_init = cu_retract_init,
};

const dm_backend_vt dm_cuda_vt = {
    .alloc = cu_alloc, .release = cu_release, .to_host = cu_to_host, .from_host = cu_from_host,
    .copy = cu_copy, .zero = cu_zero, .sync = cu_sync, .destroy = cu_destroy,
    .policy = cu_policy, .delta_work = cu_delta_work, .calls = &CALLS,
};

void *dm_cuda_backend_state(int device, char *err, size_t errlen) {
    const char *why = dm_cuda_unavailable(device);
    dm_cuda_state *st = why ? NULL : calloc(1, sizeof *st);
    if (!why && !st) why = "out of memory";
    int rc = 0;
    if (st) {
        st->device = device;
        if ((rc = dm_cuda_set_device(device)) || (rc = dm_cuda_stream_create(&st->s)) ||
            (rc = dm_cuda_malloc((void **)&st->dbl, DM_CUDA_SUMSQ_BLOCKS * sizeof(double))))
            why = dm_cuda_error(rc);
        else if (!(st->blas = dm_cuda_blas_create(&why)) && !why)
            why = "cuBLASLt does not start";
    }
    if (!why) return st;
    if (err) snprintf(err, errlen, "backend=cuda (device=%d): %s", device, why);
    if (st) {
        dm_cuda_free(st->dbl);
        if (st->s) dm_cuda_stream_destroy(st->s);
        free(st);
    }
    return NULL;
}
