/* onednn.c — oneDNN matmul as a GEMM backend (see onednn.h for the contract). */
#include "backends/cpu/kernels/onednn.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/kernels.h"

enum { P_OK = 0, P_FAILED, P_REFERENCE };

/* one primitive: a tile shape with its strides, transposes and scalars */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    int bf16;                   /* A and B in bf16 */
    int cbf16;                  /* C in bf16 (else f32) */
    int status;                 /* P_* */
    dnnl_primitive_t prim;      /* P_OK only */
    dnnl_memory_desc_t scratch; /* its scratchpad */
    size_t scratch_bytes;
} entry;

struct dm_onednn {
    dnnl_engine_t eng;
    entry *e;
    int n, cap;
    int slots;               /* per-thread streams and scratchpads */
    dnnl_stream_t *stream;
    void **pad;
    size_t pad_bytes;        /* size of every scratchpad slot */
    size_t need;             /* the largest scratchpad of any primitive */
    char impl[64];
};

dm_onednn *dm_onednn_create(const char **why) {
    dm_onednn *d = calloc(1, sizeof *d);
    if (!d) {
        *why = "out of memory for the oneDNN context";
        return NULL;
    }
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        *why = "oneDNN cannot create a CPU engine";
        return NULL;
    }
    return d;
}

void dm_onednn_free(dm_onednn *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++)
        if (d->e[i].prim) dnnl_primitive_destroy(d->e[i].prim);
    for (int i = 0; i < d->slots; i++) {
        if (d->stream[i]) dnnl_stream_destroy(d->stream[i]);
        free(d->pad[i]);
    }
    free(d->stream);
    free(d->pad);
    free(d->e);
    dnnl_engine_destroy(d->eng);
    free(d);
}

const char *dm_onednn_impl(const dm_onednn *d) { return d->impl; }

/* row-major op(A)[M,K], op(B)[K,N] (f32 or bf16), C[M,N] (f32 or bf16) as strided
 * descriptors */
static int descs(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int bf16,
                 int cbf16, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b,
                 dnnl_memory_desc_t *c) {
    dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N};
    dnnl_dims_t sa = {ta ? 1 : lda, ta ? lda : 1}, sb = {tb ? 1 : ldb, tb ? ldb : 1},
                sc = {ldc, 1};
    dnnl_data_type_t t = bf16 ? dnnl_bf16 : dnnl_f32;
    return dnnl_memory_desc_init_by_strides(a, 2, da, t, sa) != dnnl_success ||
           dnnl_memory_desc_init_by_strides(b, 2, db, t, sb) != dnnl_success ||
           dnnl_memory_desc_init_by_strides(c, 2, dc, cbf16 ? dnnl_bf16 : dnnl_f32, sc) !=
               dnnl_success;
}

/* Build the primitive of e (status set). Runs in a team of one thread with the OpenMP
 * thread count set to 1 there, so oneDNN plans the primitive for one thread. */
static void build(dm_onednn *d, entry *e) {
    e->status = P_FAILED;
#pragma omp parallel num_threads(1)
    {
        omp_set_num_threads(1); /* this region's task only: oneDNN reads it */
        dnnl_memory_desc_t a, b, c;
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        int ok = !descs(e->ta, e->tb, e->M, e->N, e->K, e->lda, e->ldb, e->ldc, e->bf16, e->cbf16,
                        &a, &b, &c) &&
                 dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
                 dnnl_primitive_attr_create(&attr) == dnnl_success &&
                 dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
                     dnnl_success;
        if (ok && e->alpha != 1.0f)
            ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &e->alpha) == dnnl_success;
        if (ok && e->beta != 0.0f)
            ok = dnnl_post_ops_create(&po) == dnnl_success &&
                 dnnl_post_ops_append_sum(po, e->beta) == dnnl_success &&
                 dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
        if (ok) ok = dnnl_primitive_desc_create(&pd, &md, attr, d->eng, NULL) == dnnl_success;
        const char *impl = NULL;
        if (ok)
            ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
                     dnnl_success && impl;
        if (ok) {
            snprintf(d->impl, sizeof d->impl, "%s", impl);
            if (strncmp(impl, "ref", 3) == 0) {
                e->status = P_REFERENCE;
            } else {
                const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
                if (sp && dnnl_primitive_create(&e->prim, pd) == dnnl_success) {
                    e->scratch = *sp;
                    e->scratch_bytes = dnnl_memory_desc_get_size(sp);
                    e->status = P_OK;
                }
            }
        }
        if (pd) dnnl_primitive_desc_destroy(pd);
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
    }
    if (e->status == P_OK && e->scratch_bytes > d->need) d->need = e->scratch_bytes;
}

