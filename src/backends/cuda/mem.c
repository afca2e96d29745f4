/* mem.c — the cuda backend's memory, policy and state (cuda.h): device memory through the
 * CUDA runtime (runtime.c), every copy and zeroing on the backend's one stream; the bf16
 * copies of its bf16 products' operands (the side room, ops/copies.h). Host
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

/* what must not run while the stream captures: a wait, a copy from the host (its staged
 * bytes would be replayed as they are then), an allocation. A bug, not bad input: the
 * process stops naming it. */
static void no_capture(const dm_cuda_state *st, const char *what) {
    if (!st->capturing) return;
    fprintf(stderr, "dormouse: cuda: %s inside a captured step (a graph cannot replay it)\n",
            what);
    fflush(stderr);
    abort();
}

/* waits for the stream (what: the call that waits): its queued copies from the staging
 * are done, so the staging is free again, and the staging it outgrew is freed */
static void wait_stream(dm_cuda_state *st, const char *what) {
    no_capture(st, what);
    dm_cuda_check(dm_cuda_sync(st->s), what);
    st->put_used = 0;
    for (int i = 0; i < st->n_put_old; i++)
        dm_cuda_check(dm_cuda_host_free(st->put_old[i]), "page-locked staging");
    st->n_put_old = 0;
}
static void *cu_alloc(dm_backend *be, size_t bytes) {
    dm_cuda_state *st = be->priv;
    no_capture(st, "an allocation");
    void *p = NULL;
    if (dm_cuda_malloc(&p, bytes ? bytes : 256)) return NULL;
    dm_cuda_check(dm_cuda_zero(p, bytes ? bytes : 256, st->s), "zeroing a new allocation");
    return p;
}
static void cu_release(dm_backend *be, void *p) {
    dm_cuda_state *st = be->priv;
    wait_stream(st, "the work before a release");
    dm_cuda_check(dm_cuda_free(p), "cudaFree");
}
static void cu_to_host(dm_backend *be, void *host, const void *src, size_t bytes) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_download(host, src, bytes, st->s), "a copy to the host");
    wait_stream(st, "a copy to the host");
}
static void cu_from_host(dm_backend *be, void *dst, const void *host, size_t bytes) {
    dm_cuda_state *st = be->priv;
    dm_cuda_check(dm_cuda_upload(dst, host, bytes, st->s), "a copy from the host");
    wait_stream(st, "a copy from the host");
}
/* the host's bytes copied into page-locked staging at once, then uploaded in the stream's
 * order. When the staging is full it is set aside (freed at the next wait, its copies
 * done by then) and a new one taken, of twice what the copies since the last wait take
 * with this one; so a step's copies, the same each step, fit from the next step on, and
 * no put waits (but when DM_CUDA_PUT_OLD are set aside already: then the stream is waited
 * for first) */
static void cu_put(dm_backend *be, void *dst, const void *host, size_t bytes) {
    dm_cuda_state *st = be->priv;
    no_capture(st, "a copy from the host");
    size_t need = (bytes + 255) & ~(size_t)255;
    if (st->put_used + need > st->put_cap) {
        size_t cap = 2 * (st->put_used + need);
        if (st->n_put_old == DM_CUDA_PUT_OLD) wait_stream(st, "the staging of copies");
        if (st->put_buf) st->put_old[st->n_put_old++] = st->put_buf;
        st->put_buf = NULL, st->put_cap = 0, st->put_used = 0;
        dm_cuda_check(dm_cuda_host_alloc((void **)&st->put_buf, cap), "page-locked staging");
        st->put_cap = cap;
    }
    unsigned char *at = st->put_buf + st->put_used;
    memcpy(at, host, bytes);
    dm_cuda_check(dm_cuda_upload(dst, at, bytes, st->s), "a copy from the host");
    st->put_used += need;
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
    wait_stream(be->priv, "the backend's stream");
}
static void cu_destroy(dm_backend *be) {
    dm_cuda_state *st = be->priv;
    if (st) {
        dm_cuda_sync(st->s);
        dm_cuda_free(st->dbl);
        dm_cuda_free(st->slice_sq);
        dm_cuda_free(st->losses);
        dm_cuda_free(st->wts_b);
        dm_cuda_free(st->dbuf);
        for (int i = 0; i < 3; i++) dm_cuda_free(st->opnd[i]);
        dm_copies_free(&st->copies);
        dm_cuda_marks_free(st->marks);
        dm_cuda_host_free(st->stage);
        dm_cuda_host_free(st->put_buf);
        for (int i = 0; i < st->n_put_old; i++) dm_cuda_host_free(st->put_old[i]);
        dm_cuda_blas_free(st->blas);
        dm_cuda_stream_destroy(st->s);
        free(st);
    }
    free(be);
}

