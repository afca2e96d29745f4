/* test_cuda.c — the CUDA kernels (src/kernels/cuda/cuda.h) against the CPU kernels on the
 * same inputs: each op and direction, the device's output buffers poisoned (NaN) first so
 * an element left unwritten fails; fp32 within 1e-5 relative RMS, the bf16 products within
 * docs/bf16.md's 1e-6 of the f32 product of the same rounded operands; and the same bits
 * when a launch is repeated. Every GPU case skips, saying why, where no device can run
 * them (no driver, no device, a build without CUDA); cuda_probe_answers runs everywhere.
 * Labelled `cuda` (ctest -L cuda).
 * The same file, built with DM_CUDA_EMU=1 against the CUDA emulator (tests/cuda_emu,
 * docs/emulator.md), runs every case on the CPU: the emu_* tests (ctest -L cuda_emu). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backends/cpu/kernels/kernels.h"
#include "kernels/cuda/cuda.h"
#include "ops/optim_ops.h"
#include "ref/normuon_ref.h"
#include "ref/ref.h"
#include "backends/cpu/kernels/ns.h"
#include "backends/cpu/kernels/retract.h"

/* the probe of device 0: 1 (the case skipped, with the reason) when it cannot run */
static int no_gpu(void) {
    const char *why = dm_cuda_unavailable(0);
    if (why) t_skip("no CUDA device (%s)", why);
    return why != NULL;
}
#if DM_HAVE_CUDA || DM_CUDA_EMU
#define GPU_CASE(body) do { if (!no_gpu()) body(); } while (0)
#else /* the bodies are not built: the probe always answers */
#define GPU_CASE(body) do { (void)no_gpu(); } while (0)
#endif

TEST(cuda_probe_answers) {
    const char *why = dm_cuda_unavailable(0);
    printf("  device 0: %s\n", why ? why : "usable");
#if DM_HAVE_CUDA || DM_CUDA_EMU
    CHECKF(!why || (why[0] && !strchr(why, '\n')), "a reason is one non-empty line: [%s]", why);
#else
    CHECKF(why && strstr(why, "this build has no CUDA"), "a build without CUDA says so: [%s]",
           why ? why : "NULL");
#endif
    /* no machine has these devices: always a reason, never a crash */
    const char *big = dm_cuda_unavailable(1 << 20), *neg = dm_cuda_unavailable(-1);
    printf("  device 1048576: %s\n  device -1: %s\n", big ? big : "NULL", neg ? neg : "NULL");
    CHECK(big && big[0] && neg && neg[0]);
    if (!why && big) CHECKF(strstr(big, "out of range") != NULL, "[%s]", big);
}

#if DM_HAVE_CUDA || DM_CUDA_EMU
/* ---- device buffers of the running case (freed at its end) ---- */
static void *pool[256];
static int npool;
static void *dalloc(size_t bytes) {
    void *p = NULL;
    int e = dm_cuda_malloc(&p, bytes);
    if (e || npool == 256) {
        fprintf(stderr, "device allocation of %zu bytes: %s\n", bytes, dm_cuda_error(e));
        abort();
    }
    return pool[npool++] = p;
}
static void dfree_all(void) {
    for (int i = 0; i < npool; i++) dm_cuda_free(pool[i]);
    npool = 0;
}
#define CU(call)                                                                         \
    do {                                                                                 \
        int e_ = (call);                                                                 \
        if (e_) t_fail(__FILE__, __LINE__, "%s: %s", #call, dm_cuda_error(e_));          \
    } while (0)
/* a device copy of n host floats / bytes */
static float *dput(const float *h, size_t n) {
    float *d = dalloc(n * sizeof(float) + 4);
    CU(dm_cuda_upload(d, h, n * sizeof(float), NULL));
    return d;
}
static uint8_t *dput8(const uint8_t *h, size_t n) {
    uint8_t *d = dalloc(n + 4);
    CU(dm_cuda_upload(d, h, n, NULL));
    return d;
}
/* n device floats, every one NaN (0xff bytes) */
static float *dpoison(size_t n) {
    float *d = dalloc(n * sizeof(float) + 4);
    CU(dm_cuda_fill_bytes(d, 0xff, n * sizeof(float), NULL));
    return d;
}
/* the device's n floats, downloaded into a fresh host buffer (freed by the caller) */
static float *dget(const float *d, size_t n) {
    float *h = t_alloc(n);
    CU(dm_cuda_sync(NULL));
    CU(dm_cuda_download(h, d, n * sizeof(float), NULL));
    return h;
}
static float *randn(size_t n, uint64_t seed, float scale) {
    float *x = t_alloc(n);
    t_fill_normal(x, n, seed, scale);
    return x;
}
/* the device's d[n] against the CPU's ref[n]: relative RMS <= tol, every element written */
static void close_to(const char *what, const float *d, const float *ref, size_t n, double tol) {
    float *h = dget(d, n);
    double r = t_rel_rms_ff(h, ref, n);
    printf("  %-28s rel rms %.3g (bound %.0e)\n", what, r, tol);
    CHECKF(t_all_finite(h, n), "%s: non-finite output (an element left unwritten?)", what);
    CHECKF(r <= tol, "%s: relative RMS %.3g over %.0e", what, r, tol);
    free(h);
}
#define F32 1e-5 /* fp32 kernels against the CPU's */

/* ---- memory ---- */
static void memory_body(void) {
    enum { n = 1000 };
    float *x = randn(n, 1, 1.0f);
    float *a = dput(x, n), *b = dpoison(n);
    CU(dm_cuda_copy(b, a, n * sizeof(float), NULL));
    float *h = dget(b, n);
    CHECK(memcmp(h, x, sizeof(float) * n) == 0);
    CU(dm_cuda_zero(b, n * sizeof(float), NULL));
    free(h);
    h = dget(b, n);
    int zero = 1;
    for (int i = 0; i < n; i++) zero &= h[i] == 0.0f;
    CHECK(zero);
    size_t fr = 0, tot = 0;
    CU(dm_cuda_mem_info(&fr, &tot));
    printf("  device memory: %.1f of %.1f GiB free\n", fr / 1073741824.0, tot / 1073741824.0);
    CHECK(tot > 0 && fr <= tot);
    dm_cuda_stream s = NULL;
    CU(dm_cuda_stream_create(&s));
    CU(dm_cuda_upload(b, x, n * sizeof(float), s));
    CU(dm_cuda_sync(s));
    CU(dm_cuda_stream_destroy(s));
    free(h);
    h = dget(b, n);
    CHECK(memcmp(h, x, sizeof(float) * n) == 0);
    free(h);
    free(x);
    dfree_all();
}

/* ---- bf16 rounding: the CPU's bits exactly ---- */
static void bf16_body(void) {
    enum { n = 4099 };
    float *x = randn(n, 2, 3.0f);
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.4028235e38f,
                             1.00390625f, 1.01171875f, 1e-40f};
    memcpy(x, special, sizeof special);
    float *dx = dput(x, n);
    uint16_t *db = dalloc(2 * n), cpu[n], gpu[n];
    CU(dm_cuda_fill_bytes(db, 0xab, 2 * n, NULL));
    CU(dm_cuda_bf16_from_f32(db, dx, n, NULL));
    CU(dm_cuda_sync(NULL));
    CU(dm_cuda_download(gpu, db, sizeof gpu, NULL));
    dm_bf16_from_f32(cpu, x, n);
    int diff = 0;
    for (int i = 0; i < n; i++) diff += cpu[i] != gpu[i];
    CHECKF(diff == 0, "%d of %d bf16 values differ from the CPU's", diff, n);
    free(x);
    dfree_all();
}

/* ---- activations and the residual add ---- */
static void act_body(void) {
    enum { n = 5003 };
    float *x = randn(n, 3, 3.0f), *b = randn(n, 4, 1.0f), *dy = randn(n, 5, 1.0f);
    float *dx_ = dput(x, n), *db_ = dput(b, n), *ddy = dput(dy, n);
    float *y = t_alloc(n), *y2 = t_alloc(n), *dev = dpoison(n), *dev2 = dpoison(n);

    dm_silu_fwd(y, x, n);
    CU(dm_cuda_silu_fwd(dev, dx_, n, NULL));
    close_to("silu fwd", dev, y, n, F32);
    dm_silu_bwd(y, dy, x, n);
    CU(dm_cuda_silu_bwd(dev, ddy, dx_, n, NULL));
    close_to("silu bwd", dev, y, n, F32);

    dm_sigmoid_fwd(y, x, n);
    CU(dm_cuda_sigmoid_fwd(dev, dx_, n, NULL));
    close_to("sigmoid fwd", dev, y, n, F32);
    float *sy = dput(y, n);
    dm_sigmoid_bwd(y2, dy, y, n);
    CU(dm_cuda_sigmoid_bwd(dev, ddy, sy, n, NULL));
    close_to("sigmoid bwd", dev, y2, n, F32);

    dm_swiglu_fwd(y, x, b, n);
    CU(dm_cuda_swiglu_fwd(dev, dx_, db_, n, NULL));
    close_to("swiglu fwd", dev, y, n, F32);
    dm_swiglu_bwd(y, y2, dy, x, b, n);
    CU(dm_cuda_swiglu_bwd(dev, dev2, ddy, dx_, db_, n, NULL));
    close_to("swiglu bwd da", dev, y, n, F32);
    close_to("swiglu bwd db", dev2, y2, n, F32);
    /* in place: da over dh */
    float *dh = dput(dy, n);
    CU(dm_cuda_swiglu_bwd(dh, dev2, dh, dx_, db_, n, NULL));
    close_to("swiglu bwd in place", dh, y, n, F32);

    memcpy(y, b, sizeof(float) * n);
    dm_add_inplace(y, x, n);
    CU(dm_cuda_add_inplace(db_, dx_, n, NULL));
    close_to("add", db_, y, n, F32);
    free(x), free(b), free(dy), free(y), free(y2);
    dfree_all();
}