static int same_key(const entry *e, const dm_gemm_args *g, int bf16) {
    return e->ta == g->ta && e->tb == g->tb && e->M == g->M && e->N == g->N && e->K == g->K &&
           e->lda == g->lda && e->ldb == g->ldb && e->ldc == g->ldc && e->alpha == g->alpha &&
           e->beta == g->beta && e->bf16 == bf16 && e->cbf16 == (g->celem == 2);
}

/* the cached primitive of a tile (built on first use); NULL when out of memory */
static entry *lookup(dm_onednn *d, const dm_gemm_args *g, int bf16) {
    for (int i = 0; i < d->n; i++)
        if (same_key(&d->e[i], g, bf16)) return &d->e[i];
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 32;
        entry *ne = realloc(d->e, (size_t)cap * sizeof *ne);
        if (!ne) return NULL;
        d->e = ne;
        d->cap = cap;
    }
    entry *e = &d->e[d->n++];
    *e = (entry){g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldc, g->alpha, g->beta,
                 bf16, g->celem == 2, P_FAILED, NULL, {0}, 0};
    build(d, e);
    return e;
}

/* the distinct tiles of a product: (rows, cols) of the first and of the last tile in
 * each direction */
static int tile_shapes(int M, int N, int K, int shapes[4][2]) {
    int mb, nb, k = 0;
    dm_gemm_tile_shape(M, N, K, &mb, &nb);
    int ms[2] = {mb, M - (M - 1) / mb * mb}, ns[2] = {nb, N - (N - 1) / nb * nb};
    for (int i = 0; i < (ms[1] != ms[0] ? 2 : 1); i++)
        for (int j = 0; j < (ns[1] != ns[0] ? 2 : 1); j++) {
            shapes[k][0] = ms[i];
            shapes[k][1] = ns[j];
            k++;
        }
    return k;
}

/* per-thread streams and scratchpads for `threads` threads, each pad of d->need bytes */
static int ensure_slots(dm_onednn *d, int threads) {
    if (threads > d->slots) {
        dnnl_stream_t *s = realloc(d->stream, (size_t)threads * sizeof *s);
        if (!s) return 1;
        d->stream = s;
        void **p = realloc(d->pad, (size_t)threads * sizeof *p);
        if (!p) return 1;
        d->pad = p;
        for (int i = d->slots; i < threads; i++) {
            d->stream[i] = NULL;
            d->pad[i] = NULL;
        }
        for (int i = d->slots; i < threads; i++)
            if (dnnl_stream_create(&d->stream[i], d->eng, dnnl_stream_default_flags) !=
                dnnl_success)
                return 1;
        if (d->pad_bytes) /* the new slots get pads like the old ones */
            for (int i = d->slots; i < threads; i++)
                if (!(d->pad[i] = aligned_alloc(64, d->pad_bytes))) return 1;
        d->slots = threads;
    }
    if (d->need > d->pad_bytes || !d->pad_bytes) {
        size_t bytes = ((d->need ? d->need : 64) + 63) & ~(size_t)63;
        for (int i = 0; i < d->slots; i++) {
            free(d->pad[i]);
            if (!(d->pad[i] = aligned_alloc(64, bytes))) return 1;
        }
        d->pad_bytes = bytes;
    }
    return 0;
}

/* Build (or find) the primitive of every tile of the product and the per-thread slots
 * for the threads there are now: NULL when all is ready, else why not. */
static const char *prepare(dm_onednn *d, const dm_gemm_args *g, int bf16) {
    if (g->M <= 0 || g->N <= 0 || g->K <= 0) return "an empty product";
    int sh[4][2], n = tile_shapes(g->M, g->N, g->K, sh);
    for (int i = 0; i < n; i++) {
        dm_gemm_args t = *g;
        t.M = sh[i][0];
        t.N = sh[i][1];
        entry *e = lookup(d, &t, bf16);
        if (!e) return "out of memory for a oneDNN primitive";
        if (e->status == P_REFERENCE)
            return bf16 ? "oneDNN has only its reference bf16 matmul on this CPU"
                        : "oneDNN has only its reference matmul for it on this CPU";
        if (e->status != P_OK) return "oneDNN cannot build a matmul primitive for it";
    }
    int threads = omp_get_max_threads();
    if (ensure_slots(d, threads > 0 ? threads : 1)) return "out of memory for oneDNN scratchpads";
    return NULL;
}

static dm_gemm_args args(int ta, int tb, int M, int N, int K, float alpha, const void *A,
                         int lda, const void *B, int ldb, float beta, void *C, int ldc,
                         size_t elem, size_t celem) {
    return (dm_gemm_args){ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, elem, C, celem};
}

