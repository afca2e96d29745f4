/* bench_cuda.c — the CUDA kernels' times at the default model's shapes (d2: 8 x 512
 * tokens, d_model 256, 4 heads of 64, MLP 768, 256 bytes): each kernel launched R times
 * back to back between two stream syncs, the per-launch time of `rounds` such runs (median
 * and spread), and the bytes or FLOPs that make it a bandwidth or a rate; and a chain of a
 * layer's 12 small kernels as launches and as one replayed graph (what capture saves). Prints a table
 * and rows in the columns of benches/history.tsv (what "bench:cuda"; --history FILE
 * appends them). Needs a CUDA device: without one it says why and exits 1.
 * Usage: bench_cuda [--rounds N] [--reps R] [--history FILE] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/stats.h"
#include "check.h" /* t_fill_normal */
#include "io/history.h"
#include "kernels/cuda/cuda.h"
#include "ops/optim_ops.h" /* AdamW's step values */
#include "backends/cpu/kernels/ns.h" /* the schedule's coefficients */

#if DM_HAVE_CUDA
enum { B = 8, T = 512, NT = B * T, C = 256, H = 4, D = 64, MLP = 768, V = 256, CW = 4 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
/* a device buffer of normal floats (never timed on zeros or constants); fill < 0: random
 * normal values, else that byte everywhere */
static void *dev(size_t bytes, int fill) {
    void *p = NULL;
    int e = dm_cuda_malloc(&p, bytes);
    if (!e && fill >= 0) e = dm_cuda_fill_bytes(p, fill, bytes, NULL);
    if (!e && fill < 0) {
        static uint64_t seed = 1;
        float *h = malloc(bytes);
        if (!h) exit(1);
        t_fill_normal(h, bytes / sizeof(float), seed++, 1.0f);
        e = dm_cuda_upload(p, h, bytes, NULL);
        if (!e) e = dm_cuda_sync(NULL);
        free(h);
    }
    if (e) {
        fprintf(stderr, "bench_cuda: %zu bytes: %s\n", bytes, dm_cuda_error(e));
        exit(1);
    }
    return p;
}

typedef struct {
    float *x, *y, *z, *dy, *dx, *w, *dw, *r, *big, *big2, *work;
    float *g, *k, *beta; /* the core's inputs: decays <= 1, unit keys, beta in (0, 1) */
    float *dwork;        /* the delta cores' workspace (the largest) */
    float *saved;        /* the tensor-core forward's saved states and u */
    float *hyper;        /* AdamW's step values */
    dm_cuda_stream s;    /* every timed launch runs here */
    dm_cuda_graph *graph; /* the chain, captured */
    uint16_t *xb, *wb;
    uint8_t *tok;
    dm_cuda_blas *blas;
} bufs;

#define NOPS 34
static const char *op_name[NOPS] = {
    "rmsnorm_fwd", "rmsnorm_bwd", "gatednorm_fwd", "gatednorm_bwd", "silu_l2norm_fwd",
    "silu_l2norm_bwd", "conv_fwd", "conv_bwd", "gate_fwd", "gate_bwd", "swiglu_fwd",
    "swiglu_bwd", "xent_fwd", "xent_bwd", "embed_fwd", "embed_bwd", "add", "bf16_round",
    "mm_fp32_fwd", "mm_fp32_bwd_data", "mm_fp32_bwd_weight", "mm_bf16_fwd",
    "mm_bf16_bwd_weight", "delta_serial_fwd", "adamw", "ns_4x64x256", "ns_1x256x768",
    "delta_serial_bwd", "chain12_launches", "chain12_graph", "delta_chunk_fwd",
    "delta_chunk_bwd", "delta_tc_fwd", "delta_tc_bwd"};
/* bytes each moves at the least (elementwise and norms) or FLOPs (products, the core) */
static double op_bytes(int op) {
    const double f = 4.0 * NT * C;
    const double b[NOPS] = {2 * f, 4 * f, 3 * f, 6 * f, 2 * f, 4 * f, 2 * f, 4 * f, 2 * f, 3 * f,
                            3 * f, 5 * f, f, 2 * f, 2 * f, 2 * f, 3 * f, 1.5 * f, 0, 0, 0, 0, 0, 0,
                            7 * f, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    return b[op];
}
static double op_flops(int op) {
    if (op == 22) return 2.0 * NT * C * C;
    if (op >= 18 && op <= 21) return 2.0 * NT * C * MLP;
    if (op == 23) return 6.0 * NT * H * D * D; /* gate, error, update, output: ~3 dk dv MACs */
    if (op == 27) return 16.0 * NT * H * D * D; /* recompute, then ~5 dk dv MACs a token */
    if (op == 30 || op == 32) return 6.0 * NT * H * D * D; /* the serial forward's function */
    if (op == 31 || op == 33) return 16.0 * NT * H * D * D; /* the serial backward's */
    if (op == 25 || op == 26) { /* per step: 2 m^2 k (gram) + 2 m^3 (A^2) + 2 m^2 k (B X) */
        double n = op == 25 ? 4 : 1, m = op == 25 ? 64 : 256, k = op == 25 ? 256 : 768;
        return 5 * n * (4 * m * m * k + 2 * m * m * m);
    }
    return 0;
}

/* a layer's small kernels in a row (12 launches, d2's shapes): launch-bound at this size,
 * timed as launches and as one replayed graph */
static int chain(bufs *b, dm_cuda_stream s) {
    const size_t n = (size_t)NT * C;
    int e = dm_cuda_rmsnorm_fwd(b->y, b->r, b->x, b->w, NT, C, 1e-5f, s);
    if (!e) e = dm_cuda_conv_fwd(b->dx, b->y, b->w, B, T, C, CW, s);
    if (!e) e = dm_cuda_silu_l2norm_fwd(b->dy, b->r, b->dx, NT * H, D, 1e-6f, s);
    if (!e) e = dm_cuda_gate_fwd(b->z, b->x, b->w, b->w, NT, H, D, 0.0f, s);
    if (!e) e = dm_cuda_sigmoid_fwd(b->dw, b->x, n, s);
    if (!e) e = dm_cuda_gatednorm_fwd(b->dx, b->r, b->y, b->z, b->w, NT * H, D, 1e-5f, 0, s);
    if (!e) e = dm_cuda_add_inplace(b->y, b->dx, n, s);
    if (!e) e = dm_cuda_rmsnorm_fwd(b->dx, b->r, b->y, b->w, NT, C, 1e-5f, s);
    if (!e) e = dm_cuda_swiglu_fwd(b->dy, b->dx, b->y, n, s);
    if (!e) e = dm_cuda_add_inplace(b->y, b->dy, n, s);
    if (!e) e = dm_cuda_silu_fwd(b->dx, b->y, n, s);
    if (!e) e = dm_cuda_bf16_from_f32(b->xb, b->dx, n, s);
    return e;
}

static int run(int op, bufs *b) {
    switch (op) {
    case 0: return dm_cuda_rmsnorm_fwd(b->y, b->r, b->x, b->w, NT, C, 1e-5f, b->s);
    case 1: return dm_cuda_rmsnorm_bwd(b->dx, b->dw, b->dy, b->x, b->w, b->r, NT, C, b->s);
    case 2: return dm_cuda_gatednorm_fwd(b->y, b->r, b->x, b->z, b->w, NT * H, D, 1e-5f, 0, b->s);
    case 3: return dm_cuda_gatednorm_bwd(b->dx, b->big, b->dw, b->dy, b->x, b->z, b->w, b->r,
                                         NT * H, D, 0, b->s);
    case 4: return dm_cuda_silu_l2norm_fwd(b->y, b->r, b->x, NT * H, D, 1e-6f, b->s);
    case 5: return dm_cuda_silu_l2norm_bwd(b->dx, b->dy, b->y, b->r, b->x, NT * H, D, b->s);
    case 6: return dm_cuda_conv_fwd(b->y, b->x, b->w, B, T, C, CW, b->s);
    case 7: return dm_cuda_conv_bwd(b->dx, b->dw, b->dy, b->x, b->w, B, T, C, CW, b->s);
    case 8: return dm_cuda_gate_fwd(b->y, b->x, b->w, b->w, NT, H, D, 0.0f, b->s);
    case 9: return dm_cuda_gate_bwd(b->dx, b->dw, b->dw + H, b->dy, b->x, b->w, b->w, NT, H, D,
                                    0.0f, b->s);
    case 10: return dm_cuda_swiglu_fwd(b->y, b->x, b->z, (size_t)NT * C, b->s);
    case 11: return dm_cuda_swiglu_bwd(b->dx, b->big, b->dy, b->x, b->z, (size_t)NT * C, b->s);
    case 12: return dm_cuda_xent_fwd(b->r, (double *)b->work, b->x, b->tok, 1, NT, V, b->s);
    case 13: return dm_cuda_xent_bwd(b->dx, b->x, b->tok, 1, NT, V, 1.0f / NT, b->s);
    case 14: return dm_cuda_embed_fwd(b->y, b->tok, 1, b->w, NT, C, b->s);
    case 15: return dm_cuda_embed_bwd(b->dw, b->dy, b->tok, 1, NT, C, V, b->s);
    case 16: return dm_cuda_add_inplace(b->y, b->x, (size_t)NT * C, b->s);
    case 17: return dm_cuda_bf16_from_f32(b->xb, b->x, (size_t)NT * C, b->s);
    case 18: return dm_cuda_matmul_fwd(b->blas, 0, b->big, b->x, b->big2, NULL, NT, C, MLP, b->s);
    case 19: return dm_cuda_matmul_bwd_data(b->blas, 0, b->dx, b->big, b->big2, NT, C, MLP, 0,
                                            b->s);
    case 20: return dm_cuda_matmul_bwd_weight(b->blas, 0, b->big2, NULL, b->big, NULL, b->x, NT,
                                              C, MLP, b->s);
    case 21: return dm_cuda_matmul_fwd(b->blas, 1, b->big, b->xb, b->wb, NULL, NT, C, MLP, b->s);
    case 22: return dm_cuda_matmul_bwd_weight(b->blas, 1, b->big2, NULL, b->xb, NULL, b->xb,
                                              NT, C, C, b->s);
    case 24: /* the moments in big and big2: NT C floats each (a d2-sized AdamW share) */
        return dm_cuda_adamw(b->y, b->dy, b->big, b->big2, (size_t)NT * C, b->hyper, 0.9f,
                             0.95f, 1e-8f, NULL, 0, b->s);
    case 25:
    case 26: {
        float abc[5][3];
        for (int t = 0; t < 5; t++) {
            double c[3];
            dm_ns_sched_coeffs(DM_NS_QUINTIC5, t, c);
            for (int j = 0; j < 3; j++) abc[t][j] = (float)c[j];
        }
        int n = op == 25 ? 4 : 1, rows = op == 25 ? 64 : 256, cols = op == 25 ? 256 : 768;
        return dm_cuda_ns(b->blas, b->dx, b->x, n, rows, cols, (const float(*)[3])abc, 5, 1.0,
                          b->big, b->s);
    }
    case 27: {
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        return dm_cuda_delta_serial_bwd(&d, b->x, b->k, b->dy, b->g, b->beta, NULL, b->z, NULL,
                                        b->dx, b->big, b->big2, b->big2 + (size_t)NT * C,
                                        b->r, NULL, b->dwork, b->s);
    }
    case 28: return chain(b, b->s);
    case 29: return dm_cuda_graph_launch(b->graph, b->s);
    case 30: {
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        return dm_cuda_delta_chunk_fwd(&d, b->x, b->k, b->dy, b->g, b->beta, NULL, b->y, NULL,
                                       b->s);
    }
    case 31: {
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        return dm_cuda_delta_chunk_bwd(&d, b->x, b->k, b->dy, b->g, b->beta, NULL, b->z, NULL,
                                       b->dx, b->big, b->big2, b->big2 + (size_t)NT * C,
                                       b->r, NULL, b->dwork, b->s);
    }
    case 32: {
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        return dm_cuda_delta_tc_fwd(&d, b->x, b->k, b->dy, b->g, b->beta, NULL, b->y, NULL,
                                    b->saved, b->dwork, b->s);
    }
    case 33: { /* from the states op 32 saved */
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        return dm_cuda_delta_tc_bwd(&d, b->x, b->k, b->dy, b->g, b->beta, NULL, b->saved, b->z,
                                    NULL, b->dx, b->big, b->big2, b->big2 + (size_t)NT * C,
                                    b->r, NULL, b->dwork, b->s);
    }
    default: {
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        return dm_cuda_delta_serial_fwd(&d, b->x, b->k, b->dy, b->g, b->beta, NULL, b->y, NULL,
                                        b->s);
    }
    }
}

int main(int argc, char **argv) {
    int rounds = 7, reps = 20;
    const char *history = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--history") && i + 1 < argc) history = argv[++i];
        else {
            fprintf(stderr, "usage: bench_cuda [--rounds N] [--reps R] [--history FILE]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 100 || reps < 1) {
        fprintf(stderr, "bench_cuda: --rounds 1..100, --reps >= 1\n");
        return 2;
    }
    const char *why = dm_cuda_unavailable(0);
    if (why) {
        fprintf(stderr, "bench_cuda: no CUDA device (%s)\n", why);
        return 1;
    }
    char gpu[256];
    dm_cuda_device_name(0, gpu, sizeof gpu);
    printf("# %s\n", gpu);
    const size_t f = (size_t)NT * C * sizeof(float);
    bufs b = {0};
    /* inputs random normal (the core's made from them below) */
    b.x = dev(f, -1), b.y = dev(f, -1), b.z = dev(f, -1), b.dy = dev(f, -1);
    b.dx = dev(f, -1), b.w = dev(f, -1), b.dw = dev(f, -1), b.r = dev(f, -1);
    b.big = dev((size_t)NT * MLP * 4, -1), b.big2 = dev((size_t)NT * MLP * 4, -1);
    b.work = dev(64, 0), b.xb = dev(f, 0), b.wb = dev(f, 0), b.tok = dev(NT, 0x41);
    int e0 = dm_cuda_bf16_from_f32(b.xb, b.x, (size_t)NT * C, NULL);
    if (!e0) e0 = dm_cuda_bf16_from_f32(b.wb, b.z, (size_t)NT * C / 2, NULL);
    /* g = -exp(A) softplus(u) <= 0, k = l2norm(z), beta = sigmoid(r) */
    b.g = dev(f, 0), b.k = dev(f, 0), b.beta = dev((size_t)NT * H * 4, 0);
    if (!e0) e0 = dm_cuda_gate_fwd(b.g, b.x, b.w, b.w, NT, H, D, 0.0f, NULL);
    if (!e0) e0 = dm_cuda_l2norm_fwd(b.k, b.dx, b.z, NT * H, D, 1e-6f, NULL);
    if (!e0) e0 = dm_cuda_sigmoid_fwd(b.beta, b.r, (size_t)NT * H, NULL);
    if (!e0) e0 = dm_cuda_sync(NULL);
    if (e0) {
        fprintf(stderr, "bench_cuda: setup: %s\n", dm_cuda_error(e0));
        return 1;
    }
    const char *bwhy = NULL;
    b.blas = dm_cuda_blas_create(&bwhy);
    if (!b.blas) {
        fprintf(stderr, "bench_cuda: cuBLASLt: %s\n", bwhy);
        return 1;
    }
    {
        dm_delta_dims d = {B, T, H, D, D, 0, 0.125f};
        size_t w = dm_cuda_delta_serial_bwd_work(&d), wc = dm_cuda_delta_chunk_bwd_work(&d);
        size_t wt = dm_cuda_delta_tc_work(&d);
        w = w > wc ? w : wc;
        b.dwork = dev((w > wt ? w : wt) * sizeof(float), 0);
        b.saved = dev(dm_cuda_delta_tc_saved(&d) * sizeof(float), 0);
        float h[DM_ADAM_HYPER];
        dm_adam_hyper(h, 1e-3f, 0.1f, 0.9f, 0.95f, 10);
        b.hyper = dev(sizeof h, 0);
        if (dm_cuda_upload(b.hyper, h, sizeof h, NULL) || dm_cuda_sync(NULL)) return 1;
    }
    e0 = dm_cuda_stream_create(&b.s);
    if (!e0) e0 = chain(&b, b.s);
    if (!e0) e0 = dm_cuda_sync(b.s);
    if (!e0) e0 = dm_cuda_capture_begin(b.s);
    if (!e0) e0 = chain(&b, b.s);
    if (!e0) e0 = dm_cuda_capture_end(b.s, &b.graph);
    if (e0) {
        fprintf(stderr, "bench_cuda: the stream and the chain's graph: %s\n", dm_cuda_error(e0));
        return 1;
    }
    dm_history_row rows[NOPS];
    static char cfg[NOPS][384];
    printf("%-20s %10s %9s %10s %10s\n", "kernel", "us", "spread", "GB/s", "TFLOP/s");
    for (int op = 0; op < NOPS; op++) {
        int e = 0;
        for (int i = 0; i < 3 && !e; i++) e = run(op, &b); /* warm up */
        if (!e) e = dm_cuda_sync(b.s);
        double t[100];
        for (int r = 0; r < rounds && !e; r++) {
            double t0 = now();
            for (int i = 0; i < reps && !e; i++) e = run(op, &b);
            if (!e) e = dm_cuda_sync(b.s);
            t[r] = (now() - t0) / reps * 1e6;
        }
        if (e) {
            fprintf(stderr, "bench_cuda: %s: %s\n", op_name[op], dm_cuda_error(e));
            return 1;
        }
        double sp, us = dm_median(t, rounds, &sp);
        double gbs = op_bytes(op) / us * 1e-3, tfl = op_flops(op) / us * 1e-6;
        printf("%-20s %10.2f %9.2f %10.1f %10.2f\n", op_name[op], us, sp, gbs, tfl);
        snprintf(cfg[op], sizeof cfg[op], "gpu=%s op=%s B=%d T=%d C=%d H=%d D=%d mlp=%d", gpu,
                 op_name[op], B, T, C, H, D, MLP);
        rows[op] = (dm_history_row){"bench:cuda", cfg[op], "us_per_launch", us, sp, rounds, NULL};
    }
    char err[256];
    if (dm_history_report(stdout, history, rows, NOPS, err, sizeof err)) {
        fprintf(stderr, "bench_cuda: %s\n", err);
        return 1;
    }
    dm_cuda_graph_free(b.graph);
    dm_cuda_stream_destroy(b.s);
    dm_cuda_blas_free(b.blas);
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "bench_cuda: no CUDA device (%s)\n", dm_cuda_unavailable(0));
    return 1;
}
#endif