/* marks: events on the stream; the step's read: into page-locked staging behind the
 * queued work, copied out to the caller's bytes once the stream is done */
static int cu_marks(dm_backend *be, int n) {
    dm_cuda_state *st = be->priv;
    if (n <= st->n_marks) return 0;
    dm_cuda_marks *m = NULL;
    if (dm_cuda_marks_create(&m, n)) return 1;
    dm_cuda_marks_free(st->marks);
    st->marks = m;
    st->n_marks = n;
    return 0;
}
static void cu_mark(dm_backend *be, int i) {
    dm_cuda_state *st = be->priv;
    no_capture(st, "a mark");
    if (i < st->n_marks) dm_cuda_check(dm_cuda_mark(st->marks, i, st->s), "a mark");
}
static double cu_mark_ms(dm_backend *be, int a, int b) {
    dm_cuda_state *st = be->priv;
    float ms = 0;
    if (a < st->n_marks && b < st->n_marks)
        dm_cuda_check(dm_cuda_marks_ms(st->marks, a, b, &ms), "the time between marks");
    return ms;
}
static void cu_read_begin(dm_backend *be, void *host, const void *src, size_t bytes) {
    dm_cuda_state *st = be->priv;
    no_capture(st, "a read to the host");
    if (bytes > st->stage_cap) {
        dm_cuda_check(dm_cuda_host_free(st->stage), "page-locked staging");
        st->stage = NULL, st->stage_cap = 0;
        dm_cuda_check(dm_cuda_host_alloc(&st->stage, bytes), "page-locked staging");
        st->stage_cap = bytes;
    }
    dm_cuda_check(dm_cuda_download_async(st->stage, src, bytes, st->s), "a read");
    st->read_dst = host, st->read_bytes = bytes;
}
static void cu_read_end(dm_backend *be) {
    dm_cuda_state *st = be->priv;
    if (!st->read_dst) return;
    wait_stream(st, "a read");
    memcpy(st->read_dst, st->stage, st->read_bytes);
    st->read_dst = NULL;
}

/* the execution policy: the products on cuBLASLt, in true f32 (no TF32), or on bf16
 * operands with f32 accumulation when precision=bf16 (the matmuls, the fused head) or
 * ns_precision=bf16 (Muon's Newton-Schulz) asks (auto keeps fp32 here: the bf16 paths have
 * run on the CUDA emulator only); the delta core chunked unless kda_impl=reference; the
 * fused norms */
static int cu_policy(dm_backend *be, const dm_config *c, dm_ops *ops, const dm_delta_dims *d,
                     dm_policy *p, char *err, size_t errlen) {
    (void)ops;

    /* what would reach an op the backend declines, refused here rather than mid-run */
    const char *no = c->verify_fused > 0 ? "verify_fused: the cuda backend has no second "
                                           "implementation to verify against yet"
                                         : NULL;
    if (no) {
        if (err) snprintf(err, errlen, "%s; use backend=cpu", no);
        return 1;
    }
    int bf16 = c->precision == DM_PRECISION_BF16;
    *p = (dm_policy){.backend = be->name, .threads = 1, .gemm = DM_GEMM_OPENBLAS,
                     .gemm_why = bf16 ? "on the GPU: cuBLASLt" : "on the GPU: cuBLASLt, true f32",
                     .chunk = 32, .norm = DM_IMPL_CHUNKED};
    p->prec.matmul_bf16 = bf16;
    if (c->precision == DM_PRECISION_AUTO)
        p->prec.matmul_why = "auto keeps fp32 on the cuda backend (its bf16 products have run "
                             "on the CUDA emulator only)";
    p->prec.ns_bf16 = c->optimizer == DM_OPT_MUON && c->ns_precision == DM_PRECISION_BF16;
    if (c->optimizer == DM_OPT_MUON && c->ns_precision == DM_PRECISION_AUTO)
        p->prec.ns_why = "auto keeps fp32 on the cuda backend (its bf16 Newton-Schulz has run "
                         "on the CUDA emulator only)";
    p->delta = c->kda_impl == DM_IMPL_REFERENCE ? DM_IMPL_REFERENCE : DM_IMPL_CHUNKED;
    if (p->delta == DM_IMPL_CHUNKED && p->prec.matmul_bf16 && d && dm_cuda_delta_tc_fits(d)) {
        p->chunk = 64; /* ops.c: the tensor-core core */
        p->delta_how = "on the tensor cores (bf16 products)";
    }
    return 0;
}