/* N ids of width w (1, 2, 4 bytes) below V, as a model's batch holds them: a malloc'd array */
static void *ids_of(int w, int N, int V, int salt) {
    uint8_t *b = malloc((size_t)N * w);
    for (int i = 0; i < N; i++) {
        uint32_t v = (uint32_t)(((long)i * 37 + i / 7 + salt) % V);
        if (i % 50 == 5) v = (uint32_t)V - 1; /* repeats, and the last row */
        if (w == 1) b[i] = (uint8_t)v;
        else if (w == 2) ((uint16_t *)b)[i] = (uint16_t)v;
        else ((uint32_t *)b)[i] = v;
    }
    return b;
}
/* the vocabularies of bytes and of tokens (ids of 2 and 4 bytes) */
static const struct { int w, V; } VOCABS[] = {{1, 256}, {2, 300}, {4, 1000}};

/* ---- embedding ---- */
static void embed_body(void) {
    enum { N = 301, C = 40 };
    for (size_t k = 0; k < sizeof VOCABS / sizeof VOCABS[0]; k++) {
        int w = VOCABS[k].w, V = VOCABS[k].V;
        void *tok = ids_of(w, N, V, 0);
        float *table = randn((size_t)V * C, 6, 1.0f), *dout = randn(N * C, 7, 1.0f);
        float *dt0 = randn((size_t)V * C, 8, 1.0f);
        float *out = t_alloc(N * C);
        void *dtok = dput8(tok, (size_t)N * w);
        float *dtab = dput(table, (size_t)V * C), *dev = dpoison(N * C);
        dm_embed_fwd_ids(out, tok, w, table, N, C);
        CU(dm_cuda_embed_fwd(dev, dtok, w, dtab, N, C, NULL));
        printf("  ids of %d bytes, vocabulary %d:\n", w, V);
        close_to("embed fwd", dev, out, N * C, F32);
        float *ddt = dput(dt0, (size_t)V * C), *ddo = dput(dout, N * C);
        dm_embed_bwd_ids(dt0, dout, tok, w, N, C);
        CU(dm_cuda_embed_bwd(ddt, ddo, dtok, w, N, C, V, NULL));
        close_to("embed bwd (accumulated)", ddt, dt0, (size_t)V * C, F32);
        free(tok), free(table), free(dout), free(dt0), free(out);
        dfree_all();
    }
}

/* ---- RMSNorm ---- */
static void rmsnorm_body(void) {
    enum { N = 133, C = 96 };
    float *x = randn(N * C, 9, 2.0f), *w = randn(C, 10, 1.0f), *dy = randn(N * C, 11, 1.0f);
    float *dx0 = randn(N * C, 12, 1.0f), *dw0 = randn(C, 13, 1.0f);
    float *y = t_alloc(N * C), *r = t_alloc(N);
    float *d_x = dput(x, N * C), *d_w = dput(w, C), *d_y = dpoison(N * C), *d_r = dpoison(N);
    dm_rmsnorm_fwd(y, r, x, w, N, C, 1e-5f);
    CU(dm_cuda_rmsnorm_fwd(d_y, d_r, d_x, d_w, N, C, 1e-5f, NULL));
    close_to("rmsnorm fwd y", d_y, y, N * C, F32);
    close_to("rmsnorm fwd rstd", d_r, r, N, F32);
    float *d_dx = dput(dx0, N * C), *d_dw = dput(dw0, C), *d_dy = dput(dy, N * C);
    float *d_rc = dput(r, N); /* the CPU's rstd: the backward alone */
    dm_rmsnorm_bwd(dx0, dw0, dy, x, w, r, N, C);
    CU(dm_cuda_rmsnorm_bwd(d_dx, d_dw, d_dy, d_x, d_w, d_rc, N, C, NULL));
    close_to("rmsnorm bwd dx (accumulated)", d_dx, dx0, N * C, F32);
    close_to("rmsnorm bwd dw (accumulated)", d_dw, dw0, C, F32);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(y), free(r);
    dfree_all();
}

/* ---- the gated RMSNorm, both gates ---- */
static void gatednorm_body(void) {
    enum { R = 150, D = 64 };
    for (int act = 0; act < 2; act++) {
        const char *an = act == DM_GATE_SWISH ? "swish" : "sigmoid";
        char what[64];
        float *o = randn(R * D, 14, 1.5f), *z = randn(R * D, 15, 2.0f), *w = randn(D, 16, 1.0f);
        float *dy = randn(R * D, 17, 1.0f), *dw0 = randn(D, 18, 1.0f);
        float *y = t_alloc(R * D), *r = t_alloc(R), *dO = t_alloc(R * D), *dz = t_alloc(R * D);
        float *d_o = dput(o, R * D), *d_z = dput(z, R * D), *d_w = dput(w, D);
        float *d_y = dpoison(R * D), *d_r = dpoison(R);
        dm_gatednorm_fwd(y, r, o, z, w, R, D, 1e-5f, act);
        CU(dm_cuda_gatednorm_fwd(d_y, d_r, d_o, d_z, d_w, R, D, 1e-5f, act, NULL));
        snprintf(what, sizeof what, "gatednorm %s fwd y", an);
        close_to(what, d_y, y, R * D, F32);
        snprintf(what, sizeof what, "gatednorm %s fwd rstd", an);
        close_to(what, d_r, r, R, F32);
        float *d_dy = dput(dy, R * D), *d_rc = dput(r, R), *d_dw = dput(dw0, D);
        float *d_do = dpoison(R * D), *d_dz = dpoison(R * D);
        dm_gatednorm_bwd(dO, dz, dw0, dy, o, z, w, r, R, D, act);
        CU(dm_cuda_gatednorm_bwd(d_do, d_dz, d_dw, d_dy, d_o, d_z, d_w, d_rc, R, D, act, NULL));
        snprintf(what, sizeof what, "gatednorm %s bwd do", an);
        close_to(what, d_do, dO, R * D, F32);
        snprintf(what, sizeof what, "gatednorm %s bwd dz", an);
        close_to(what, d_dz, dz, R * D, F32);
        snprintf(what, sizeof what, "gatednorm %s bwd dw", an);
        close_to(what, d_dw, dw0, D, F32);
        free(o), free(z), free(w), free(dy), free(dw0), free(y), free(r), free(dO), free(dz);
        dfree_all();
    }
}

/* ---- the L2 norm, plain and SiLU-fused, the backward also in place ---- */
static void l2norm_body(void) {
    enum { R = 77, D = 48 };
    float *x = randn(R * D, 19, 1.0f), *dy = randn(R * D, 20, 1.0f);
    float *y = t_alloc(R * D), *rn = t_alloc(R), *dx = t_alloc(R * D);
    float *d_x = dput(x, R * D), *d_y = dpoison(R * D), *d_rn = dpoison(R);
    for (int silu = 0; silu < 2; silu++) {
        const char *nm = silu ? "silu+l2norm" : "l2norm";
        char what[64];
        if (silu) dm_silu_l2norm_fwd(y, rn, x, R, D, 1e-6f);
        else dm_l2norm_fwd(y, rn, x, R, D, 1e-6f);
        CU(silu ? dm_cuda_silu_l2norm_fwd(d_y, d_rn, d_x, R, D, 1e-6f, NULL)
                : dm_cuda_l2norm_fwd(d_y, d_rn, d_x, R, D, 1e-6f, NULL));
        snprintf(what, sizeof what, "%s fwd y", nm);
        close_to(what, d_y, y, R * D, F32);
        snprintf(what, sizeof what, "%s fwd rn", nm);
        close_to(what, d_rn, rn, R, F32);
        float *d_yc = dput(y, R * D), *d_rc = dput(rn, R), *d_dy = dput(dy, R * D);
        float *d_dx = dpoison(R * D);
        if (silu) dm_silu_l2norm_bwd(dx, dy, y, rn, x, R, D);
        else dm_l2norm_bwd(dx, dy, y, rn, R, D);
        CU(silu ? dm_cuda_silu_l2norm_bwd(d_dx, d_dy, d_yc, d_rc, d_x, R, D, NULL)
                : dm_cuda_l2norm_bwd(d_dx, d_dy, d_yc, d_rc, R, D, NULL));
        snprintf(what, sizeof what, "%s bwd", nm);
        close_to(what, d_dx, dx, R * D, F32);
        CU(silu ? dm_cuda_silu_l2norm_bwd(d_dy, d_dy, d_yc, d_rc, d_x, R, D, NULL)
                : dm_cuda_l2norm_bwd(d_dy, d_dy, d_yc, d_rc, R, D, NULL));
        snprintf(what, sizeof what, "%s bwd in place", nm);
        close_to(what, d_dy, dx, R * D, F32);
    }
    free(x), free(dy), free(y), free(rn), free(dx);
    dfree_all();
}

