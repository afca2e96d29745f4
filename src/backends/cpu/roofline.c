/* roofline.c — the atlas's roofline (ops/atlas.h): every distinct set of GEMMs the step ran,
 * timed standalone on the CPU kernel it ran on, and the memory's streaming bandwidth. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "backends/cpu/cpu.h"
#include "ops/atlas.h"

/* operands for the standalone runs: f32 and bf16 copies of the same values, per thread */
typedef struct {
    float *A, *B, *C;
    uint16_t *Ab, *Bb;
    size_t na, nb, nc; /* elements per thread slot (sets of slices) */
    dm_onednn *dnn;
} roof_buf;

static void prod_ld(const dm_atlas_prod *p, int *lda, int *ldb) {
    *lda = p->ta ? p->M : p->K;
    *ldb = p->tb ? p->K : p->N;
}

/* one product: on the tiles over all threads (slot < 0) or on this thread's slot */
static void roof_prod(const roof_buf *b, int kind, const dm_atlas_prod *p, int slot) {
    int lda, ldb, t = slot < 0 ? 0 : slot;
    prod_ld(p, &lda, &ldb);
    float beta = (float)p->beta, *C = b->C + (size_t)t * b->nc;
    const float *A = b->A + (size_t)t * b->na, *B = b->B + (size_t)t * b->nb;
    const uint16_t *Ab = b->Ab + (size_t)t * b->na, *Bb = b->Bb + (size_t)t * b->nb;
    if (kind == DM_GEMM_BF16_ONEDNN) {
        if (slot < 0)
            dm_onednn_gemm_bf16(b->dnn, p->ta, p->tb, p->M, p->N, p->K, 1.0f, Ab, lda, Bb, ldb,
                                beta, C, p->N);
        else if (dm_onednn_gemm_bf16_here(b->dnn, slot, p->ta, p->tb, p->M, p->N, p->K, 1.0f, Ab,
                                          lda, Bb, ldb, beta, C, p->N, 0))
            abort(); /* built outside the parallel loop by roof_ready: unreachable */
    } else if (kind == DM_GEMM_F32_ONEDNN && slot < 0) {
        dm_onednn_gemm(b->dnn, p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, beta, C, p->N);
    } else if (slot < 0) {
        dm_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, beta, C, p->N);
    } else {
        dm_gemm_serial(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, beta, C, p->N);
    }
}

/* NULL when every product of g can run standalone (oneDNN's primitives built), else why */
static const char *roof_ready(roof_buf *b, const dm_atlas_gemm *g) {
    for (int i = 0; i < g->n; i++) {
        const dm_atlas_prod *p = &g->prod[i];
        int lda, ldb;
        prod_ld(p, &lda, &ldb);
        if (g->kind == DM_GEMM_F32_OPENBLAS) continue;
        if (g->kind == DM_GEMM_F32_ONEDNN && !g->tiled) continue; /* not a path NS takes */
        const char *why = NULL;
        if (!b->dnn && !(b->dnn = dm_onednn_create(&why))) return why;
        if (g->kind == DM_GEMM_F32_ONEDNN)
            why = dm_onednn_supports(b->dnn, p->ta, p->tb, p->M, p->N, p->K, lda, ldb, p->N,
                                     1.0f, (float)p->beta);
        else if (g->tiled)
            why = dm_onednn_supports_bf16(b->dnn, p->ta, p->tb, p->M, p->N, p->K, lda, ldb, p->N,
                                          1.0f, (float)p->beta);
        else if (dm_onednn_prepare_bf16_here(b->dnn, p->ta, p->tb, p->M, p->N, p->K, 1.0f, lda,
                                             ldb, (float)p->beta, p->N, 0))
            why = "oneDNN cannot build a bf16 matmul primitive for it";
        if (why) return why;
    }
    return NULL;
}

/* one call of the set: seconds */
static double roof_call(const roof_buf *b, const dm_atlas_gemm *g) {
    double t0 = dm_now();
    if (g->tiled) {
        for (int r = 0; r < g->reps; r++)
            for (int i = 0; i < g->n; i++) roof_prod(b, g->kind, &g->prod[i], -1);
    } else {
        int nt = omp_get_max_threads(), use = nt < g->slices ? nt : g->slices;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use)
        for (int s = 0; s < g->slices; s++)
            for (int r = 0; r < g->reps; r++)
                for (int i = 0; i < g->n; i++)
                    roof_prod(b, g->kind, &g->prod[i], omp_get_thread_num());
    }
    return dm_now() - t0;
}