/* the delta core's work: the tensor-core core's chunk arrays (and its saved states and u,
 * when the forward gives none), the fp32 chunked backward's chunk-start states and dh, or
 * the serial backward's states before every token; with `both` (verify mode) the most of
 * any. *saved: the tensor-core forward's states and u for the backward, when it runs */
static size_t cu_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
                            size_t *saved) {
    (void)nthreads;
    *saved = 0;
    size_t serial = dm_cuda_delta_serial_bwd_work(d), chunked = dm_cuda_delta_chunk_bwd_work(d);
    size_t tc = dm_cuda_delta_tc_fits(d) ? dm_cuda_delta_tc_work(d) : 0, w;
    /* the path the ops will take (ops.c: the tensor-core one where the products are bf16,
     * else the chunked one unless asked for the reference or too large for shared memory) */
    if (ops->kda_impl == DM_IMPL_REFERENCE) w = serial;
    else if (dm_cuda_bf16_on(ops) && tc) w = tc, *saved = dm_cuda_delta_tc_saved(d);
    else w = dm_cuda_delta_chunk_fits(d) ? chunked : serial;
    if (both) {
        w = w > serial ? w : serial;
        w = w > chunked ? w : chunked;
        w = w > tc ? w : tc;
    }
    return w;
}

static const char *cu_bf16_missing(void) {
    return "the cuda backend's bf16 products run where the policy asks (precision=bf16)";
}

/* ---- bf16 products: the copies in the side room (ops/copies.h), on the device ---- */

int dm_cuda_bf16_on(const struct dm_ops *ops) {
    return ops->policy && ops->policy->prec.matmul_bf16;
}

int dm_cuda_room(dm_cuda_state *st, uint16_t **buf, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    int rc = dm_cuda_sync(st->s);
    if (!rc) rc = dm_cuda_free(*buf);
    *buf = NULL, *cap = 0;
    if (!rc) rc = dm_cuda_malloc((void **)buf, n * sizeof(uint16_t));
    if (!rc) *cap = n;
    return rc;
}

static void cu_round(struct dm_ops *ops, uint16_t *dst, const float *src, size_t n) {
    dm_cuda_check(dm_cuda_bf16_from_f32(dst, src, n, dm_cuda_state_of(ops)->s),
                  "rounding to bf16");
}
/* the operand scratch: slots 0 and 1 (a product's two operands) and 2 (the fused head's
 * W), each at most a pair, and the dout copy, all bf16 */
static size_t cu_product_scratch(const struct dm_ops *ops, size_t pair, size_t dout) {
    return dm_cuda_bf16_on(ops) ? (3 * pair + dout) * sizeof(uint16_t) : 0;
}
static size_t cu_side_bytes(const struct dm_ops *ops) {
    return dm_cuda_bf16_on(ops) ? sizeof(uint16_t) : 0;
}
static void cu_side_room(struct dm_ops *ops, const float *x, size_t n, float *room) {
    dm_copies_give_room(&dm_cuda_state_of(ops)->copies, x, n, (uint16_t *)room);
}
static void cu_side_clear(struct dm_ops *ops) {
    dm_copies_clear_rooms(&dm_cuda_state_of(ops)->copies);
}
/* no kernel of the backend writes a copy in its own pass: every room is filled after its
 * op, by the rounding kernel */