/* ---- the causal conv ---- */
static void conv_body(void) {
    enum { B = 2, T = 37, C = 48, W = 4 };
    const size_t n = (size_t)B * T * C;
    float *x = randn(n, 21, 1.0f), *w = randn(C * W, 22, 0.5f), *dy = randn(n, 23, 1.0f);
    float *dw0 = randn(C * W, 24, 1.0f), *y = t_alloc(n), *dx = t_alloc(n);
    float *d_x = dput(x, n), *d_w = dput(w, C * W), *d_y = dpoison(n);
    dm_conv_fwd(y, x, w, B, T, C, W);
    CU(dm_cuda_conv_fwd(d_y, d_x, d_w, B, T, C, W, NULL));
    close_to("conv fwd", d_y, y, n, F32);
    float *d_dy = dput(dy, n), *d_dx = dpoison(n), *d_dw = dput(dw0, C * W);
    dm_conv_bwd(dx, dw0, dy, x, w, B, T, C, W);
    CU(dm_cuda_conv_bwd(d_dx, d_dw, d_dy, d_x, d_w, B, T, C, W, NULL));
    close_to("conv bwd dx", d_dx, dx, n, F32);
    close_to("conv bwd dw (accumulated)", d_dw, dw0, C * W, F32);
    free(x), free(w), free(dy), free(dw0), free(y), free(dx);
    dfree_all();
}

/* ---- the forget gate: KDA (per channel) and GDN (per head), both bounds ---- */
static void gate_body(void) {
    enum { N = 97, H = 3 };
    const int cgs[2] = {16, 1};
    const float lbs[2] = {0.0f, -5.0f};
    for (int ci = 0; ci < 2; ci++)
        for (int li = 0; li < 2; li++) {
            int Cg = cgs[ci];
            float lb = lbs[li];
            size_t n = (size_t)N * H * Cg;
            char what[64];
            float *f = randn(n, 25, 3.0f), *A = randn(H, 26, 0.5f), *dtb = randn(H * Cg, 27, 1.0f);
            float *dg = randn(n, 28, 1.0f), *dA0 = randn(H, 29, 1.0f);
            float *ddt0 = randn(H * Cg, 30, 1.0f), *g = t_alloc(n), *df = t_alloc(n);
            float *d_f = dput(f, n), *d_A = dput(A, H), *d_dtb = dput(dtb, H * Cg);
            float *d_g = dpoison(n);
            dm_gate_fwd(g, f, A, dtb, N, H, Cg, lb);
            CU(dm_cuda_gate_fwd(d_g, d_f, d_A, d_dtb, N, H, Cg, lb, NULL));
            snprintf(what, sizeof what, "gate Cg=%d lb=%g fwd", Cg, lb);
            close_to(what, d_g, g, n, F32);
            float *d_dg = dput(dg, n), *d_df = dpoison(n), *d_dA = dput(dA0, H);
            float *d_ddt = dput(ddt0, H * Cg);
            dm_gate_bwd(df, dA0, ddt0, dg, f, A, dtb, N, H, Cg, lb);
            CU(dm_cuda_gate_bwd(d_df, d_dA, d_ddt, d_dg, d_f, d_A, d_dtb, N, H, Cg, lb, NULL));
            snprintf(what, sizeof what, "gate Cg=%d lb=%g bwd df", Cg, lb);
            close_to(what, d_df, df, n, F32);
            snprintf(what, sizeof what, "gate Cg=%d lb=%g bwd dA_log", Cg, lb);
            close_to(what, d_dA, dA0, H, F32);
            snprintf(what, sizeof what, "gate Cg=%d lb=%g bwd ddt_bias", Cg, lb);
            close_to(what, d_ddt, ddt0, H * Cg, F32);
            /* in place: df over dg */
            CU(dm_cuda_gate_bwd(d_dg, d_dA, d_ddt, d_dg, d_f, d_A, d_dtb, N, H, Cg, lb, NULL));
            snprintf(what, sizeof what, "gate Cg=%d lb=%g bwd in place", Cg, lb);
            close_to(what, d_dg, df, n, F32);
            free(f), free(A), free(dtb), free(dg), free(dA0), free(ddt0), free(g), free(df);
            dfree_all();
        }
}

/* ---- cross-entropy ---- */
static void xent_body(void) {
    enum { N = 203 };
    for (size_t k = 0; k < sizeof VOCABS / sizeof VOCABS[0]; k++) {
        int w = VOCABS[k].w, V = VOCABS[k].V;
        float *lg = randn((size_t)N * V, 31, 3.0f), *loss = t_alloc(N);
        float *dl = t_alloc((size_t)N * V);
        void *t = ids_of(w, N, V, 7);
        float *d_lg = dput(lg, (size_t)N * V), *d_loss = dpoison(N);
        void *d_t = dput8(t, (size_t)N * w);
        double *d_mean = dalloc(sizeof(double)), mean = NAN;
        double cpu_mean = dm_xent_fwd_ids(loss, lg, t, w, N, V);
        CU(dm_cuda_xent_fwd(d_loss, d_mean, d_lg, d_t, w, N, V, NULL));
        printf("  ids of %d bytes, vocabulary %d:\n", w, V);
        close_to("xent fwd losses", d_loss, loss, N, F32);
        CU(dm_cuda_sync(NULL));
        CU(dm_cuda_download(&mean, d_mean, sizeof mean, NULL));
        printf("  xent mean gpu %.9f cpu %.9f\n", mean, cpu_mean);
        CHECKF(fabs(mean - cpu_mean) <= 1e-5 * fabs(cpu_mean), "mean %.9g vs %.9g", mean,
               cpu_mean);
        float *d_dl = dpoison((size_t)N * V);
        dm_xent_bwd_yb_ids(dl, NULL, lg, t, w, N, V, 1.0f / N);
        CU(dm_cuda_xent_bwd(d_dl, d_lg, d_t, w, N, V, 1.0f / N, NULL));
        close_to("xent bwd", d_dl, dl, (size_t)N * V, F32);
        CU(dm_cuda_xent_bwd(d_lg, d_lg, d_t, w, N, V, 1.0f / N, NULL));
        close_to("xent bwd in place", d_lg, dl, (size_t)N * V, F32);
        free(lg), free(loss), free(dl), free(t);
        dfree_all();
    }
}

/* ---- the dense layer's three products (f32 or bf16 operands) ---- */
static dm_cuda_blas *blas(void) {
    static dm_cuda_blas *b;
    const char *why = NULL;
    if (!b) b = dm_cuda_blas_create(&why);
    if (!b) {
        fprintf(stderr, "cuBLASLt cannot start: %s\n", why);
        abort();
    }
    return b;
}
/* the operand the product reads: the f32 buffer, or its bf16 copy made on the device */
static const void *operand(const float *d, size_t n, int bf16) {
    if (!bf16) return d;
    uint16_t *b = dalloc(2 * n + 4);
    CU(dm_cuda_bf16_from_f32(b, d, n, NULL));
    return b;
}
static void matmul_case(int bf16) {
    enum { N = 67, K = 48, O = 80 };
    /* docs/bf16.md: the bf16 product against the f32 product of the rounded operands */
    const double tol = bf16 ? 1e-6 : F32;
    const char *pn = bf16 ? "bf16" : "fp32";
    char what[64];
    float *in = randn(N * K, 32, 1.0f), *W = randn(O * K, 33, 0.3f), *bias = randn(O, 34, 1.0f);
    float *dout = randn(N * O, 35, 1.0f), *dW0 = randn(O * K, 36, 1.0f);
    float *db0 = randn(O, 37, 1.0f), *din0 = randn(N * K, 38, 1.0f);
    float *out = t_alloc(N * O), *din = t_alloc(N * K);
    float *d_in = dput(in, N * K), *d_W = dput(W, O * K), *d_b = dput(bias, O);
    float *d_do = dput(dout, N * O), *d_out = dpoison(N * O);
    const void *o_in = operand(d_in, N * K, bf16), *o_W = operand(d_W, O * K, bf16);
    const void *o_do = operand(d_do, N * O, bf16);
    if (bf16) { /* the CPU's operands: the same roundings, kept in f32 */
        dm_bf16_round(in, in, N * K);
        dm_bf16_round(W, W, O * K);
    }
    float *dout_r = t_alloc(N * O);
    memcpy(dout_r, dout, sizeof(float) * N * O);
    if (bf16) dm_bf16_round(dout_r, dout_r, N * O);

    dm_matmul_fwd(NULL, out, in, W, bias, N, K, O);
    CU(dm_cuda_matmul_fwd(blas(), bf16, d_out, o_in, o_W, d_b, N, K, O, NULL));
    snprintf(what, sizeof what, "matmul %s fwd", pn);
    close_to(what, d_out, out, N * O, tol);

    float *d_din = dpoison(N * K);
    dm_matmul_bwd_data(NULL, din, dout_r, W, N, K, O, 0);
    CU(dm_cuda_matmul_bwd_data(blas(), bf16, d_din, o_do, o_W, N, K, O, 0, NULL));
    snprintf(what, sizeof what, "matmul %s bwd data", pn);
    close_to(what, d_din, din, N * K, tol);
    float *d_din2 = dput(din0, N * K);
    dm_matmul_bwd_data(NULL, din0, dout_r, W, N, K, O, 1);
    CU(dm_cuda_matmul_bwd_data(blas(), bf16, d_din2, o_do, o_W, N, K, O, 1, NULL));
    snprintf(what, sizeof what, "matmul %s bwd data (accumulated)", pn);
    close_to(what, d_din2, din0, N * K, tol);

    float *d_dW = dput(dW0, O * K), *d_db = dput(db0, O);
    /* the CPU: dW from the rounded operands, dbias from the f32 dout */
    dm_matmul_bwd_weight(NULL, dW0, NULL, dout_r, in, N, K, O);
    dm_matmul_bias_grad(db0, dout, N, O);
    CU(dm_cuda_matmul_bwd_weight(blas(), bf16, d_dW, d_db, o_do, d_do, o_in, N, K, O, NULL));
    snprintf(what, sizeof what, "matmul %s bwd weight", pn);
    close_to(what, d_dW, dW0, O * K, tol);
    snprintf(what, sizeof what, "matmul %s bwd bias", pn);
    close_to(what, d_db, db0, O, F32);
    free(in), free(W), free(bias), free(dout), free(dW0), free(db0), free(din0), free(out);
    free(din), free(dout_r);
    dfree_all();
}
static void matmul_fp32_body(void) { matmul_case(0); }
static void matmul_bf16_body(void) { matmul_case(1); }