const char *dm_onednn_supports(dm_onednn *d, int ta, int tb, int M, int N, int K, int lda,
                               int ldb, int ldc, float alpha, float beta) {
    dm_gemm_args g = args(ta, tb, M, N, K, alpha, NULL, lda, NULL, ldb, beta, NULL, ldc, 4, 4);
    return prepare(d, &g, 0);
}

const char *dm_onednn_supports_bf16(dm_onednn *d, int ta, int tb, int M, int N, int K, int lda,
                                    int ldb, int ldc, float alpha, float beta) {
    dm_gemm_args g = args(ta, tb, M, N, K, alpha, NULL, lda, NULL, ldb, beta, NULL, ldc, 2, 4);
    return prepare(d, &g, 1);
}

typedef struct { dm_onednn *d; int bf16; } tile_ctx;

/* A product that fails once its primitive is built is a bug, never a fallback: one line
 * saying why, with the product, the slot and the threads (a report a user can send), then
 * abort. */
static void die(const dm_onednn *d, const char *why, const dm_gemm_args *t, int bf16,
                int slot) {
    fprintf(stderr,
            "dormouse: internal error: %s, for the %s matmul ta %d tb %d M %d N %d K %d lda %d "
            "ldb %d ldc %d alpha %g beta %g (C %s) on slot %d of %d, thread %d of %d (max %d), "
            "scratchpads of %zu bytes for %zu, oneDNN %s\n",
            why, bf16 ? "bf16" : "f32", t->ta, t->tb, t->M, t->N, t->K, t->lda, t->ldb, t->ldc,
            (double)t->alpha, (double)t->beta, t->celem == 2 ? "bf16" : "f32", slot, d->slots,
            omp_get_thread_num(), omp_get_num_threads(), omp_get_max_threads(), d->pad_bytes,
            d->need, d->impl[0] ? d->impl : "(no implementation yet)");
    abort();
}

/* die with the oneDNN call that failed and its status */
static void die_status(const dm_onednn *d, const char *call, dnnl_status_t st,
                       const dm_gemm_args *t, int bf16, int slot) {
    char why[160];
    snprintf(why, sizeof why, "oneDNN's %s returned %s (%d)", call, dnnl_status2str(st), (int)st);
    die(d, why, t, bf16, slot);
}

/* While it runs, oneDNN's JIT f32 GEMM kernel (behind its matmul for small products) may
 * point the stack pointer at a heap workspace (when K is more than it packs on the stack). A
 * signal handled on that thread then has its frame written below the stack pointer: over the
 * heap in front of the workspace (malloc's chunk headers, oneDNN's memory objects), which made
 * a later product fail with dnnl_invalid_arguments or malloc abort. So no signal is handled on
 * a thread while oneDNN computes there: the asynchronous ones are blocked for the call and
 * delivered after it, or to another thread (the faults a crash report needs stay open). */
static void signals_off(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_BLOCK, &all, old);
}