static void cu_side_written(struct dm_ops *ops, const float *p, size_t n, int after) {
    dm_copies *c = &dm_cuda_state_of(ops)->copies;
    if (c->n_copy || c->n_room) dm_copies_written(c, ops, cu_round, p, n, after);
}
static void cu_forget(struct dm_ops *ops) { dm_copies_forget(&dm_cuda_state_of(ops)->copies); }
static int cu_dout_bf16(struct dm_ops *ops, const float *dout, size_t n, int shared) {
    dm_cuda_state *st = dm_cuda_state_of(ops);
    if (!shared || !n || !dm_cuda_bf16_on(ops) || dm_copies_of(&st->copies, dout, n)) return 0;
    if (dm_cuda_room(st, &st->dbuf, &st->dcap, n)) return 0; /* each product rounds dout */
    cu_round(ops, st->dbuf, dout, n);
    dm_copies_made(&st->copies, dout, st->dbuf, n);
    return 1;
}
static void cu_dout_forget(struct dm_ops *ops, int made) {
    dm_cuda_state *st = dm_cuda_state_of(ops);
    if (made) dm_copies_drop_at(&st->copies, st->dbuf);
}
static int cu_reserve_weights(struct dm_ops *ops, size_t n) {
    dm_cuda_state *st = dm_cuda_state_of(ops);
    st->copies.wts = NULL, st->copies.wts_b = NULL, st->copies.n_wts = 0;
    return dm_cuda_room(st, &st->wts_b, &st->wts_cap, n) != 0;
}
static void cu_set_weights(struct dm_ops *ops, const float *w, size_t n) {
    dm_cuda_state *st = dm_cuda_state_of(ops);
    if (!st->wts_b || n > st->wts_cap) return;
    cu_round(ops, st->wts_b, w, n);
    st->copies.wts = w, st->copies.wts_b = st->wts_b, st->copies.n_wts = n;
}
static const char *cu_ns_bf16(struct dm_ops *ops) {
    (void)ops;
    return NULL; /* cuBLASLt runs bf16 products */
}
static size_t cu_ns_work(int n, int rows, int cols, int bf16) {
    return bf16 ? dm_cuda_ns_bf16_work(n, rows, cols) : dm_cuda_ns_work(n, rows, cols);
}
static size_t cu_retract_work(int n, int rows, int cols) {
    return dm_cuda_retract_stiefel_work(n, rows, cols);
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

/* ---- graphs: the backend's stream captured, then replayed ---- */
static int cu_capture_begin(dm_backend *be) {
    dm_cuda_state *st = be->priv;
    int rc = dm_cuda_capture_begin(st->s);
    st->capturing = rc == 0;
    return rc != 0;
}
static void *cu_capture_end(dm_backend *be, char *why, size_t n) {
    dm_cuda_state *st = be->priv;
    dm_cuda_graph *g = NULL;
    int rc = dm_cuda_capture_end(st->s, &g);
    st->capturing = 0;
    if (rc) snprintf(why, n, "%s", dm_cuda_error(rc));
    return rc ? NULL : g;
}
static int cu_graph_launch(dm_backend *be, void *graph) {
    dm_cuda_state *st = be->priv;
    return dm_cuda_graph_launch(graph, st->s) != 0;
}
static void cu_graph_free(dm_backend *be, void *graph) {
    wait_stream(be->priv, "freeing a graph");
    dm_cuda_graph_free(graph);
}

static const dm_backend_calls CALLS = {
    .bf16_missing = cu_bf16_missing,
    .side_bytes = cu_side_bytes,
    .product_scratch = cu_product_scratch,
    .side_room = cu_side_room,
    .side_clear = cu_side_clear,
    .side_written = cu_side_written,
    .forget_bf16 = cu_forget,
    .reserve_bf16_weights = cu_reserve_weights,
    .dout_bf16 = cu_dout_bf16,
    .dout_forget = cu_dout_forget,
    .set_weights = cu_set_weights,
    .ns_bf16_context = cu_ns_bf16,
    .ns_work = cu_ns_work,
    .retract_work = cu_retract_work,
    .retract_init = cu_retract_init,
};

const dm_backend_vt dm_cuda_vt = {
    .alloc = cu_alloc, .release = cu_release, .to_host = cu_to_host, .from_host = cu_from_host,
    .copy = cu_copy, .zero = cu_zero, .sync = cu_sync, .destroy = cu_destroy,
    .policy = cu_policy, .delta_work = cu_delta_work, .calls = &CALLS,
    .marks = cu_marks, .mark = cu_mark, .mark_ms = cu_mark_ms,
    .read_begin = cu_read_begin, .read_end = cu_read_end, .put = cu_put,
    .capture_begin = cu_capture_begin, .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch, .graph_free = cu_graph_free,
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