/* ---- strided batches (Newton–Schulz's slices): X_i X_i^T of 6 slices [40, 96], fp32
 * and bf16, against one CPU product per slice ---- */
static void batched_body(void) {
    enum { S = 6, R = 40, Cc = 96 };
    float *x = randn((size_t)S * R * Cc, 39, 1.0f), *ref = t_alloc((size_t)S * R * R);
    float *d_x = dput(x, (size_t)S * R * Cc);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const void *op = operand(d_x, (size_t)S * R * Cc, bf16);
        float *xr = t_alloc((size_t)S * R * Cc), *d_c = dpoison((size_t)S * R * R);
        memcpy(xr, x, sizeof(float) * S * R * Cc);
        if (bf16) dm_bf16_round(xr, xr, (size_t)S * R * Cc);
        for (int i = 0; i < S; i++)
            dm_gemm(0, 1, R, R, Cc, 1.0f, xr + (size_t)i * R * Cc, Cc, xr + (size_t)i * R * Cc, Cc,
                    0.0f, ref + (size_t)i * R * R, R);
        CU(dm_cuda_gemm_batched(blas(), bf16, 0, 1, R, R, Cc, 1.0f, op, Cc, (long long)R * Cc, op,
                                Cc, (long long)R * Cc, 0.0f, d_c, R, (long long)R * R, S, NULL));
        close_to(bf16 ? "batched X X^T bf16" : "batched X X^T fp32", d_c, ref, (size_t)S * R * R,
                 bf16 ? 1e-6 : F32);
        free(xr);
    }
    free(x), free(ref);
    dfree_all();
}

/* ---- Newton–Schulz on a stack, wide and tall slices, both schedules, a zero slice,
 * against backends/cpu/kernels/ns.c's f32 dm_ns ---- */
static void ns_body(void) {
    /* [33, 45]: 5 slices of an odd size, so the workspace's doubles follow an odd number
     * of floats */
    const int shapes[3][2] = {{32, 80}, {72, 24}, {33, 45}};
    const dm_ns_sched scheds[2] = {DM_NS_QUINTIC5, DM_NS_POLAR5};
    for (int si = 0; si < 3; si++)
        for (int k = 0; k < 2; k++) {
            dm_ns_sched sc = scheds[k];
            enum { S = 5 };
            int rows = shapes[si][0], cols = shapes[si][1], steps = dm_ns_sched_steps(sc);
            size_t len = (size_t)rows * cols;
            float *G = randn(S * len, 70 + si, 0.02f), *ref = t_alloc(S * len);
            memset(G + 2 * len, 0, len * sizeof(float)); /* slice 2: zero in, zero out */
            float *cw = t_alloc(dm_ns_work(S, rows, cols));
            dm_ns(ref, G, S, rows, cols, sc, cw);
            float abc[8][3];
            for (int t = 0; t < steps && t < 8; t++) {
                double c[3];
                dm_ns_sched_coeffs(sc, t, c);
                for (int j = 0; j < 3; j++) abc[t][j] = (float)c[j];
            }
            float *d_G = dput(G, S * len), *d_out = dpoison(S * len);
            float *d_w = dpoison(dm_cuda_ns_work(S, rows, cols));
            CU(dm_cuda_ns(blas(), d_out, d_G, S, rows, cols, (const float(*)[3])abc, steps,
                          dm_ns_sched_safety(sc), d_w, NULL));
            char what[64];
            snprintf(what, sizeof what, "ns %s [%d,%d] x %d", dm_ns_sched_name(sc), rows, cols, S);
            close_to(what, d_out, ref, S * len, F32);
            free(G), free(ref), free(cw);
            dfree_all();
        }
}

/* C[m,m] = alpha X X^T (wide) or alpha X^T X (tall) + beta C, or C = alpha P Q with the
 * shapes given, each output summed in double and rounded to f32 once: the host's side of
 * the bf16 NS below */
static void gram(float *C, const float *X, int rows, int cols, float alpha, float beta) {
    int wide = rows <= cols, m = wide ? rows : cols, k = wide ? cols : rows;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += wide ? (double)X[i * cols + l] * X[j * cols + l]
                          : (double)X[l * cols + i] * X[l * cols + j];
            C[i * m + j] = (float)(alpha * s + beta * C[i * m + j]);
        }
}
/* one slice of bf16 NS on the host over `steps` steps of sched: the same roundings as
 * dm_cuda_ns_bf16 (and kernels/cpu/ns.c's bf16 path), the products in double */
static void ns_bf16_host(float *out, const float *G, int rows, int cols, dm_ns_sched sc,
                         int steps) {
    int wide = rows <= cols, m = wide ? rows : cols;
    size_t len = (size_t)rows * cols, mm = (size_t)m * m;
    float *X = t_alloc(len), *A = t_alloc(mm), *Ab = t_alloc(mm), *Y = t_alloc(len);
    double ss = 0;
    for (size_t i = 0; i < len; i++) ss += (double)G[i] * G[i];
    double inv = ss > 0 ? 1.0 / (dm_ns_sched_safety(sc) * sqrt(ss)) : 0.0;
    for (size_t i = 0; i < len; i++) X[i] = (float)((double)G[i] * inv);
    dm_bf16_round(X, X, len);
    for (int t = 0; t < steps; t++) {
        double c[3];
        dm_ns_sched_coeffs(sc, t, c);
        gram(A, X, rows, cols, 1.0f, 0.0f);
        dm_bf16_round(Ab, A, mm);
        for (int i = 0; i < m; i++) /* A = c Ab Ab + b A, then + a on the diagonal */
            for (int j = 0; j < m; j++) {
                double s = 0;
                for (int l = 0; l < m; l++) s += (double)Ab[i * m + l] * Ab[l * m + j];
                A[i * m + j] = (float)((float)c[2] * s + (float)c[1] * A[i * m + j]);
            }
        for (int i = 0; i < m; i++) A[i * m + i] += (float)c[0];
        dm_bf16_round(A, A, mm); /* Bb */
        for (int r = 0; r < rows; r++) /* Y = Bb X (wide) or X Bb^T (tall) */
            for (int q = 0; q < cols; q++) {
                double s = 0;
                for (int l = 0; l < m; l++)
                    s += wide ? (double)A[r * m + l] * X[l * cols + q]
                              : (double)X[r * cols + l] * A[q * m + l];
                Y[r * cols + q] = (float)s;
            }
        if (t < steps - 1) dm_bf16_round(X, Y, len);
    }
    memcpy(out, Y, len * sizeof(float));
    free(X), free(A), free(Ab), free(Y);
}

/* ---- bf16 Newton-Schulz: wide, tall and odd stacks with a zero slice, against the host's
 * run of the same roundings (its products summed in double). One step agrees to 2e-3 (rel
 * RMS: on a GPU the products' f32 sums in another order flip a bf16 rounding of A or B
 * now and then, each 2^-8 of an element; the emulator's sums give the host's bits); after
 * the schedule's 5 steps such flips have grown (the quintic's slope is 3.4 near 0), so
 * there the two agree within 5% and both are within 5% of the fp32 iteration (bf16 NS on
 * the CPU: 1.4-2.7%, docs/bf16.md section 5); zero slices stay zero. ---- */