static void signals_back(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

/* the product t (one tile) on the calling thread with slot's stream and scratchpad; 0 ok,
 * 1 when its primitive is not there */
static int exec(dm_onednn *d, const dm_gemm_args *t, int bf16, int slot) {
    entry *e = NULL;
    for (int i = 0; i < d->n && !e; i++)
        if (same_key(&d->e[i], t, bf16) && d->e[i].status == P_OK) e = &d->e[i];
    if (!e || slot < 0 || slot >= d->slots) return 1;
    dnnl_memory_desc_t a, b, c;
    if (descs(t->ta, t->tb, t->M, t->N, t->K, t->lda, t->ldb, t->ldc, bf16, t->celem == 2, &a,
              &b, &c))
        die(d, "its memory descriptors cannot be made", t, bf16, slot);
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    const char *call = "dnnl_memory_create";
    dnnl_status_t st = dnnl_memory_create(&ma, &a, d->eng, (void *)t->A);
    if (st == dnnl_success) st = dnnl_memory_create(&mb, &b, d->eng, (void *)t->B);
    if (st == dnnl_success) st = dnnl_memory_create(&mc, &c, d->eng, t->C);
    if (st == dnnl_success) st = dnnl_memory_create(&ms, &e->scratch, d->eng, d->pad[slot]);
    dnnl_exec_arg_t ex[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                             {DNNL_ARG_SCRATCHPAD, ms}};
    sigset_t old;
    signals_off(&old);
    if (st == dnnl_success && !omp_in_parallel()) {
        /* a product of one tile runs on the calling thread: oneDNN reads the OpenMP thread
         * count at execution too, and some of its kernels (AVX2 ones) split the work by it,
         * which changes the bits with the thread count */
        dnnl_status_t done = dnnl_success;
        const char *where = NULL;
#pragma omp parallel num_threads(1)
        {
            omp_set_num_threads(1); /* this region's task only: oneDNN reads it */
            done = dnnl_primitive_execute(e->prim, d->stream[slot], 4, ex);
            where = "dnnl_primitive_execute";
            if (done == dnnl_success) {
                done = dnnl_stream_wait(d->stream[slot]);
                where = "dnnl_stream_wait";
            }
        }
        st = done;
        call = where;
    } else if (st == dnnl_success) {
        call = "dnnl_primitive_execute";
        st = dnnl_primitive_execute(e->prim, d->stream[slot], 4, ex);
        if (st == dnnl_success) {
            call = "dnnl_stream_wait";
            st = dnnl_stream_wait(d->stream[slot]);
        }
    }
    signals_back(&old);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_memory_destroy(ms);
    if (st != dnnl_success) die_status(d, call, st, t, bf16, slot);
    return 0;
}

/* one tile of a tiled product, on this thread's slot */
static void tile(void *ctx, const dm_gemm_args *t) {
    tile_ctx *c = ctx;
    int slot = omp_get_thread_num();
    if (exec(c->d, t, c->bf16, slot)) /* prepare() built them all: unreachable */
        die(c->d, slot < c->d->slots ? "no primitive was built for a tile"
                                     : "no slot for the thread",
            t, c->bf16, slot);
}

static void run(dm_onednn *d, const dm_gemm_args *g, int bf16) {
    if (g->M <= 0 || g->N <= 0) return;
    /* the primitives are built here, before the parallel loop, when supports was not
     * asked first; a product it declines is a caller's bug */
    const char *why = prepare(d, g, bf16);
    if (why) die(d, why, g, bf16, 0);
    int mb, nb;
    dm_gemm_tile_shape(g->M, g->N, g->K, &mb, &nb);
    tile_ctx tc = {d, bf16};
    dm_gemm_tiles(tile, &tc, g, mb, nb);
}

void dm_onednn_gemm(void *ctx, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc) {
    dm_gemm_args g =
        args(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, sizeof(float), sizeof(float));
    run(ctx, &g, 0);
}

void dm_onednn_gemm_bf16(dm_onednn *d, int ta, int tb, int M, int N, int K, float alpha,
                         const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                         float *C, int ldc) {
    dm_gemm_args g =
        args(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, sizeof(uint16_t), sizeof(float));
    run(d, &g, 1);
}

void dm_onednn_gemm_bf16_c16(dm_onednn *d, int ta, int tb, int M, int N, int K, float alpha,
                             const uint16_t *A, int lda, const uint16_t *B, int ldb, uint16_t *C,
                             int ldc) {
    dm_gemm_args g = args(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, sizeof(uint16_t),
                          sizeof(uint16_t));
    run(d, &g, 1);
}

/* the primitive of the whole product and the slots for the threads there are now: 0, or 1
 * when oneDNN declines it or memory runs out */
static int build_here(dm_onednn *d, const dm_gemm_args *g) {
    entry *e = g->K > 0 ? lookup(d, g, 1) : NULL;
    int threads = omp_get_max_threads();
    return !e || e->status != P_OK || ensure_slots(d, threads > 0 ? threads : 1);
}

int dm_onednn_prepare_bf16_here(dm_onednn *d, int ta, int tb, int M, int N, int K, float alpha,
                                int lda, int ldb, float beta, int ldc, int cbf16) {
    if (M <= 0 || N <= 0 || omp_in_parallel()) return M > 0 && N > 0;
    dm_gemm_args g =
        args(ta, tb, M, N, K, alpha, NULL, lda, NULL, ldb, beta, NULL, ldc, 2, cbf16 ? 2 : 4);
    return build_here(d, &g);
}

int dm_onednn_gemm_bf16_here(dm_onednn *d, int slot, int ta, int tb, int M, int N, int K,
                             float alpha, const uint16_t *A, int lda, const uint16_t *B,
                             int ldb, float beta, void *C, int ldc, int cbf16) {
    if (M <= 0 || N <= 0) return 0;
    dm_gemm_args g = args(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, sizeof(uint16_t),
                          cbf16 ? sizeof(uint16_t) : sizeof(float));
    /* outside a parallel region it may build: the whole product as one primitive */
    if (!omp_in_parallel() && build_here(d, &g)) return 1;
    return exec(d, &g, 1, slot);
}