/* The memory's streaming bandwidth, bytes/s: a copy of DM_STREAM_BYTES from one array to
 * another over every thread (each thread its own contiguous part, touched first by it),
 * bytes read plus bytes written over the best of a few passes after a warm-up. Arrays far
 * larger than the caches; a pass takes milliseconds. 0 when out of memory. */
#define DM_STREAM_BYTES (64u << 20)
#define DM_STREAM_REPS 5
static double stream_bandwidth(int threads) {
    size_t n = DM_STREAM_BYTES / sizeof(float);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double best = INFINITY;
    if (x && y) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t i = 0; i < n; i++) x[i] = (float)(i & 1023), y[i] = 0;
        for (int r = 0; r <= DM_STREAM_REPS; r++) {
            double t0 = dm_now();
#pragma omp parallel for schedule(static) num_threads(threads)
            for (size_t i = 0; i < n; i++) y[i] = x[i];
            double s = dm_now() - t0;
            if (r > 0 && s < best) best = s; /* pass 0 warms up */
        }
        volatile float sink = y[n / 2]; /* the copy is used */
        (void)sink;
    }
    free(x);
    free(y);
    return isfinite(best) && best > 0 ? 2.0 * (double)n * sizeof(float) / best : 0;
}

void dm_cpu_roofline(dm_atlas *a) {
    if (a->measured) return;
    int threads = omp_get_max_threads();
    a->roof_threads = threads;
    roof_buf b = {0};
    /* a tiled set runs in slot 0's operands; a set of slices gives each thread its own
     * (slot t at t times the largest slice set's sizes): room for the larger need */
    size_t tn[3] = {0, 0, 0}, sn[3] = {0, 0, 0};
    for (int j = 0; j < a->n_gemm; j++)
        for (int i = 0; i < a->gemm[j].n; i++) {
            const dm_atlas_prod *p = &a->gemm[j].prod[i];
            size_t e[3] = {(size_t)p->M * p->K, (size_t)p->K * p->N, (size_t)p->M * p->N};
            size_t *m = a->gemm[j].tiled ? tn : sn;
            for (int k = 0; k < 3; k++) m[k] = e[k] > m[k] ? e[k] : m[k];
        }
    size_t t = (size_t)threads, need[3];
    for (int k = 0; k < 3; k++) {
        sn[k] = (sn[k] + 31) & ~(size_t)31; /* 64-byte aligned slots */
        need[k] = t * sn[k] > tn[k] ? t * sn[k] : tn[k];
    }
    b.na = sn[0], b.nb = sn[1], b.nc = sn[2];
    b.A = malloc(need[0] * sizeof(float));
    b.B = malloc(need[1] * sizeof(float));
    b.C = calloc(need[2], sizeof(float));
    b.Ab = malloc(need[0] * sizeof(uint16_t));
    b.Bb = malloc(need[1] * sizeof(uint16_t));
    a->measured = -1;
    a->roof_why = "out of memory for the operands";
    if (b.A && b.B && b.C && b.Ab && b.Bb) {
        uint32_t x = 12345u; /* values in [-1, 1) */
        for (size_t i = 0; i < need[0]; i++)
            x = x * 1664525u + 1013904223u, b.A[i] = (float)(x >> 8) / 8388608.0f - 1.0f;
        for (size_t i = 0; i < need[1]; i++)
            x = x * 1664525u + 1013904223u, b.B[i] = (float)(x >> 8) / 8388608.0f - 1.0f;
        dm_bf16_from_f32(b.Ab, b.A, need[0]);
        dm_bf16_from_f32(b.Bb, b.B, need[1]);
        a->measured = 1;
        a->roof_why = NULL;
        for (int j = 0; j < a->n_gemm && a->measured == 1; j++) {
            dm_atlas_gemm *g = &a->gemm[j];
            const char *why = roof_ready(&b, g);
            if (why) {
                a->measured = -1;
                a->roof_why = why;
                break;
            }
            roof_call(&b, g); /* warm-up */
            g->best = INFINITY;
            for (int r = 0; r < DM_ATLAS_ROOF_REPS; r++) {
                double s = roof_call(&b, g);
                if (s < g->best) g->best = s;
            }
        }
    }
    dm_onednn_free(b.dnn);
    free(b.A), free(b.B), free(b.C), free(b.Ab), free(b.Bb);
    a->bw = stream_bandwidth(threads);
}