static void ns_bf16_body(void) {
    const int shapes[3][2] = {{32, 80}, {72, 24}, {33, 45}};
    dm_ns_sched sc = DM_NS_QUINTIC5;
    for (int si = 0; si < 3; si++) {
        enum { S = 3 };
        int rows = shapes[si][0], cols = shapes[si][1], all = dm_ns_sched_steps(sc);
        size_t len = (size_t)rows * cols;
        float *G = randn(S * len, 170 + si, 0.02f), *ref = t_alloc(S * len);
        float *f32 = t_alloc(S * len), *got = t_alloc(S * len);
        memset(G + len, 0, len * sizeof(float)); /* slice 1: zero in, zero out */
        float *cw = t_alloc(dm_ns_work(S, rows, cols));
        dm_ns(f32, G, S, rows, cols, sc, cw);
        float abc[8][3];
        for (int t = 0; t < all; t++) {
            double c[3];
            dm_ns_sched_coeffs(sc, t, c);
            for (int j = 0; j < 3; j++) abc[t][j] = (float)c[j];
        }
        for (int steps = 1; steps <= all; steps += all - 1) {
            for (int h = 0; h < S; h++)
                ns_bf16_host(ref + h * len, G + h * len, rows, cols, sc, steps);
            float *d_G = dput(G, S * len), *d_out = dpoison(S * len);
            float *d_w = dpoison(dm_cuda_ns_bf16_work(S, rows, cols));
            CU(dm_cuda_ns_bf16(blas(), d_out, d_G, S, rows, cols, (const float(*)[3])abc,
                               steps, dm_ns_sched_safety(sc), d_w, NULL));
            CU(dm_cuda_download(got, d_out, S * len * sizeof(float), NULL));
            double e = t_rel_rms_ff(got, ref, S * len), ef = t_rel_rms_ff(got, f32, S * len);
            double rf = t_rel_rms_ff(ref, f32, S * len);
            int zero = 1;
            for (size_t i = 0; i < len; i++) zero &= got[len + i] == 0.0f;
            if (steps == 1)
                printf("  ns bf16 [%d,%d] x %d, 1 step: vs the host's bf16 %.2g\n", rows, cols,
                       S, e);
            else
                printf("  ns bf16 [%d,%d] x %d, %d steps: vs the host's bf16 %.2g; vs fp32 %.3g "
                       "(the host's bf16 vs fp32 %.3g)\n", rows, cols, S, steps, e, ef, rf);
            CHECKF(t_all_finite(got, S * len) && zero, "ns bf16 [%d,%d]: not finite, or the "
                   "zero slice not zero", rows, cols);
            if (steps == 1) CHECKF(e <= 2e-3, "ns bf16 [%d,%d], 1 step: %.3g", rows, cols, e);
            else CHECKF(e <= 5e-2 && ef <= 5e-2 && rf <= 5e-2, "ns bf16 [%d,%d]: %.3g from the "
                        "host's, %.3g and %.3g from fp32", rows, cols, e, ef, rf);
            dfree_all();
        }
        free(G), free(ref), free(f32), free(got), free(cw);
    }
}

/* ---- the sphere retraction: 4 slices, one with R = 0 (skipped), one zero (stays zero),
 * against dm_retract_sphere ---- */
static void sphere_body(void) {
    enum { S = 4, R = 24, Cc = 40 };
    const size_t len = (size_t)R * Cc;
    float *W = randn(S * len, 90, 0.1f), rad[S] = {1.5f, 0.0f, 2.0f, 0.7f};
    memset(W + 2 * len, 0, len * sizeof(float));
    float *d_W = dput(W, S * len), *d_R = dput(rad, S);
    dm_retract_sphere(W, rad, S, R, Cc);
    CU(dm_cuda_retract_sphere(d_W, d_R, S, len, dalloc(S * sizeof(double)), NULL));
    close_to("sphere retraction", d_W, W, S * len, F32);
    free(W);
    dfree_all();
}

/* The Stiefel retraction against the CPU's (dm_retract_stiefel) for wide, tall and square
 * stacks: near the manifold (the quintic alone), far from it (a Gaussian square slice:
 * Polar Express rounds), a zero slice (its bound 0) and a slice with s = 0 (skipped): the
 * weights within F32 of the CPU's, and every retracted slice's Gram defect
 * ||W W^T / s^2 - I||_F (W^T W when tall) within DM_RETRACT_TOL */
static void stiefel_case(int n, int rows, int cols, float spread, uint64_t seed) {
    const size_t len = (size_t)rows * cols;
    const int m = rows < cols ? rows : cols;
    float *W = randn(n * len, seed, spread), *s = t_alloc(n);
    for (int i = 0; i < n; i++) s[i] = 0.5f + 0.25f * i;
    if (n > 2) s[1] = 0.0f; /* skipped */
    if (n > 3) memset(W + 3 * len, 0, len * sizeof(float));
    float *d_W = dput(W, n * len), *d_s = dput(s, n);
    float *cw = t_alloc(dm_retract_stiefel_work(n, rows, cols));
    dm_retract_stiefel(W, s, n, rows, cols, cw, NULL);
    CU(dm_cuda_retract_stiefel(blas(), d_W, d_s, n, rows, cols,
                               dpoison(dm_cuda_retract_stiefel_work(n, rows, cols)), NULL));
    char what[80];
    snprintf(what, sizeof what, "stiefel %d x [%d, %d]", n, rows, cols);
    close_to(what, d_W, W, n * len, F32);
    float *h = dget(d_W, n * len);
    for (int i = 0; i < n; i++) {
        if (s[i] <= 0.0f || (n > 3 && i == 3)) continue;
        double worst = 0;
        for (int a = 0; a < m; a++)
            for (int b = 0; b < m; b++) {
                double g = 0;
                for (int k = 0; k < (rows <= cols ? cols : rows); k++) {
                    const float *x = h + i * len;
                    g += rows <= cols ? (double)x[a * cols + k] * x[b * cols + k]
                                      : (double)x[k * cols + a] * x[k * cols + b];
                }
                double d = g / ((double)s[i] * s[i]) - (a == b);
                worst += d * d;
            }
        CHECKF(sqrt(worst) <= DM_RETRACT_TOL, "%s slice %d: Gram defect %.3g", what, i,
               sqrt(worst));
    }
    free(W), free(s), free(cw), free(h);
    dfree_all();
}
static void stiefel_body(void) {
    stiefel_case(5, 16, 40, 0.05f, 91); /* wide; one skipped, one zero */
    stiefel_case(2, 40, 16, 0.05f, 92); /* tall */
    stiefel_case(1, 24, 24, 1.0f, 93);  /* a square Gaussian: several Polar Express rounds */
}

/* ---- the delta core against the reference, KDA and GDN: the token-serial forward and
 * backward, the chunked forward ---- */
static void delta_run(dm_delta_dims d) {
    const int scalar_gate = d.scalar_gate;
    d.scale = 1.0f / sqrtf((float)d.dk);
    const size_t nk = (size_t)d.B * d.T * d.H * d.dk, nv = (size_t)d.B * d.T * d.H * d.dv;
    const size_t ns = (size_t)d.B * d.T * d.H, nh = (size_t)d.B * d.H * d.dk * d.dv;
    const size_t ng = scalar_gate ? ns : nk;
    char mn[64], what[128];
    snprintf(mn, sizeof mn, "%s T=%d dk=%d dv=%d", scalar_gate ? "gdn" : "kda", d.T, d.dk, d.dv);
    float *q = randn(nk, 40, 1.0f), *k = randn(nk, 41, 1.0f), *v = randn(nv, 42, 1.0f);
    float *g = t_alloc(ng), *beta = t_alloc(ns), *h0 = randn(nh, 43, 0.5f);
    float *dO = randn(nv, 44, 1.0f), *dhT = randn(nh, 45, 0.5f);
    t_fill_uniform(g, ng, 46, -1.0f, -0.01f);
    t_fill_uniform(beta, ns, 47, 0.1f, 1.0f);
    /* unit keys, as the mixer gives the core */
    t_l2norm_rows(k, nk / d.dk, d.dk);
    float *o = t_alloc(nv), *hT = t_alloc(nh);
    dm_delta_ref_fwd(&d, q, k, v, g, beta, h0, o, hT, 1);
    float *d_q = dput(q, nk), *d_k = dput(k, nk), *d_v = dput(v, nv), *d_g = dput(g, ng);
    float *d_b = dput(beta, ns), *d_h0 = dput(h0, nh), *d_o = dpoison(nv), *d_hT = dpoison(nh);
    CU(dm_cuda_delta_serial_fwd(&d, d_q, d_k, d_v, d_g, d_b, d_h0, d_o, d_hT, NULL));
    snprintf(what, sizeof what, "delta %s fwd o", mn);
    close_to(what, d_o, o, nv, F32);
    snprintf(what, sizeof what, "delta %s fwd hT", mn);
    close_to(what, d_hT, hT, nh, F32);
    float *d_oc = dpoison(nv), *d_hTc = dpoison(nh);
    CU(dm_cuda_delta_chunk_fwd(&d, d_q, d_k, d_v, d_g, d_b, d_h0, d_oc, d_hTc, NULL));
    snprintf(what, sizeof what, "delta %s chunked fwd o", mn);
    close_to(what, d_oc, o, nv, F32);
    snprintf(what, sizeof what, "delta %s chunked fwd hT", mn);
    close_to(what, d_hTc, hT, nh, F32);

    float *dq = t_alloc(nk), *dk = t_alloc(nk), *dv = t_alloc(nv), *dg = t_alloc(ng);
    float *db = t_alloc(ns), *dh0 = t_alloc(nh);
    float *work = t_alloc(dm_delta_ref_bwd_work(&d, 1));
    dm_delta_ref_bwd(&d, q, k, v, g, beta, h0, dO, dhT, dq, dk, dv, dg, db, dh0, work, 1);
    float *d_dO = dput(dO, nv), *d_dhT = dput(dhT, nh), *d_dq = dpoison(nk), *d_dk = dpoison(nk);
    float *d_dv = dpoison(nv), *d_dg = dpoison(ng), *d_db = dpoison(ns), *d_dh0 = dpoison(nh);
    float *d_work = dpoison(dm_cuda_delta_serial_bwd_work(&d));
    CU(dm_cuda_delta_serial_bwd(&d, d_q, d_k, d_v, d_g, d_b, d_h0, d_dO, d_dhT, d_dq, d_dk, d_dv,
                                d_dg, d_db, d_dh0, d_work, NULL));
    const struct { const char *n; float *dev, *cpu; size_t len; } outs[] = {
        {"dq", d_dq, dq, nk}, {"dk", d_dk, dk, nk}, {"dv", d_dv, dv, nv},
        {"dg", d_dg, dg, ng}, {"dbeta", d_db, db, ns}, {"dh0", d_dh0, dh0, nh}};
    for (int i = 0; i < 6; i++) {
        snprintf(what, sizeof what, "delta %s bwd %s", mn, outs[i].n);
        close_to(what, outs[i].dev, outs[i].cpu, outs[i].len, F32);
    }
    /* the chunked backward, into fresh poison */
    CHECKF(dm_cuda_delta_chunk_fits(&d), "%s: the chunked core does not fit", mn);
    float *c_dq = dpoison(nk), *c_dk = dpoison(nk), *c_dv = dpoison(nv), *c_dg = dpoison(ng);
    float *c_db = dpoison(ns), *c_dh0 = dpoison(nh);
    CU(dm_cuda_delta_chunk_bwd(&d, d_q, d_k, d_v, d_g, d_b, d_h0, d_dO, d_dhT, c_dq, c_dk, c_dv,
                               c_dg, c_db, c_dh0, dpoison(dm_cuda_delta_chunk_bwd_work(&d)), NULL));
    float *const cdev[6] = {c_dq, c_dk, c_dv, c_dg, c_db, c_dh0};
    for (int i = 0; i < 6; i++) {
        snprintf(what, sizeof what, "delta %s chunked bwd %s", mn, outs[i].n);
        close_to(what, cdev[i], outs[i].cpu, outs[i].len, F32);
    }
    free(q), free(k), free(v), free(g), free(beta), free(h0), free(dO), free(dhT), free(o);
    free(hT), free(dq), free(dk), free(dv), free(dg), free(db), free(dh0), free(work);
    dfree_all();
}
/* T = 77: the chunked forward's chunks of 32 end in a partial one */
static void delta_kda_body(void) {
    delta_run((dm_delta_dims){.B = 2, .T = 77, .H = 2, .dk = 32, .dv = 48, .scalar_gate = 0});
}
static void delta_gdn_body(void) {
    delta_run((dm_delta_dims){.B = 2, .T = 77, .H = 2, .dk = 32, .dv = 48, .scalar_gate = 1});
}
/* the shapes around the kernels' limits: one token; more keys than values and the
 * reverse (the backward's block spans the larger); 128 x 128 heads, whose state needs
 * shared memory past the 48 KiB default (the opt-in path) */
static void delta_shapes_body(void) {
    delta_run((dm_delta_dims){.B = 1, .T = 1, .H = 1, .dk = 32, .dv = 32, .scalar_gate = 0});
    delta_run((dm_delta_dims){.B = 1, .T = 33, .H = 2, .dk = 64, .dv = 32, .scalar_gate = 1});
    delta_run((dm_delta_dims){.B = 1, .T = 33, .H = 1, .dk = 40, .dv = 72, .scalar_gate = 0});
    delta_run((dm_delta_dims){.B = 1, .T = 40, .H = 1, .dk = 128, .dv = 128, .scalar_gate = 0});
}

/* ---- the tensor-core core (chunks of 64, bf16 products) against the reference within
 * fla's bounds for bf16 kernels (relative RMS: o 5e-3; dq, dk, dv and the states 8e-3;
 * the gates and beta 2e-2); its backward from the forward's saved states and from none
 * (computed again) the same bits, and twice the same bits ---- */
#define TC_O 5e-3
#define TC_D 8e-3
#define TC_G 2e-2
static void delta_tc_run(dm_delta_dims d) {
    d.scale = 1.0f / sqrtf((float)d.dk);
    const size_t nk = (size_t)d.B * d.T * d.H * d.dk, nv = (size_t)d.B * d.T * d.H * d.dv;
    const size_t ns = (size_t)d.B * d.T * d.H, nh = (size_t)d.B * d.H * d.dk * d.dv;
    const size_t ng = d.scalar_gate ? ns : nk;
    char mn[64], what[128];
    snprintf(mn, sizeof mn, "%s T=%d dk=%d dv=%d", d.scalar_gate ? "gdn" : "kda", d.T, d.dk,
             d.dv);
    CHECKF(dm_cuda_delta_tc_fits(&d), "%s: the tensor-core core does not fit", mn);
    float *q = randn(nk, 50, 1.0f), *k = randn(nk, 51, 1.0f), *v = randn(nv, 52, 1.0f);
    float *g = t_alloc(ng), *beta = t_alloc(ns), *h0 = randn(nh, 53, 0.5f);
    float *dO = randn(nv, 54, 1.0f), *dhT = randn(nh, 55, 0.5f);
    t_fill_uniform(g, ng, 56, d.scalar_gate ? -0.3f : -1.0f, -0.01f);
    t_fill_uniform(beta, ns, 57, 0.1f, 1.0f);
    t_l2norm_rows(k, nk / d.dk, d.dk);
    t_l2norm_rows(q, nk / d.dk, d.dk);
    float *o = t_alloc(nv), *hT = t_alloc(nh);
    dm_delta_ref_fwd(&d, q, k, v, g, beta, h0, o, hT, 1);
    float *dq = t_alloc(nk), *dk = t_alloc(nk), *dv = t_alloc(nv), *dg = t_alloc(ng);
    float *db = t_alloc(ns), *dh0 = t_alloc(nh);
    float *work = t_alloc(dm_delta_ref_bwd_work(&d, 1));
    dm_delta_ref_bwd(&d, q, k, v, g, beta, h0, dO, dhT, dq, dk, dv, dg, db, dh0, work, 1);

    float *d_q = dput(q, nk), *d_k = dput(k, nk), *d_v = dput(v, nv), *d_g = dput(g, ng);
    float *d_b = dput(beta, ns), *d_h0 = dput(h0, nh), *d_dO = dput(dO, nv);
    float *d_dhT = dput(dhT, nh), *d_o = dpoison(nv), *d_hT = dpoison(nh);
    float *d_saved = dpoison(dm_cuda_delta_tc_saved(&d));
    float *d_work = dpoison(dm_cuda_delta_tc_work(&d));
    CU(dm_cuda_delta_tc_fwd(&d, d_q, d_k, d_v, d_g, d_b, d_h0, d_o, d_hT, d_saved, d_work, NULL));
    snprintf(what, sizeof what, "tc %s fwd o", mn);
    close_to(what, d_o, o, nv, TC_O);
    snprintf(what, sizeof what, "tc %s fwd hT", mn);
    close_to(what, d_hT, hT, nh, TC_D);
    const struct { const char *n; float *cpu; size_t len; double tol; } outs[] = {
        {"dq", dq, nk, TC_D}, {"dk", dk, nk, TC_D}, {"dv", dv, nv, TC_D},
        {"dg", dg, ng, TC_G}, {"dbeta", db, ns, TC_G}, {"dh0", dh0, nh, TC_D}};
    float *run[3][6];
    for (int r = 0; r < 3; r++) { /* saved, saved again, none */
        for (int i = 0; i < 6; i++) run[r][i] = dpoison(outs[i].len);
        CU(dm_cuda_delta_tc_bwd(&d, d_q, d_k, d_v, d_g, d_b, d_h0, r < 2 ? d_saved : NULL,
                                d_dO, d_dhT, run[r][0], run[r][1], run[r][2], run[r][3],
                                run[r][4], run[r][5], dpoison(dm_cuda_delta_tc_work(&d)),
                                NULL));
    }
    for (int i = 0; i < 6; i++) {
        snprintf(what, sizeof what, "tc %s bwd %s", mn, outs[i].n);
        close_to(what, run[0][i], outs[i].cpu, outs[i].len, outs[i].tol);
        float *a = dget(run[0][i], outs[i].len), *b = dget(run[1][i], outs[i].len);
        float *c = dget(run[2][i], outs[i].len);
        CHECKF(memcmp(a, b, outs[i].len * sizeof(float)) == 0, "%s: two runs differ", what);
        CHECKF(memcmp(a, c, outs[i].len * sizeof(float)) == 0,
               "%s: from the saved states and from none differ", what);
        free(a), free(b), free(c);
    }
    free(q), free(k), free(v), free(g), free(beta), free(h0), free(dO), free(dhT), free(o);
    free(hT), free(dq), free(dk), free(dv), free(dg), free(db), free(dh0), free(work);
    dfree_all();
}
/* T = 150: three chunks of 64, the last one partial */
static void delta_tc_kda_body(void) {
    delta_tc_run((dm_delta_dims){.B = 1, .T = 150, .H = 2, .dk = 32, .dv = 48, .scalar_gate = 0});
}
static void delta_tc_gdn_body(void) {
    delta_tc_run((dm_delta_dims){.B = 2, .T = 100, .H = 1, .dk = 48, .dv = 32, .scalar_gate = 1});
}
/* the model's heads (64 x 64: the backward's tiles near the 227 KiB of shared memory); one
 * token */
static void delta_tc_shapes_body(void) {
    delta_tc_run((dm_delta_dims){.B = 1, .T = 70, .H = 1, .dk = 64, .dv = 64, .scalar_gate = 0});
    delta_tc_run((dm_delta_dims){.B = 1, .T = 1, .H = 1, .dk = 16, .dv = 16, .scalar_gate = 0});
}

/* ---- the optimizer: the gradient's sum of squares (in double), AdamW and Muon's
 * momentum and weight step (plain and cautious decay) against optim.c's and muon.c's
 * updates computed here in double; NorMuon against ref/normuon_ref.c ---- */
static void optim_body(void) {
    enum { n = 100003 };
    float *g = randn(n, 60, 1.0f), *p = randn(n, 61, 1.0f);
    double ref = 0.0, *d_out = dalloc(sizeof(double)), sum = NAN;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    CU(dm_cuda_sumsq(d_out, dput(g, n), n, dalloc(DM_CUDA_SUMSQ_BLOCKS * sizeof(double)), NULL));
    CU(dm_cuda_sync(NULL));
    CU(dm_cuda_download(&sum, d_out, sizeof sum, NULL));
    printf("  sum of squares gpu %.17g ref %.17g\n", sum, ref);
    CHECKF(fabs(sum - ref) <= 1e-12 * ref, "sum of squares %.17g vs %.17g", sum, ref);
    /* the norm and the clipping factor, left in device memory: a threshold below the norm
     * scales by threshold / norm, one above it (or none) by 1 */
    for (int k = 0; k < 3; k++) {
        float clip = k == 0 ? 0.0f : k == 1 ? (float)(0.5 * sqrt(ref)) : (float)(2 * sqrt(ref));
        float *d_gsc = dalloc(sizeof(float)), gsc = NAN;
        CU(dm_cuda_grad_norm(d_out, d_gsc, dput(g, n), n, clip,
                             dalloc(DM_CUDA_SUMSQ_BLOCKS * sizeof(double)), NULL));
        CU(dm_cuda_sync(NULL));
        CU(dm_cuda_download(&sum, d_out, sizeof sum, NULL));
        CU(dm_cuda_download(&gsc, d_gsc, sizeof gsc, NULL));
        float want = k == 1 ? (float)((double)clip / sqrt(ref)) : 1.0f;
        CHECKF(fabs(sum - sqrt(ref)) <= 1e-12 * sqrt(ref) && fabsf(gsc - want) <= 1e-6f * want,
               "grad norm (clip %g): %.17g vs %.17g, factor %.9g vs %.9g", clip, sum, sqrt(ref),
               gsc, want);
    }
    const float lr = 0.01f, wd = 0.1f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gs = 0.5f;
    const float *d_gs = dput(&gs, 1); /* the clipping factor, as grad_norm leaves it */
    double *pd = t_allocd(n), *m1 = t_allocd(n), *m2 = t_allocd(n);
    for (int cautious = 0; cautious < 2; cautious++) { /* plain and cautious decay */
        t_to_double(pd, p, n);
        for (size_t i = 0; i < n; i++) m1[i] = m2[i] = 0.0;
        float *d_p = dput(p, n), *d_g = dput(g, n), *d_m1 = dalloc(4 * n), *d_m2 = dalloc(4 * n);
        CU(dm_cuda_zero(d_m1, 4 * n, NULL));
        CU(dm_cuda_zero(d_m2, 4 * n, NULL));
        for (long t = 1; t <= 3; t++) { /* the step's values in device memory, as optim.c's */
            float hyper[DM_ADAM_HYPER];
            dm_adam_hyper(hyper, lr, wd, b1, b2, t);
            CU(dm_cuda_adamw(d_p, d_g, d_m1, d_m2, n, dput(hyper, DM_ADAM_HYPER), b1, b2, eps,
                             d_gs, cautious, NULL));
            double k1 = 1.0 / (1.0 - pow(b1, (double)t)), k2 = 1.0 / (1.0 - pow(b2, (double)t));
            for (size_t i = 0; i < n; i++) {
                double gi = (double)g[i] * gs;
                m1[i] = b1 * m1[i] + (1.0 - b1) * gi;
                m2[i] = b2 * m2[i] + (1.0 - b2) * gi * gi;
                double dec = cautious && m1[i] * pd[i] < 0 ? 1.0 : 1.0 - (double)lr * wd;
                pd[i] = pd[i] * dec - lr * m1[i] * k1 / (sqrt(m2[i] * k2) + eps);
            }
        }
        float *hp = dget(d_p, n), *hm = dget(d_m1, n);
        double rp = t_rel_rms(hp, pd, n), rm = t_rel_rms(hm, m1, n);
        printf("  adamw%s 3 steps: p rel rms %.3g, m1 %.3g\n", cautious ? " (cautious)" : "",
               rp, rm);
        CHECKF(t_all_finite(hp, n) && rp <= F32 && rm <= F32, "adamw: p %.3g m1 %.3g", rp, rm);
        free(hp), free(hm);
    }
    float *d_g = dput(g, n);
    /* Muon's momentum (Nesterov) twice, then a weight step with the update u, against the
     * same in double (m1 reused as the momentum, m2 as u, pd as the weights) */
    const float beta = 0.95f, decay = 0.999f, step = 0.02f;
    float *d_mom = dalloc(4 * n), *d_u = dpoison(n);
    CU(dm_cuda_zero(d_mom, 4 * n, NULL));
    for (size_t i = 0; i < n; i++) m1[i] = 0.0;
    for (int it = 0; it < 2; it++) {
        CU(dm_cuda_muon_momentum(d_mom, d_g, d_u, n, beta, d_gs, NULL));
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            m1[i] = beta * m1[i] + (1.0 - beta) * gi;
            m2[i] = (1.0 - beta) * gi + beta * m1[i];
        }
    }
    float *hu = dget(d_u, n);
    double ru = t_rel_rms(hu, m2, n);
    printf("  muon momentum: u rel rms %.3g\n", ru);
    CHECKF(ru <= F32, "muon: u %.3g", ru);
    for (int cautious = 0; cautious < 2; cautious++) { /* the weight step, plain and cautious */
        float *d_w = dput(p, n);
        const float ds[DM_MUON_HYPER] = {decay, step};
        CU(dm_cuda_muon_update(d_w, d_u, n, dput(ds, DM_MUON_HYPER), cautious, NULL));
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            double dec = cautious && (double)hu[i] * p[i] < 0 ? 1.0 : decay;
            kept += dec == 1.0;
            pd[i] = (double)p[i] * dec - step * (double)hu[i];
        }
        float *hw = dget(d_w, n);
        double rw = t_rel_rms(hw, pd, n);
        printf("  muon weight step%s: rel rms %.3g (%zu of %d undecayed)\n",
               cautious ? " (cautious)" : "", rw, kept, (int)n);
        CHECKF(rw <= F32 && (cautious ? kept > n / 4 : kept == 0), "muon: w %.3g, kept %zu", rw,
               kept);
        free(hw);
    }
    /* NorMuon on 3 slices of 70 x 50 against the reference (in double, two passes), twice
     * (the moments carried) */
    enum { NS = 3, R = 70, C = 50 };
    float *x = randn((size_t)NS * R * C, 62, 1.0f), *v = t_alloc((size_t)NS * R);
    for (int i = 0; i < NS * R; i++) v[i] = 0.01f * (float)(i % 7);
    float *d_x = dput(x, (size_t)NS * R * C), *d_v = dput(v, (size_t)NS * R);
    for (int it = 0; it < 2; it++) {
        CU(dm_cuda_normuon(d_x, d_v, NS, R, C, 0.95f, 1e-8f, NULL));
        dm_normuon_ref(x, v, NS, R, C, 0.95f, 1e-8f);
    }
    close_to("normuon x (2 calls)", d_x, x, (size_t)NS * R * C, F32);
    close_to("normuon v (2 calls)", d_v, v, (size_t)NS * R, F32);
    free(x), free(v);
    free(g), free(p), free(pd), free(m1), free(m2), free(hu);
    dfree_all();
}

/* the same bits in two device buffers */
static int same_bits(const float *a, const float *b, size_t n) {
    float *ha = dget(a, n), *hb = dget(b, n);
    int same = memcmp(ha, hb, n * sizeof(float)) == 0;
    free(ha), free(hb);
    return same;
}

/* ---- a captured graph replays the launches it captured: the same bits as the launches
 * themselves; an event pair times it ---- */
static int chain(dm_cuda_stream s, float *y, float *r, float *h, float *out, double *mean,
                 float *loss, const float *x, const float *w, const float *W, const uint8_t *t,
                 int N, int C) {
    int e = dm_cuda_rmsnorm_fwd(y, r, x, w, N, C, 1e-5f, s);
    if (!e) e = dm_cuda_silu_fwd(h, y, (size_t)N * C, s);
    if (!e) e = dm_cuda_matmul_fwd(blas(), 0, out, h, W, NULL, N, C, 256, s);
    if (!e) e = dm_cuda_xent_fwd(loss, mean, out, t, 1, N, 256, s);
    return e;
}
static void graph_body(void) {
    enum { N = 96, C = 64 };
    float *x = randn(N * C, 80, 1.0f), *w = randn(C, 81, 1.0f), *W = randn(256 * C, 82, 0.2f);
    uint8_t t[N];
    for (int i = 0; i < N; i++) t[i] = (uint8_t)(i * 7);
    float *d_x = dput(x, N * C), *d_w = dput(w, C), *d_W = dput(W, 256 * C);
    uint8_t *d_t = dput8(t, N);
    float *y = dpoison(N * C), *r = dpoison(N), *h = dpoison(N * C), *out = dpoison(N * 256);
    float *loss[2] = {dpoison(N), dpoison(N)};
    double *mean = dalloc(sizeof(double));
    dm_cuda_stream s = NULL;
    CU(dm_cuda_stream_create(&s));
    /* the uploads and poisons above ran on the legacy stream, which a non-blocking stream
     * does not wait for: finish them before s reads those buffers */
    CU(dm_cuda_sync(NULL));
    CU(chain(s, y, r, h, out, mean, loss[0], d_x, d_w, d_W, d_t, N, C));
    CU(dm_cuda_sync(s));
    dm_cuda_graph *g = NULL;
    dm_cuda_timer *tm = NULL;
    CU(dm_cuda_capture_begin(s));
    CU(chain(s, y, r, h, out, mean, loss[1], d_x, d_w, d_W, d_t, N, C));
    CU(dm_cuda_capture_end(s, &g));
    CU(dm_cuda_timer_create(&tm));
    CHECK(g != NULL && tm != NULL);
    if (g && tm) {
        CU(dm_cuda_timer_start(tm, s));
        for (int i = 0; i < 3; i++) CU(dm_cuda_graph_launch(g, s));
        CU(dm_cuda_timer_stop(tm, s));
        float ms = -1.0f;
        CU(dm_cuda_timer_ms(tm, &ms));
        printf("  3 replays of a 4-op graph: %.3f ms\n", ms);
        CHECKF(ms > 0.0f, "the timer measured %g ms", ms);
        CU(dm_cuda_sync(s));
        CHECKF(same_bits(loss[0], loss[1], N), "a replayed graph's losses differ from the launches'");
    }
    dm_cuda_graph_free(g);
    dm_cuda_timer_free(tm);
    CU(dm_cuda_stream_destroy(s));
    free(x), free(w), free(W);
    dfree_all();
}

/* ---- the same bits when a launch repeats: the ops with reductions ---- */
static void repeat_body(void) {
    enum { N = 4096, C = 256, H = 4, D = 64 };
    float *x = randn((size_t)N * C, 50, 1.0f), *dy = randn((size_t)N * C, 51, 1.0f);
    float *w = randn(C, 52, 1.0f);
    float *d_x = dput(x, (size_t)N * C), *d_dy = dput(dy, (size_t)N * C), *d_w = dput(w, C);
    float *d_r = dpoison(N), *out[2], *dw[2], *dW[2];
    CU(dm_cuda_rmsnorm_fwd(dpoison((size_t)N * C), d_r, d_x, d_w, N, C, 1e-5f, NULL));
    for (int i = 0; i < 2; i++) { /* weight gradients of RMSNorm, the gate and a product */
        out[i] = dalloc((size_t)N * C * sizeof(float));
        dw[i] = dalloc((C + H) * sizeof(float)); /* RMSNorm's dw [C]; the gate's dA_log [H] */
        dW[i] = dalloc((size_t)C * C * sizeof(float));
        CU(dm_cuda_zero(out[i], (size_t)N * C * sizeof(float), NULL));
        CU(dm_cuda_zero(dw[i], (C + H) * sizeof(float), NULL));
        CU(dm_cuda_zero(dW[i], (size_t)C * C * sizeof(float), NULL));
        CU(dm_cuda_rmsnorm_bwd(out[i], dw[i], d_dy, d_x, d_w, d_r, N, C, NULL));
        CU(dm_cuda_gate_bwd(out[i], dw[i], dw[i] + H, d_dy, d_x, d_w, d_w, N, H, D, 0.0f, NULL));
        CU(dm_cuda_matmul_bwd_weight(blas(), 0, dW[i], NULL, d_dy, d_dy, d_x, N, C, C, NULL));
        CU(dm_cuda_matmul_bwd_weight(blas(), 1, dW[i], NULL, operand(d_dy, (size_t)N * C, 1),
                                     d_dy, operand(d_x, (size_t)N * C, 1), N, C, C, NULL));
    }
    CHECKF(same_bits(out[0], out[1], (size_t)N * C), "input gradients differ between runs");
    CHECKF(same_bits(dw[0], dw[1], C + H), "RMSNorm/gate parameter gradients differ between runs");
    CHECKF(same_bits(dW[0], dW[1], (size_t)C * C), "weight gradients differ between runs");
    /* the delta core's backward twice */
    dm_delta_dims d = {.B = 1, .T = 64, .H = 2, .dk = 64, .dv = 64, .scale = 0.125f};
    size_t nk = (size_t)d.T * d.H * 64, ns = (size_t)d.T * d.H;
    float *gd = t_alloc(nk), *bd = t_alloc(ns);
    t_fill_uniform(gd, nk, 53, -0.5f, -0.01f);
    t_fill_uniform(bd, ns, 54, 0.1f, 1.0f);
    float *d_g = dput(gd, nk), *d_bt = dput(bd, ns), *dq[2];
    /* unit keys (the recurrence is stable for |k| = 1, beta in (0, 1]) */
    float *d_k = dpoison(nk), *d_rn = dpoison(nk / 64);
    CU(dm_cuda_l2norm_fwd(d_k, d_rn, d_x + nk, (int)(nk / 64), 64, 1e-6f, NULL));
    for (int i = 0; i < 2; i++) {
        float *tmp = dalloc(nk * 4 * sizeof(float) + ns * sizeof(float));
        dq[i] = tmp;
        CU(dm_cuda_delta_serial_bwd(&d, d_x, d_k, d_x + 2 * nk, d_g, d_bt, NULL, d_dy, NULL,
                                    tmp, tmp + nk, tmp + 2 * nk, tmp + 3 * nk, tmp + 4 * nk, NULL,
                                    dpoison(dm_cuda_delta_serial_bwd_work(&d)), NULL));
    }
    float *hq = dget(dq[0], nk * 4 + ns);
    CHECKF(t_all_finite(hq, nk * 4 + ns), "the delta core's gradients are not finite");
    free(hq);
    CHECKF(same_bits(dq[0], dq[1], nk * 4 + ns), "the delta core's gradients differ between runs");
    free(x), free(dy), free(w), free(gd), free(bd);
    dfree_all();
}
#endif /* DM_HAVE_CUDA || DM_CUDA_EMU */

TEST(cuda_memory_roundtrip) { GPU_CASE(memory_body); }
TEST(cuda_bf16_rounding_matches_cpu) { GPU_CASE(bf16_body); }
TEST(cuda_activations) { GPU_CASE(act_body); }
TEST(cuda_embed) { GPU_CASE(embed_body); }
TEST(cuda_rmsnorm) { GPU_CASE(rmsnorm_body); }
TEST(cuda_gatednorm) { GPU_CASE(gatednorm_body); }
TEST(cuda_l2norm) { GPU_CASE(l2norm_body); }
TEST(cuda_conv) { GPU_CASE(conv_body); }
TEST(cuda_gate) { GPU_CASE(gate_body); }
TEST(cuda_xent) { GPU_CASE(xent_body); }
TEST(cuda_matmul_fp32) { GPU_CASE(matmul_fp32_body); }
TEST(cuda_matmul_bf16) { GPU_CASE(matmul_bf16_body); }
TEST(cuda_gemm_batched) { GPU_CASE(batched_body); }
TEST(cuda_newton_schulz) { GPU_CASE(ns_body); }
TEST(cuda_newton_schulz_bf16) { GPU_CASE(ns_bf16_body); }
TEST(cuda_retract_sphere) { GPU_CASE(sphere_body); }
TEST(cuda_retract_stiefel) { GPU_CASE(stiefel_body); }
TEST(cuda_delta_kda) { GPU_CASE(delta_kda_body); }
TEST(cuda_delta_gdn) { GPU_CASE(delta_gdn_body); }
TEST(cuda_delta_shapes) { GPU_CASE(delta_shapes_body); }
TEST(cuda_delta_tc_kda) { GPU_CASE(delta_tc_kda_body); }
TEST(cuda_delta_tc_gdn) { GPU_CASE(delta_tc_gdn_body); }
TEST(cuda_delta_tc_shapes) { GPU_CASE(delta_tc_shapes_body); }
TEST(cuda_optim_adamw_muon_sumsq) { GPU_CASE(optim_body); }
TEST(cuda_graph_replay) { GPU_CASE(graph_body); }
TEST(cuda_repeat_bitwise) { GPU_CASE(repeat_body); }
