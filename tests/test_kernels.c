/* test_kernels.c — the CPU kernels of src/kernels/kernels.h against the double oracle
 * (tests/support/oracle.c): forward vs oracle forward, backward vs central finite
 * differences of L = sum(dY * oracle_forward), accumulate/overwrite/in-place semantics,
 * and bitwise independence of the thread count. Each case prints its worst errors. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "ref/ref.h"
#include "oracle.h"

/* ---- the kernel sets under test: the CPU kernels (matmul over OpenBLAS), the CPU
 * kernels with matmul over oneDNN, and the reference kernels (src/ref). Every case
 * runs on each set that has the kernels it tests. ---- */
typedef struct {
    const char *name;
    int matmul_only; /* only the matmul differs from the CPU set */
    void (*embed_fwd)(float *, const uint8_t *, const float *, int, int);
    void (*embed_bwd)(float *, const float *, const uint8_t *, int, int);
    void (*rmsnorm_fwd)(float *, float *, const float *, const float *, int, int, float);
    void (*rmsnorm_bwd)(float *, float *, const float *, const float *, const float *,
                        const float *, int, int);
    void (*matmul_fwd)(float *, const float *, const float *, const float *, int, int, int);
    void (*matmul_bwd)(float *, float *, float *, const float *, const float *, const float *,
                       int, int, int, int);
    void (*silu_fwd)(float *, const float *, size_t);
    void (*silu_bwd)(float *, const float *, const float *, size_t);
    void (*sigmoid_fwd)(float *, const float *, size_t);
    void (*sigmoid_bwd)(float *, const float *, const float *, size_t);
    void (*swiglu_fwd)(float *, const float *, const float *, size_t);
    void (*swiglu_bwd)(float *, float *, const float *, const float *, const float *, size_t);
    void (*add_inplace)(float *, const float *, size_t);
    void (*conv_fwd)(float *, const float *, const float *, int, int, int, int);
    void (*conv_bwd)(float *, float *, const float *, const float *, const float *, int, int,
                     int, int);
    void (*l2norm_fwd)(float *, float *, const float *, int, int, float);
    void (*l2norm_bwd)(float *, const float *, const float *, const float *, int, int);
    void (*gate_fwd)(float *, const float *, const float *, const float *, int, int, int, float);
    void (*gate_bwd)(float *, float *, float *, const float *, const float *, const float *,
                     const float *, int, int, int, float);
    void (*gatednorm_fwd)(float *, float *, const float *, const float *, const float *, int,
                          int, float, int);
    void (*gatednorm_bwd)(float *, float *, float *, const float *, const float *, const float *,
                          const float *, const float *, int, int, int);
    double (*xent_fwd)(float *, const float *, const uint8_t *, int, int);
    void (*xent_bwd)(float *, const float *, const uint8_t *, int, int, float);
} kset;

/* the composed norm references take scratch: 2 * rows * cols floats, grown here */
static float *ref_scratch(size_t n) {
    static float *buf;
    static size_t cap;
    if (n > cap) {
        free(buf);
        buf = t_alloc(n);
        cap = n;
    }
    return buf;
}
static void rms_ref_fwd(float *y, float *r, const float *x, const float *w, int N, int C, float eps) {
    dm_rmsnorm_ref_fwd(y, r, x, w, N, C, eps, ref_scratch(2 * (size_t)N * C));
}
static void rms_ref_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *r, int N, int C) {
    dm_rmsnorm_ref_bwd(dx, dw, dy, x, w, r, N, C, ref_scratch(2 * (size_t)N * C));
}
static void gn_ref_fwd(float *y, float *r, const float *o, const float *z, const float *w, int R,
                       int D, float eps, int act) {
    dm_gatednorm_ref_fwd(y, r, o, z, w, R, D, eps, act, ref_scratch(2 * (size_t)R * D));
}
static void gn_ref_bwd(float *dO, float *dz, float *dw, const float *dy, const float *o,
                       const float *z, const float *w, const float *r, int R, int D, int act) {
    dm_gatednorm_ref_bwd(dO, dz, dw, dy, o, z, w, r, R, D, act, ref_scratch(2 * (size_t)R * D));
}

/* matmul over OpenBLAS (dm_gemm), oneDNN, and the reference */
static void mm_obl_fwd(float *y, const float *in, const float *W, const float *b, int N, int K_,
                       int O) {
    dm_matmul_fwd(NULL, y, in, W, b, N, K_, O);
}
static void mm_obl_bwd(float *din, float *dW, float *db, const float *dy, const float *in,
                       const float *W, int N, int K_, int O, int acc) {
    dm_matmul_bwd(NULL, din, dW, db, dy, in, W, N, K_, O, acc);
}
static dm_onednn *onednn(void) {
    static dm_onednn *d;
    const char *why = NULL;
    if (!d) d = dm_onednn_create(&why);
    if (!d) {
        fprintf(stderr, "oneDNN cannot start: %s\n", why);
        abort();
    }
    return d;
}
/* oneDNN over every product it takes; one it declines (dm_onednn_supports) is said and
 * computed by OpenBLAS instead, as the op layer would */
static dm_gemm_be dnn_be(int ta, int tb, int M, int N, int K_, int lda, int ldb, float beta) {
    const char *why = dm_onednn_supports(onednn(), ta, tb, M, N, K_, lda, ldb, N, 1.0f, beta);
    if (why && M > 0 && N > 0 && K_ > 0)
        printf("  oneDNN declines %c%c %dx%dx%d (%s): OpenBLAS computes it\n", ta ? 'T' : 'N',
               tb ? 'T' : 'N', M, N, K_, why);
    return why ? (dm_gemm_be){dm_gemm_openblas, NULL} : (dm_gemm_be){dm_onednn_gemm, onednn()};
}
static void mm_dnn_fwd(float *y, const float *in, const float *W, const float *b, int N, int K_,
                       int O) {
    dm_gemm_be be = dnn_be(0, 1, N, O, K_, K_, K_, 0.0f);
    dm_matmul_fwd(&be, y, in, W, b, N, K_, O);
}
static void mm_dnn_bwd(float *din, float *dW, float *db, const float *dy, const float *in,
                       const float *W, int N, int K_, int O, int acc) {
    dm_gemm_be bd = dnn_be(0, 0, N, K_, O, O, K_, acc ? 1.0f : 0.0f);
    dm_gemm_be bw = dnn_be(1, 0, O, K_, N, O, K_, 1.0f);
    if (din) dm_matmul_bwd_data(&bd, din, dy, W, N, K_, O, acc);
    dm_matmul_bwd_weight(&bw, dW, db, dy, in, N, K_, O);
}
static void mm_ref_bwd(float *din, float *dW, float *db, const float *dy, const float *in,
                       const float *W, int N, int K_, int O, int acc) {
    if (din) dm_matmul_ref_bwd_data(din, dy, W, N, K_, O, acc);
    dm_matmul_ref_bwd_weight(dW, db, dy, in, N, K_, O);
}

#define CPU_KERNELS                                                                    \
    dm_embed_fwd, dm_embed_bwd, dm_rmsnorm_fwd, dm_rmsnorm_bwd
#define CPU_REST                                                                       \
    dm_silu_fwd, dm_silu_bwd, dm_sigmoid_fwd, dm_sigmoid_bwd, dm_swiglu_fwd, dm_swiglu_bwd,  \
        dm_add_inplace, dm_conv_fwd, dm_conv_bwd, dm_l2norm_fwd, dm_l2norm_bwd, dm_gate_fwd, \
        dm_gate_bwd, dm_gatednorm_fwd, dm_gatednorm_bwd, dm_xent_fwd, dm_xent_bwd
static const kset KS[] = {
    {"cpu (matmul: OpenBLAS)", 0, CPU_KERNELS, mm_obl_fwd, mm_obl_bwd, CPU_REST},
    {"cpu (matmul: oneDNN)", 1, CPU_KERNELS, mm_dnn_fwd, mm_dnn_bwd, CPU_REST},
    {"reference", 0, dm_embed_ref_fwd, dm_embed_ref_bwd, rms_ref_fwd, rms_ref_bwd,
     dm_matmul_ref_fwd, mm_ref_bwd, dm_silu_ref_fwd, dm_silu_ref_bwd, dm_sigmoid_ref_fwd,
     dm_sigmoid_ref_bwd, dm_swiglu_ref_fwd, dm_swiglu_ref_bwd, dm_add_inplace, dm_conv_ref_fwd,
     dm_conv_ref_bwd, dm_l2norm_ref_fwd, dm_l2norm_ref_bwd, dm_gate_ref_fwd, dm_gate_ref_bwd,
     gn_ref_fwd, gn_ref_bwd, dm_xent_ref_fwd, dm_xent_ref_bwd},
};
static const kset *K; /* the set the running case uses */

/* Run a case on the CPU and the reference kernel sets. */
static void on_each(void (*body)(void), int matmul) {
    (void)matmul;
    for (size_t i = 0; i < sizeof KS / sizeof KS[0]; i++) {
        if (KS[i].matmul_only) continue;
        K = &KS[i];
        printf(" [%s]\n", K->name);
        body();
    }
}

/* Run a case that multiplies matrices on the oneDNN set: its own CTest case, skipped
 * (with the reason) on a CPU where oneDNN has no fast matmul at all. */
static void on_onednn(void (*body)(void)) {
    const char *why = dm_onednn_supports(onednn(), 0, 1, 64, 64, 64, 64, 64, 64, 1.0f, 0.0f);
    if (why) {
        t_skip("oneDNN declines a 64x64x64 product on this CPU: %s", why);
        return;
    }
    K = &KS[1];
    printf(" [%s]\n", K->name);
    body();
}

#define FWD_TOL 1e-5  /* float forward vs double oracle, relative RMS */
#define GRAD_TOL 1e-4 /* float backward vs central differences, relative RMS */

/* ---- per-case allocations, freed together at the end of a case ---- */
static void *keep[512];
static int nkeep;
static void *keepp(void *p) {
    if (nkeep == 512) { fprintf(stderr, "too many allocations\n"); abort(); }
    return keep[nkeep++] = p;
}
static float *F(size_t n) { return keepp(t_alloc(n)); }
static double *Dd(size_t n) { return keepp(t_allocd(n)); }
static void free_all(void) {
    while (nkeep) free(keep[--nkeep]);
}
static float *normal(size_t n, uint64_t seed, float scale) {
    float *p = F(n);
    t_fill_normal(p, n, seed, scale);
    return p;
}
static double *dup(const float *a, size_t n) {
    double *d = Dd(n);
    t_to_double(d, a, n);
    return d;
}
static float *copyf(const float *a, size_t n) {
    float *p = F(n);
    memcpy(p, a, n * sizeof(float));
    return p;
}
/* a float buffer full of NaN: an input gradient must overwrite it */
static float *garbage(size_t n) {
    float *p = F(n);
    memset(p, 0xff, n * sizeof(float));
    return p;
}
static double dotd(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static double rmsd(const double *a, size_t n) { return n ? sqrt(dotd(a, a, n) / n) : 0; }
static double maxd(double a, double b) { return a > b ? a : b; }

/* relative RMS of (g - prior) against central differences of f with respect to every
 * element of x; prior (the gradient buffer's contents before an accumulating backward)
 * may be NULL. h is 1e-6 times the RMS of x. */
static double grad_err(t_lossfn f, void *ctx, double *x, size_t n, const float *g,
                       const float *prior) {
    double sc = rmsd(x, n), h = 1e-6 * (sc > 0 ? sc : 1.0), num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double fd = t_fd(f, ctx, x, i, h);
        double e = ((double)g[i] - (prior ? prior[i] : 0.0)) - fd;
        num += e * e;
        den += fd * fd;
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num / (n ? n : 1));
}

#define FWD_CHECK(what, err, worst)                                                  \
    do {                                                                             \
        double e_ = (err);                                                           \
        CHECKF(e_ <= FWD_TOL, "%s forward rel rms %.3g > %.0e", what, e_, FWD_TOL);  \
        worst = maxd(worst, e_);                                                     \
    } while (0)
#define GRAD_CHECK(what, err, worst)                                                 \
    do {                                                                             \
        double e_ = (err);                                                           \
        CHECKF(e_ <= GRAD_TOL, "%s grad rel rms %.3g > %.0e", what, e_, GRAD_TOL);   \
        worst = maxd(worst, e_);                                                     \
    } while (0)

/* ======================= embedding ======================= */
typedef struct { int N, C; const uint8_t *tok; double *table, *dy, *y; } emb_ctx;
static double emb_loss(void *p) {
    emb_ctx *c = p;
    o_embed(c->y, c->tok, c->table, c->N, c->C);
    return dotd(c->dy, c->y, (size_t)c->N * c->C);
}
static uint8_t *tokens(int N, uint64_t seed) {
    uint8_t *t = keepp(malloc(N ? N : 1));
    float *u = F(N);
    t_fill_uniform(u, N, seed, 0, 1);
    /* half the tokens from a tiny range so that repeats are certain; also 0 and 255 */
    for (int n = 0; n < N; n++) t[n] = n % 2 ? (uint8_t)(u[n] * 4) : (uint8_t)(u[n] * 255.99f);
    if (N > 2) { t[0] = 255; t[N - 1] = 0; }
    return t;
}

static void kernel_embed_fwd_body(void);
TEST(kernel_embed_fwd) { on_each(kernel_embed_fwd_body, 0); }
static void kernel_embed_fwd_body(void) {
    static const int S[][2] = {{1, 5}, {37, 17}, {64, 64}};
    double wf = 0;
    for (int s = 0; s < 3; s++) {
        int N = S[s][0], C = S[s][1];
        uint8_t *tok = tokens(N, 11 + s);
        float *table = normal(256 * C, 1 + s, 0.5f), *y = garbage((size_t)N * C);
        double *yo = Dd((size_t)N * C);
        K->embed_fwd(y, tok, table, N, C);
        o_embed(yo, tok, dup(table, 256 * C), N, C);
        FWD_CHECK("embed", t_rel_rms(y, yo, (size_t)N * C), wf);
        free_all();
    }
    printf("  embed: worst fwd rel rms %.3g\n", wf);
}

static void kernel_embed_grad_body(void);
TEST(kernel_embed_grad) { on_each(kernel_embed_grad_body, 0); }
static void kernel_embed_grad_body(void) {
    static const int S[][2] = {{1, 5}, {3, 17}, {37, 8}};
    double wg = 0;
    for (int s = 0; s < 3; s++) {
        int N = S[s][0], C = S[s][1];
        size_t nt = 256 * (size_t)C;
        uint8_t *tok = tokens(N, 21 + s);
        float *table = normal(nt, 2 + s, 0.5f), *dy = normal((size_t)N * C, 3 + s, 1.0f);
        float *prior = normal(nt, 4 + s, 1.0f), *dt = copyf(prior, nt);
        K->embed_bwd(dt, dy, tok, N, C);
        emb_ctx c = {N, C, tok, dup(table, nt), dup(dy, (size_t)N * C), Dd((size_t)N * C)};
        GRAD_CHECK("embed dtable", grad_err(emb_loss, &c, c.table, nt, dt, prior), wg);
        free_all();
    }
    printf("  embed: worst grad rel rms %.3g\n", wg);
}

/* ======================= RMSNorm ======================= */
typedef struct { int N, C; double eps, *x, *w, *dy, *y; } rms_ctx;
static double rms_loss(void *p) {
    rms_ctx *c = p;
    o_rmsnorm(c->y, c->x, c->w, c->N, c->C, c->eps);
    return dotd(c->dy, c->y, (size_t)c->N * c->C);
}
static float *norm_weight(int C, uint64_t seed) {
    float *w = normal(C, seed, 0.3f);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
    return w;
}

static void kernel_rmsnorm_fwd_body(void);
TEST(kernel_rmsnorm_fwd) { on_each(kernel_rmsnorm_fwd_body, 0); }
static void kernel_rmsnorm_fwd_body(void) {
    static const int S[][2] = {{1, 5}, {3, 17}, {37, 64}, {9, 256}};
    double wf = 0;
    for (int s = 0; s < 4; s++) {
        int N = S[s][0], C = S[s][1];
        size_t n = (size_t)N * C;
        float *x = normal(n, 31 + s, 2.0f), *w = norm_weight(C, 32 + s);
        for (int c = 0; c < C; c++) x[c] *= 1e-3f; /* a small row: eps matters there */
        float *y = garbage(n), *rstd = garbage(N);
        double *yo = Dd(n);
        K->rmsnorm_fwd(y, rstd, x, w, N, C, 1e-6f);
        o_rmsnorm(yo, dup(x, n), dup(w, C), N, C, 1e-6);
        FWD_CHECK("rmsnorm", t_rel_rms(y, yo, n), wf);
        free_all();
    }
    printf("  rmsnorm: worst fwd rel rms %.3g\n", wf);
}

static void kernel_rmsnorm_grad_body(void);
TEST(kernel_rmsnorm_grad) { on_each(kernel_rmsnorm_grad_body, 0); }
static void kernel_rmsnorm_grad_body(void) {
    /* includes C beyond the 1024 columns of the CPU kernel's per-chunk partial sums */
    static const int S[][2] = {{1, 5}, {3, 17}, {37, 64}, {2, 256}, {2, 1100}};
    double wg = 0;
    for (int s = 0; s < 5; s++) {
        int N = S[s][0], C = S[s][1];
        size_t n = (size_t)N * C;
        float *x = normal(n, 41 + s, 1.5f), *w = norm_weight(C, 42 + s);
        float *dy = normal(n, 43 + s, 1.0f), *y = F(n), *rstd = F(N);
        K->rmsnorm_fwd(y, rstd, x, w, N, C, 1e-6f);
        float *px = normal(n, 44 + s, 1.0f), *pw = normal(C, 45 + s, 1.0f);
        float *dx = copyf(px, n), *dw = copyf(pw, C); /* both accumulate */
        K->rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, C);
        rms_ctx c = {N, C, 1e-6, dup(x, n), dup(w, C), dup(dy, n), Dd(n)};
        GRAD_CHECK("rmsnorm dx", grad_err(rms_loss, &c, c.x, n, dx, px), wg);
        GRAD_CHECK("rmsnorm dw", grad_err(rms_loss, &c, c.w, C, dw, pw), wg);
        free_all();
    }
    printf("  rmsnorm: worst grad rel rms %.3g\n", wg);
}

/* ======================= matmul ======================= */
typedef struct { int N, I, O; double *in, *W, *bias, *dy, *y; } mm_ctx;
static double mm_loss(void *p) {
    mm_ctx *c = p;
    o_matmul(c->y, c->in, c->W, c->bias, c->N, c->I, c->O);
    return dotd(c->dy, c->y, (size_t)c->N * c->O);
}
static const int MM_S[][3] = {{1, 1, 1}, {3, 5, 17}, {37, 17, 5}, {16, 64, 33}};

static void kernel_matmul_fwd_body(void);
TEST(kernel_matmul_fwd) { on_each(kernel_matmul_fwd_body, 1); }
TEST(kernel_matmul_fwd_onednn) { on_onednn(kernel_matmul_fwd_body); }
static void kernel_matmul_fwd_body(void) {
    double wf = 0;
    for (int s = 0; s < 4; s++)
        for (int hb = 0; hb < 2; hb++) {
            int N = MM_S[s][0], I = MM_S[s][1], O = MM_S[s][2];
            float *in = normal((size_t)N * I, 51 + s, 1.0f), *W = normal((size_t)O * I, 52 + s, 0.3f);
            float *b = hb ? normal(O, 53 + s, 1.0f) : NULL, *y = garbage((size_t)N * O);
            double *yo = Dd((size_t)N * O);
            K->matmul_fwd(y, in, W, b, N, I, O);
            o_matmul(yo, dup(in, (size_t)N * I), dup(W, (size_t)O * I), hb ? dup(b, O) : NULL, N, I, O);
            FWD_CHECK("matmul", t_rel_rms(y, yo, (size_t)N * O), wf);
            free_all();
        }
    printf("  matmul: worst fwd rel rms %.3g\n", wf);
}

static void kernel_matmul_grad_body(void);
TEST(kernel_matmul_grad) { on_each(kernel_matmul_grad_body, 1); }
TEST(kernel_matmul_grad_onednn) { on_onednn(kernel_matmul_grad_body); }
static void kernel_matmul_grad_body(void) {
    double wg = 0;
    for (int s = 0; s < 4; s++)
        for (int hb = 0; hb < 2; hb++) {
            int N = MM_S[s][0], I = MM_S[s][1], O = MM_S[s][2];
            size_t ni = (size_t)N * I, nw = (size_t)O * I, no = (size_t)N * O;
            float *in = normal(ni, 61 + s, 1.0f), *W = normal(nw, 62 + s, 0.3f);
            float *b = hb ? normal(O, 63 + s, 1.0f) : NULL, *dy = normal(no, 64 + s, 1.0f);
            float *pW = normal(nw, 65 + s, 1.0f), *pb = normal(O, 66 + s, 1.0f);
            float *din = garbage(ni), *dW = copyf(pW, nw), *db = hb ? copyf(pb, O) : NULL;
            K->matmul_bwd(din, dW, db, dy, in, W, N, I, O, 0);
            mm_ctx c = {N, I, O, dup(in, ni), dup(W, nw), hb ? dup(b, O) : NULL, dup(dy, no), Dd(no)};
            GRAD_CHECK("matmul din", grad_err(mm_loss, &c, c.in, ni, din, NULL), wg);
            GRAD_CHECK("matmul dW", grad_err(mm_loss, &c, c.W, nw, dW, pW), wg);
            if (hb) GRAD_CHECK("matmul dbias", grad_err(mm_loss, &c, c.bias, O, db, pb), wg);
            /* din_acc = 1 adds onto din */
            float *pin = normal(ni, 67 + s, 1.0f), *din2 = copyf(pin, ni);
            K->matmul_bwd(din2, dW, db, dy, in, W, N, I, O, 1);
            GRAD_CHECK("matmul din (acc)", grad_err(mm_loss, &c, c.in, ni, din2, pin), wg);
            free_all();
        }
    printf("  matmul: worst grad rel rms %.3g\n", wg);
}

/* ======================= activations ======================= */
static const size_t ACT_N[] = {1, 7, 37, 1000};
/* normal values plus saturating ones where a naive formula overflows */
static float *act_input(size_t n, uint64_t seed) {
    float *x = normal(n, seed, 3.0f);
    static const float big[] = {30.0f, -30.0f, 100.0f, -100.0f, 0.0f, 17.0f, -17.0f};
    for (size_t i = 0; i < n && i < 7 && n > 7; i++) x[i * (n / 7)] = big[i];
    return x;
}
typedef struct { size_t n; int kind; double *x, *b, *dy, *y; } act_ctx; /* 0 silu 1 sig 2 swiglu(a) 3 swiglu(b) */
static double act_loss(void *p) {
    act_ctx *c = p;
    if (c->kind == 0) o_silu(c->y, c->x, c->n);
    else if (c->kind == 1) o_sigmoid(c->y, c->x, c->n);
    else o_swiglu(c->y, c->x, c->b, c->n);
    return dotd(c->dy, c->y, c->n);
}

static void kernel_act_fwd_body(void);
TEST(kernel_act_fwd) { on_each(kernel_act_fwd_body, 0); }
static void kernel_act_fwd_body(void) {
    double ws = 0, wg = 0, wsw = 0;
    for (int s = 0; s < 4; s++) {
        size_t n = ACT_N[s];
        float *x = act_input(n, 71 + s), *b = normal(n, 72 + s, 1.0f), *y = garbage(n);
        double *xd = dup(x, n), *yo = Dd(n);
        K->silu_fwd(y, x, n);
        o_silu(yo, xd, n);
        FWD_CHECK("silu", t_rel_rms(y, yo, n), ws);
        K->sigmoid_fwd(y, x, n);
        o_sigmoid(yo, xd, n);
        FWD_CHECK("sigmoid", t_rel_rms(y, yo, n), wg);
        K->swiglu_fwd(y, x, b, n);
        o_swiglu(yo, xd, dup(b, n), n);
        FWD_CHECK("swiglu", t_rel_rms(y, yo, n), wsw);
        CHECK(t_all_finite(y, n));
        free_all();
    }
    printf("  silu: worst fwd %.3g   sigmoid: %.3g   swiglu: %.3g\n", ws, wg, wsw);
}

static void kernel_act_grad_body(void);
TEST(kernel_act_grad) { on_each(kernel_act_grad_body, 0); }
static void kernel_act_grad_body(void) {
    double ws = 0, wg = 0, wsw = 0;
    for (int s = 0; s < 4; s++) {
        size_t n = ACT_N[s];
        float *x = act_input(n, 81 + s), *b = normal(n, 82 + s, 1.0f), *dy = normal(n, 83 + s, 1.0f);
        act_ctx c = {n, 0, dup(x, n), dup(b, n), dup(dy, n), Dd(n)};
        float *dx = garbage(n), *db = garbage(n), *y = F(n);
        K->silu_bwd(dx, dy, x, n);
        GRAD_CHECK("silu dx", grad_err(act_loss, &c, c.x, n, dx, NULL), ws);
        c.kind = 1;
        K->sigmoid_fwd(y, x, n);
        memset(dx, 0xff, n * sizeof(float));
        K->sigmoid_bwd(dx, dy, y, n);
        GRAD_CHECK("sigmoid dx", grad_err(act_loss, &c, c.x, n, dx, NULL), wg);
        memset(dx, 0xff, n * sizeof(float));
        K->swiglu_bwd(dx, db, dy, x, b, n);
        c.kind = 2;
        GRAD_CHECK("swiglu da", grad_err(act_loss, &c, c.x, n, dx, NULL), wsw);
        GRAD_CHECK("swiglu db", grad_err(act_loss, &c, c.b, n, db, NULL), wsw);
        free_all();
    }
    printf("  silu: worst grad %.3g   sigmoid: %.3g   swiglu: %.3g\n", ws, wg, wsw);
}

/* max over elements of |a - ref| / |ref|, skipping references below FLT_MIN (denormal
 * results carry absolute, not relative, precision) */
static double max_elem_rel(const float *a, const double *ref, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(ref[i]) < 1.17549435e-38) continue;
        double e = fabs((double)a[i] - ref[i]) / fabs(ref[i]);
        if (!(e <= m)) m = e; /* NaN wins */
    }
    return m;
}

/* Element by element over a dense sweep: the kernels use their own vectorizable exp (one
 * copy in each of act.c, gate.c, gatednorm.c, xent.c) and log1p (gate.c), whose worst case
 * a relative-RMS check would hide. sigmoid, silu, softplus (gate with A = 1, dt_bias = 0),
 * the gated norm's sigmoid and swish (D = 1 rows: y = rstd * act(z)) within 1e-6 relative
 * (~8 ulp); xent rows [0, z] (loss = softplus(z)) within 3e-7 of max(1, loss); NaN
 * propagates. */
static void kernel_exp_accuracy_body(void);
TEST(kernel_exp_accuracy) { on_each(kernel_exp_accuracy_body, 0); }
static void kernel_exp_accuracy_body(void) {
    size_t n = 400001;
    float *x = F(n), *y = F(n);
    double *xd = Dd(n), *yo = Dd(n);
    for (size_t i = 0; i < n; i++) x[i] = -100.0f + 200.0f * (float)i / (float)(n - 1);
    t_to_double(xd, x, n);
    K->sigmoid_fwd(y, x, n);
    o_sigmoid(yo, xd, n);
    double es = max_elem_rel(y, yo, n);
    K->silu_fwd(y, x, n);
    o_silu(yo, xd, n);
    /* below x = -87.3, sigmoid(x) < FLT_MIN is denormal while x*sigmoid(x) is still normal:
     * float cannot carry relative precision through that product; skip those */
    size_t i87 = 0;
    while (x[i87] < -87.34f) i87++;
    double eu = max_elem_rel(y + i87, yo + i87, n - i87);
    float A_log = 0.0f, dtb = 0.0f;
    K->gate_fwd(y, x, &A_log, &dtb, (int)n, 1, 1, 0.0f);
    double a0 = 0.0, b0 = 0.0;
    o_gate(yo, xd, &a0, &b0, (int)n, 1, 1, 0.0);
    double ep = max_elem_rel(y, yo, n);
    /* gated norm with one element per row: o = 1, w = 1 */
    float *ones = F(n), *rstd = F(n);
    double *onesd = Dd(n), eg[2];
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f, onesd[i] = 1.0;
    for (int act = 0; act < 2; act++) {
        K->gatednorm_fwd(y, rstd, ones, x, ones, (int)n, 1, 1e-6f, act);
        o_gatednorm(yo, onesd, xd, onesd, (int)n, 1, 1e-6, act);
        eg[act] = act ? max_elem_rel(y + i87, yo + i87, n - i87) : max_elem_rel(y, yo, n);
    }
    /* xent rows [0, z] with target 0 over z in [-100, 100] */
    size_t nx = 20001;
    float *lg = F(2 * nx), *ls = F(nx);
    uint8_t *t0 = keepp(calloc(nx, 1));
    double ex = 0;
    for (size_t i = 0; i < nx; i++) lg[2 * i] = 0.0f, lg[2 * i + 1] = x[i * 20];
    K->xent_fwd(ls, lg, t0, (int)nx, 2);
    for (size_t i = 0; i < nx; i++) {
        double z = lg[2 * i + 1], ref = z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
        double e = fabs(ls[i] - ref) / maxd(1.0, ref);
        if (!(e <= ex)) ex = e;
    }
    CHECKF(es <= 1e-6, "sigmoid max elementwise rel err %.3g", es);
    CHECKF(eu <= 1e-6, "silu max elementwise rel err %.3g", eu);
    CHECKF(ep <= 1e-6, "softplus max elementwise rel err %.3g", ep);
    CHECKF(eg[0] <= 1e-6, "gatednorm sigmoid gate max elementwise rel err %.3g", eg[0]);
    CHECKF(eg[1] <= 1e-6, "gatednorm swish gate max elementwise rel err %.3g", eg[1]);
    CHECKF(ex <= 3e-7, "xent rows [0, z]: max err %.3g of max(1, loss)", ex);
    printf("  max elementwise rel err over [-100, 100]: sigmoid %.3g  silu %.3g  softplus %.3g\n"
           "  gatednorm sigmoid %.3g  swish %.3g;  xent [0, z] rows %.3g\n",
           es, eu, ep, eg[0], eg[1], ex);
    /* NaN in, NaN out (NaN-loss detection depends on it) */
    float v[4] = {1.0f, NAN, -3.0f, 2.0f}, o[4];
    K->sigmoid_fwd(o, v, 4);
    CHECKF(isnan(o[1]) && !isnan(o[0]), "sigmoid does not propagate NaN");
    K->silu_fwd(o, v, 4);
    CHECKF(isnan(o[1]) && !isnan(o[0]), "silu does not propagate NaN");
    uint8_t t2[1] = {0};
    CHECKF(isnan(K->xent_fwd(NULL, v, t2, 1, 4)), "xent does not return NaN for a NaN logit");
    free_all();
}

static void kernel_add_inplace_body(void);
TEST(kernel_add_inplace) { on_each(kernel_add_inplace_body, 0); }
static void kernel_add_inplace_body(void) {
    size_t n = 37;
    float *y = normal(n, 91, 1.0f), *x = normal(n, 92, 1.0f), *y0 = copyf(y, n);
    K->add_inplace(y, x, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= y[i] == y0[i] + x[i];
    CHECKF(ok, "dm_add_inplace is not y += x");
    free_all();
}

/* ======================= conv ======================= */
typedef struct { int B, T, C, W; double *x, *w, *dy, *y; } conv_ctx;
static double conv_loss(void *p) {
    conv_ctx *c = p;
    o_conv(c->y, c->x, c->w, c->B, c->T, c->C, c->W);
    return dotd(c->dy, c->y, (size_t)c->B * c->T * c->C);
}
/* B, T, C, W: includes W = 1, T < W, T = 1, and C * W beyond the transposed weights the
 * CPU kernel keeps on its stack (8192 floats: it reads w in place there) */
static const int CONV_S[][4] = {{1, 1, 5, 1}, {2, 3, 5, 4}, {2, 37, 17, 3}, {1, 9, 64, 4},
                                {3, 2, 3, 3}, {1, 1, 4, 4}, {2, 20, 19, 9}, {1, 3, 1650, 5}};
#define N_CONV_S ((int)(sizeof CONV_S / sizeof CONV_S[0]))

static void kernel_conv_fwd_body(void);
TEST(kernel_conv_fwd) { on_each(kernel_conv_fwd_body, 0); }
static void kernel_conv_fwd_body(void) {
    double wf = 0;
    for (int s = 0; s < N_CONV_S; s++) {
        int B = CONV_S[s][0], T = CONV_S[s][1], C = CONV_S[s][2], W = CONV_S[s][3];
        size_t n = (size_t)B * T * C;
        float *x = normal(n, 101 + s, 1.0f), *w = normal((size_t)C * W, 102 + s, 0.5f), *y = garbage(n);
        double *yo = Dd(n);
        K->conv_fwd(y, x, w, B, T, C, W);
        o_conv(yo, dup(x, n), dup(w, (size_t)C * W), B, T, C, W);
        FWD_CHECK("conv", t_rel_rms(y, yo, n), wf);
        free_all();
    }
    printf("  conv: worst fwd rel rms %.3g\n", wf);
}

static void kernel_conv_grad_body(void);
TEST(kernel_conv_grad) { on_each(kernel_conv_grad_body, 0); }
static void kernel_conv_grad_body(void) {
    double wg = 0;
    for (int s = 0; s < N_CONV_S; s++) {
        int B = CONV_S[s][0], T = CONV_S[s][1], C = CONV_S[s][2], W = CONV_S[s][3];
        size_t n = (size_t)B * T * C, nw = (size_t)C * W;
        float *x = normal(n, 111 + s, 1.0f), *w = normal(nw, 112 + s, 0.5f), *dy = normal(n, 113 + s, 1.0f);
        float *pw = normal(nw, 114 + s, 1.0f), *dx = garbage(n), *dw = copyf(pw, nw);
        K->conv_bwd(dx, dw, dy, x, w, B, T, C, W);
        conv_ctx c = {B, T, C, W, dup(x, n), dup(w, nw), dup(dy, n), Dd(n)};
        GRAD_CHECK("conv dx", grad_err(conv_loss, &c, c.x, n, dx, NULL), wg);
        GRAD_CHECK("conv dw", grad_err(conv_loss, &c, c.w, nw, dw, pw), wg);
        free_all();
    }
    printf("  conv: worst grad rel rms %.3g\n", wg);
}

/* ======================= l2norm ======================= */
typedef struct { int R, D; double eps, *x, *dy, *y; } l2_ctx;
static double l2_loss(void *p) {
    l2_ctx *c = p;
    o_l2norm(c->y, c->x, c->R, c->D, c->eps);
    return dotd(c->dy, c->y, (size_t)c->R * c->D);
}
static const int L2_S[][2] = {{1, 1}, {3, 17}, {37, 64}, {5, 8}, {4, 128}};
/* Row 0 is scaled down so that sum x^2 is comparable to eps (that is where eps matters).
 * This also makes the D = 1 case meaningful: for one element with x^2 >> eps the output is
 * sign(x) and the exact gradient is rn * eps / (x^2 + eps), a cancellation (1 - y^2) far
 * below float resolution of the terms it is computed from; near sqrt(eps) it is O(rn). */
static float *l2_input(int R, int D, uint64_t seed) {
    float *x = normal((size_t)R * D, seed, 1.0f);
    for (int d = 0; d < D; d++) x[d] *= 3e-4f;
    return x;
}

static void kernel_l2norm_fwd_body(void);
TEST(kernel_l2norm_fwd) { on_each(kernel_l2norm_fwd_body, 0); }
static void kernel_l2norm_fwd_body(void) {
    double wf = 0;
    for (int s = 0; s < 5; s++) {
        int R = L2_S[s][0], D = L2_S[s][1];
        size_t n = (size_t)R * D;
        float *x = l2_input(R, D, 121 + s), *y = garbage(n), *rn = garbage(R);
        double *yo = Dd(n);
        K->l2norm_fwd(y, rn, x, R, D, 1e-6f);
        o_l2norm(yo, dup(x, n), R, D, 1e-6);
        FWD_CHECK("l2norm", t_rel_rms(y, yo, n), wf);
        free_all();
    }
    printf("  l2norm: worst fwd rel rms %.3g\n", wf);
}

static void kernel_l2norm_grad_body(void);
TEST(kernel_l2norm_grad) { on_each(kernel_l2norm_grad_body, 0); }
static void kernel_l2norm_grad_body(void) {
    double wg = 0;
    for (int s = 0; s < 5; s++) {
        int R = L2_S[s][0], D = L2_S[s][1];
        size_t n = (size_t)R * D;
        float *x = l2_input(R, D, 131 + s), *dy = normal(n, 132 + s, 1.0f);
        float *y = F(n), *rn = F(R), *dx = garbage(n);
        K->l2norm_fwd(y, rn, x, R, D, 1e-6f);
        K->l2norm_bwd(dx, dy, y, rn, R, D);
        l2_ctx c = {R, D, 1e-6, dup(x, n), dup(dy, n), Dd(n)};
        GRAD_CHECK("l2norm dx", grad_err(l2_loss, &c, c.x, n, dx, NULL), wg);
        free_all();
    }
    printf("  l2norm: worst grad rel rms %.3g\n", wg);
}

/* ======================= gate ======================= */
typedef struct { int N, H, Cg; double lb, *f, *A_log, *dt_bias, *dy, *y; } gate_ctx;
static double gate_loss(void *p) {
    gate_ctx *c = p;
    o_gate(c->y, c->f, c->A_log, c->dt_bias, c->N, c->H, c->Cg, c->lb);
    return dotd(c->dy, c->y, (size_t)c->N * c->H * c->Cg);
}
static const int GATE_S[][3] = {{1, 1, 1}, {37, 3, 1}, {5, 2, 8}, {3, 4, 17}, {2, 2, 64}};
/* init-like parameters: A_log = ln U(1,16), dt_bias = ln dt (about softplus^-1 of small dt);
 * f spread wide, with entries past the softplus cutoff (u > 20) and past where a naive
 * log(1 + e^u) overflows a float (u > 88.7), and very negative ones */
static void gate_inputs(int N, int H, int Cg, uint64_t seed, float **f, float **A_log, float **dtb) {
    size_t n = (size_t)N * H * Cg;
    *f = normal(n, seed, 3.0f);
    for (size_t i = 0; i < n; i += 7) (*f)[i] += 25.0f;
    for (size_t i = 3; i < n; i += 11) (*f)[i] = 100.0f;
    for (size_t i = 5; i < n; i += 13) (*f)[i] = -60.0f;
    *A_log = F(H);
    t_fill_uniform(*A_log, H, seed + 1, 1.0f, 16.0f);
    for (int h = 0; h < H; h++) (*A_log)[h] = logf((*A_log)[h]);
    *dtb = F((size_t)H * Cg);
    t_fill_uniform(*dtb, (size_t)H * Cg, seed + 2, -7.0f, -2.0f);
}

static void kernel_gate_fwd_body(void);
TEST(kernel_gate_fwd) { on_each(kernel_gate_fwd_body, 0); }
static void kernel_gate_fwd_body(void) {
    double wf = 0;
    for (int s = 0; s < 5; s++)
        for (int k = 0; k < 2; k++) {
            int N = GATE_S[s][0], H = GATE_S[s][1], Cg = GATE_S[s][2];
            float lb = k ? -5.0f : 0.0f, *f, *A, *dtb;
            size_t n = (size_t)N * H * Cg;
            gate_inputs(N, H, Cg, 141 + s, &f, &A, &dtb);
            float *g = garbage(n);
            double *go = Dd(n);
            K->gate_fwd(g, f, A, dtb, N, H, Cg, lb);
            o_gate(go, dup(f, n), dup(A, H), dup(dtb, (size_t)H * Cg), N, H, Cg, lb);
            FWD_CHECK(k ? "gate lb=-5" : "gate lb=0", t_rel_rms(g, go, n), wf);
            free_all();
        }
    printf("  gate: worst fwd rel rms %.3g\n", wf);
}

static void kernel_gate_grad_body(void);
TEST(kernel_gate_grad) { on_each(kernel_gate_grad_body, 0); }
static void kernel_gate_grad_body(void) {
    double wg = 0;
    for (int s = 0; s < 5; s++)
        for (int k = 0; k < 2; k++) {
            int N = GATE_S[s][0], H = GATE_S[s][1], Cg = GATE_S[s][2];
            float lb = k ? -5.0f : 0.0f, *f, *A, *dtb;
            size_t n = (size_t)N * H * Cg, nd = (size_t)H * Cg;
            gate_inputs(N, H, Cg, 151 + s, &f, &A, &dtb);
            float *dy = normal(n, 152 + s, 1.0f), *df = garbage(n);
            float *pA = normal(H, 153 + s, 1.0f), *pd = normal(nd, 154 + s, 1.0f);
            float *dA = copyf(pA, H), *dd = copyf(pd, nd);
            K->gate_bwd(df, dA, dd, dy, f, A, dtb, N, H, Cg, lb);
            gate_ctx c = {N, H, Cg, lb, dup(f, n), dup(A, H), dup(dtb, nd), dup(dy, n), Dd(n)};
            GRAD_CHECK("gate df", grad_err(gate_loss, &c, c.f, n, df, NULL), wg);
            GRAD_CHECK("gate dA_log", grad_err(gate_loss, &c, c.A_log, H, dA, pA), wg);
            GRAD_CHECK("gate ddt_bias", grad_err(gate_loss, &c, c.dt_bias, nd, dd, pd), wg);
            free_all();
        }
    printf("  gate: worst grad rel rms %.3g\n", wg);
}

/* ======================= gated RMSNorm ======================= */
typedef struct { int R, D, act; double eps, *o, *z, *w, *dy, *y; } gn_ctx;
static double gn_loss(void *p) {
    gn_ctx *c = p;
    o_gatednorm(c->y, c->o, c->z, c->w, c->R, c->D, c->eps, c->act);
    return dotd(c->dy, c->y, (size_t)c->R * c->D);
}
/* R, D: includes D beyond the 256 columns of the CPU kernel's per-chunk partial sums */
static const int GN_S[][2] = {{1, 1}, {3, 17}, {37, 64}, {8, 5}, {2, 128}, {2, 300}};
#define N_GN_S ((int)(sizeof GN_S / sizeof GN_S[0]))

static void kernel_gatednorm_fwd_body(void);
TEST(kernel_gatednorm_fwd) { on_each(kernel_gatednorm_fwd_body, 0); }
static void kernel_gatednorm_fwd_body(void) {
    double wf = 0;
    for (int s = 0; s < N_GN_S; s++)
        for (int act = 0; act < 2; act++) {
            int R = GN_S[s][0], D = GN_S[s][1];
            size_t n = (size_t)R * D;
            float *o = normal(n, 161 + s, 0.7f), *z = normal(n, 162 + s, 3.0f), *w = norm_weight(D, 163 + s);
            float *y = garbage(n), *rstd = garbage(R);
            double *yo = Dd(n);
            K->gatednorm_fwd(y, rstd, o, z, w, R, D, 1e-6f, act ? DM_GATE_SWISH : DM_GATE_SIGMOID);
            o_gatednorm(yo, dup(o, n), dup(z, n), dup(w, D), R, D, 1e-6, act);
            FWD_CHECK(act ? "gatednorm swish" : "gatednorm sigmoid", t_rel_rms(y, yo, n), wf);
            free_all();
        }
    printf("  gatednorm: worst fwd rel rms %.3g\n", wf);
}

static void kernel_gatednorm_grad_body(void);
TEST(kernel_gatednorm_grad) { on_each(kernel_gatednorm_grad_body, 0); }
static void kernel_gatednorm_grad_body(void) {
    double wg = 0;
    for (int s = 0; s < N_GN_S; s++)
        for (int act = 0; act < 2; act++) {
            int R = GN_S[s][0], D = GN_S[s][1], a = act ? DM_GATE_SWISH : DM_GATE_SIGMOID;
            size_t n = (size_t)R * D;
            float *o = normal(n, 171 + s, 0.7f), *z = normal(n, 172 + s, 3.0f), *w = norm_weight(D, 173 + s);
            float *dy = normal(n, 174 + s, 1.0f), *y = F(n), *rstd = F(R);
            /* row 0 near sqrt(eps): eps matters there, and it keeps D = 1 well conditioned
             * (for D = 1 and o^2 >> eps, do is ~eps/o^2, below float resolution; see l2_input) */
            for (int d = 0; d < D; d++) o[d] *= 1e-3f;
            K->gatednorm_fwd(y, rstd, o, z, w, R, D, 1e-6f, a);
            float *pw = normal(D, 175 + s, 1.0f), *dw = copyf(pw, D), *dO = garbage(n), *dz = garbage(n);
            K->gatednorm_bwd(dO, dz, dw, dy, o, z, w, rstd, R, D, a);
            gn_ctx c = {R, D, act, 1e-6, dup(o, n), dup(z, n), dup(w, D), dup(dy, n), Dd(n)};
            GRAD_CHECK("gatednorm do", grad_err(gn_loss, &c, c.o, n, dO, NULL), wg);
            GRAD_CHECK("gatednorm dz", grad_err(gn_loss, &c, c.z, n, dz, NULL), wg);
            GRAD_CHECK("gatednorm dw", grad_err(gn_loss, &c, c.w, D, dw, pw), wg);
            free_all();
        }
    printf("  gatednorm: worst grad rel rms %.3g\n", wg);
}

/* ======================= cross-entropy ======================= */
typedef struct { int N, V; double scale; const uint8_t *t; double *x; } xent_ctx;
static double xent_loss(void *p) {
    xent_ctx *c = p; /* dlogits = d(mean)/dlogits * N * scale: the kernel's scale multiplies sum */
    return c->scale * c->N * o_xent(c->x, c->t, c->N, c->V);
}
static const int XENT_S[][2] = {{1, 1}, {3, 5}, {4, 17}, {37, 256}};
/* logits with large-logit rows (100: a naive expf overflows, e^88.7 > FLT_MAX) and a very
 * negative one;
 * targets with repeats */
static void xent_inputs(int N, int V, uint64_t seed, float **x, uint8_t **t) {
    *x = normal((size_t)N * V, seed, 2.0f);
    *t = keepp(malloc(N));
    for (int n = 0; n < N; n++) (*t)[n] = (uint8_t)((n * 7 + 3) % V % 3 == 0 ? (n * 7 + 3) % V : (n % V) / 2);
    if (N > 1) (*x)[(size_t)1 * V + V / 2] = 100.0f;      /* target elsewhere (if V > 1) */
    if (N > 2) (*x)[(size_t)2 * V + (*t)[2]] = 100.0f;    /* the target itself is huge */
    if (N > 3) (*x)[(size_t)3 * V + V - 1] = -100.0f;
}

static void kernel_xent_fwd_body(void);
TEST(kernel_xent_fwd) { on_each(kernel_xent_fwd_body, 0); }
static void kernel_xent_fwd_body(void) {
    double wf = 0;
    for (int s = 0; s < 4; s++) {
        int N = XENT_S[s][0], V = XENT_S[s][1];
        size_t n = (size_t)N * V;
        float *x;
        uint8_t *t;
        xent_inputs(N, V, 181 + s, &x, &t);
        double *xd = dup(x, n), *lo = Dd(N);
        float *losses = garbage(N);
        double m = K->xent_fwd(losses, x, t, N, V), m2 = K->xent_fwd(NULL, x, t, N, V);
        for (int i = 0; i < N; i++) lo[i] = o_xent(xd + (size_t)i * V, t + i, 1, V);
        double mo = o_xent(xd, t, N, V);
        double e = fabs(m - mo) / maxd(fabs(mo), 1e-30);
        CHECKF(e <= FWD_TOL, "xent mean rel err %.3g (%.9g vs %.9g)", e, m, mo);
        CHECKF(m == m2, "xent mean differs with losses == NULL");
        wf = maxd(wf, e);
        if (V > 1) FWD_CHECK("xent losses", t_rel_rms(losses, lo, N), wf);
        free_all();
    }
    /* a huge logit (exp would overflow even double) and many rows (NULL-losses chunking) */
    int N = 3000, V = 256;
    float *x = normal((size_t)N * V, 189, 1.0f), *l = F(N);
    uint8_t *t = keepp(malloc(N));
    for (int n = 0; n < N; n++) t[n] = (uint8_t)(n * 31);
    x[5] = 1000.0f;
    x[(size_t)7 * V + t[7]] = 1000.0f;
    double m = K->xent_fwd(l, x, t, N, V), m2 = K->xent_fwd(NULL, x, t, N, V);
    double mo = o_xent(dup(x, (size_t)N * V), t, N, V), e = fabs(m - mo) / fabs(mo);
    CHECKF(t_all_finite(l, N) && e <= FWD_TOL, "xent huge logits: %.9g vs %.9g", m, mo);
    CHECKF(m == m2, "xent mean differs with losses == NULL (chunked)");
    wf = maxd(wf, e);
    free_all();
    printf("  xent: worst fwd rel err %.3g\n", wf);
}

static void kernel_xent_grad_body(void);
TEST(kernel_xent_grad) { on_each(kernel_xent_grad_body, 0); }
static void kernel_xent_grad_body(void) {
    double wg = 0;
    for (int s = 0; s < 4; s++)
        for (int k = 0; k < 2; k++) {
            int N = XENT_S[s][0], V = XENT_S[s][1];
            size_t n = (size_t)N * V;
            float *x;
            uint8_t *t;
            xent_inputs(N, V, 191 + s, &x, &t);
            float scale = k ? 2.5f : 1.0f / N, *dl = garbage(n);
            K->xent_bwd(dl, x, t, N, V, scale);
            xent_ctx c = {N, V, scale, t, dup(x, n)};
            CHECK(t_all_finite(dl, n));
            GRAD_CHECK("xent dlogits", grad_err(xent_loss, &c, c.x, n, dl, NULL), wg);
            free_all();
        }
    printf("  xent: worst grad rel rms %.3g\n", wg);
}

/* ======================= semantics: accumulate, overwrite, in place ======================= */
static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }
/* (after - prior) against a from-zero run, relative RMS in double */
static double acc_err(const float *after, const float *prior, const float *zero, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = ((double)after[i] - prior[i]) - zero[i];
        num += e * e;
        den += (double)zero[i] * zero[i];
    }
    return num == num && den > 0 ? sqrt(num / den) : INFINITY;
}
#define ACC_TOL 1e-6

static void kernel_grad_semantics_body(void);
TEST(kernel_grad_semantics) { on_each(kernel_grad_semantics_body, 1); }
TEST(kernel_grad_semantics_onednn) { on_onednn(kernel_grad_semantics_body); }
static void kernel_grad_semantics_body(void) {
    int N = 37, C = 17;
    size_t n = (size_t)N * C;
    float *x = normal(n, 201, 1.0f), *dy = normal(n, 202, 1.0f), *w = norm_weight(C, 203);
    float *x2 = normal(n, 204, 1.0f), *y = F(n), *r = F(N);
    /* embed: dtable accumulates */
    {
        uint8_t *tok = tokens(N, 205);
        float *z = F(256 * C), *p = normal(256 * C, 206, 1.0f), *a = copyf(p, 256 * C);
        K->embed_bwd(z, dy, tok, N, C);
        K->embed_bwd(a, dy, tok, N, C);
        CHECKF(acc_err(a, p, z, 256 * C) <= ACC_TOL, "embed dtable does not accumulate");
    }
    /* rmsnorm: dx and dw both accumulate */
    {
        K->rmsnorm_fwd(y, r, x, w, N, C, 1e-6f);
        float *zx = F(n), *zw = F(C), *px = normal(n, 207, 1.0f), *pw = normal(C, 208, 1.0f);
        float *ax = copyf(px, n), *aw = copyf(pw, C);
        K->rmsnorm_bwd(zx, zw, dy, x, w, r, N, C);
        K->rmsnorm_bwd(ax, aw, dy, x, w, r, N, C);
        CHECKF(acc_err(ax, px, zx, n) <= ACC_TOL, "rmsnorm dx does not accumulate");
        CHECKF(acc_err(aw, pw, zw, C) <= ACC_TOL, "rmsnorm dw does not accumulate");
    }
    /* matmul: din overwrites (din_acc 0) or adds (1); dW, dbias accumulate; NULLs skip */
    {
        int I = C, O = 5;
        float *W = normal((size_t)O * I, 209, 0.3f), *d = normal((size_t)N * O, 210, 1.0f);
        float *zi = F(n), *zW = F((size_t)O * I), *zb = F(O);
        float *pW = normal((size_t)O * I, 211, 1.0f), *pb = normal(O, 212, 1.0f), *pi = normal(n, 213, 1.0f);
        float *gi = garbage(n), *aW = copyf(pW, (size_t)O * I), *ab = copyf(pb, O), *ai = copyf(pi, n);
        K->matmul_bwd(zi, zW, zb, d, x, W, N, I, O, 0);
        K->matmul_bwd(gi, aW, ab, d, x, W, N, I, O, 0);
        CHECKF(same(gi, zi, n), "matmul din (din_acc=0) does not overwrite");
        CHECKF(acc_err(aW, pW, zW, (size_t)O * I) <= ACC_TOL, "matmul dW does not accumulate");
        CHECKF(acc_err(ab, pb, zb, O) <= ACC_TOL, "matmul dbias does not accumulate");
        K->matmul_bwd(ai, aW, NULL, d, x, W, N, I, O, 1);
        CHECKF(acc_err(ai, pi, zi, n) <= ACC_TOL, "matmul din (din_acc=1) does not add");
        float *bW = F((size_t)O * I);
        K->matmul_bwd(NULL, bW, NULL, d, x, W, N, I, O, 0);
        CHECKF(same(bW, zW, (size_t)O * I), "matmul dW differs with din == NULL");
    }
    /* conv: dx overwrites, dw accumulates */
    {
        int B = 1, T = N, W = 4;
        float *cw = normal((size_t)C * W, 214, 0.5f), *zx = F(n), *zw = F((size_t)C * W);
        float *gx = garbage(n), *pw = normal((size_t)C * W, 215, 1.0f), *aw = copyf(pw, (size_t)C * W);
        K->conv_bwd(zx, zw, dy, x, cw, B, T, C, W);
        K->conv_bwd(gx, aw, dy, x, cw, B, T, C, W);
        CHECKF(same(gx, zx, n), "conv dx does not overwrite");
        CHECKF(acc_err(aw, pw, zw, (size_t)C * W) <= ACC_TOL, "conv dw does not accumulate");
    }
    /* gate: df overwrites, dA_log and ddt_bias accumulate (both forms, both Cg) */
    for (int k = 0; k < 4; k++) {
        int H = 3, Cg = k % 2 ? 8 : 1;
        float lb = k / 2 ? -5.0f : 0.0f, *f, *A, *dtb;
        size_t ng = (size_t)N * H * Cg, nd = (size_t)H * Cg;
        gate_inputs(N, H, Cg, 216 + k, &f, &A, &dtb);
        float *dg = normal(ng, 220 + k, 1.0f), *zf = F(ng), *zA = F(H), *zd = F(nd);
        float *gf = garbage(ng), *pA = normal(H, 224 + k, 1.0f), *pd = normal(nd, 228 + k, 1.0f);
        float *aA = copyf(pA, H), *ad = copyf(pd, nd);
        K->gate_bwd(zf, zA, zd, dg, f, A, dtb, N, H, Cg, lb);
        K->gate_bwd(gf, aA, ad, dg, f, A, dtb, N, H, Cg, lb);
        CHECKF(same(gf, zf, ng), "gate df does not overwrite (k=%d)", k);
        CHECKF(acc_err(aA, pA, zA, H) <= ACC_TOL, "gate dA_log does not accumulate (k=%d)", k);
        CHECKF(acc_err(ad, pd, zd, nd) <= ACC_TOL, "gate ddt_bias does not accumulate (k=%d)", k);
    }
    /* gatednorm: do, dz overwrite; dw accumulates */
    for (int act = 0; act < 2; act++) {
        float *z = normal(n, 232, 2.0f), *zo = F(n), *zz = F(n), *zw = F(C);
        float *go = garbage(n), *gz = garbage(n), *pw = normal(C, 233, 1.0f), *aw = copyf(pw, C);
        K->gatednorm_fwd(y, r, x, z, w, N, C, 1e-6f, act);
        K->gatednorm_bwd(zo, zz, zw, dy, x, z, w, r, N, C, act);
        K->gatednorm_bwd(go, gz, aw, dy, x, z, w, r, N, C, act);
        CHECKF(same(go, zo, n) && same(gz, zz, n), "gatednorm do/dz do not overwrite");
        CHECKF(acc_err(aw, pw, zw, C) <= ACC_TOL, "gatednorm dw does not accumulate");
    }
    /* elementwise backward in place (dx == dy), l2norm overwrites */
    {
        float *ref = F(n), *ip = F(n), *db = F(n), *db2 = F(n);
        K->silu_bwd(ref, dy, x, n);
        memcpy(ip, dy, n * sizeof(float));
        K->silu_bwd(ip, ip, x, n);
        CHECKF(same(ip, ref, n), "silu_bwd in place differs");
        K->sigmoid_fwd(y, x, n);
        K->sigmoid_bwd(ref, dy, y, n);
        memcpy(ip, dy, n * sizeof(float));
        K->sigmoid_bwd(ip, ip, y, n);
        CHECKF(same(ip, ref, n), "sigmoid_bwd in place differs");
        K->swiglu_bwd(ref, db, dy, x, x2, n);
        memcpy(ip, dy, n * sizeof(float));
        K->swiglu_bwd(ip, db2, ip, x, x2, n);
        CHECKF(same(ip, ref, n) && same(db, db2, n), "swiglu_bwd in place (da == dh) differs");
        float *gx = garbage(n), *rn = F(N);
        K->l2norm_fwd(y, rn, x, N, C, 1e-6f);
        K->l2norm_bwd(ref, dy, y, rn, N, C);
        K->l2norm_bwd(gx, dy, y, rn, N, C);
        CHECKF(same(gx, ref, n), "l2norm dx does not overwrite");
    }
    /* xent: dlogits overwrites, and may alias logits */
    {
        uint8_t *t = tokens(N, 234);
        for (int i = 0; i < N; i++) t[i] %= C;
        float *ref = F(n), *g = garbage(n), *ip = copyf(x, n);
        K->xent_bwd(ref, x, t, N, C, 1.0f / N);
        K->xent_bwd(g, x, t, N, C, 1.0f / N);
        K->xent_bwd(ip, ip, t, N, C, 1.0f / N);
        CHECKF(same(g, ref, n), "xent dlogits does not overwrite");
        CHECKF(same(ip, ref, n), "xent in place differs");
    }
    free_all();
}

/* ======================= determinism across thread counts ======================= */
/* Each det_* runs forward and backward on sizes above the kernels' parallel thresholds and
 * writes every output into out (returns the count; out == NULL: count only). */
typedef size_t (*det_fn)(float *out);

static size_t det_embed(float *out) {
    int N = 2000, C = 256;
    size_t nt = 256 * (size_t)C;
    if (!out) return (size_t)N * C + nt;
    uint8_t *tok = tokens(N, 301);
    float *table = normal(nt, 302, 1.0f), *dy = normal((size_t)N * C, 303, 1.0f);
    K->embed_fwd(out, tok, table, N, C);
    float *dt = out + (size_t)N * C;
    t_fill_normal(dt, nt, 304, 1.0f);
    K->embed_bwd(dt, dy, tok, N, C);
    return 0;
}
static size_t det_rmsnorm(float *out) {
    int N = 300, C = 256;
    size_t n = (size_t)N * C;
    if (!out) return 2 * n + N + C;
    float *x = normal(n, 311, 1.0f), *w = norm_weight(C, 312), *dy = normal(n, 313, 1.0f);
    float *y = out, *r = y + n, *dx = r + N, *dw = dx + n;
    K->rmsnorm_fwd(y, r, x, w, N, C, 1e-6f);
    t_fill_normal(dx, n, 314, 1.0f);
    t_fill_normal(dw, C, 315, 1.0f);
    K->rmsnorm_bwd(dx, dw, dy, x, w, r, N, C);
    return 0;
}
/* large products (tiled) and mid-size ones (0.3M-2M multiply-adds: big enough for OpenBLAS
 * to thread them itself, small enough that dm_gemm may not tile them) */
static const int DET_MM_S[][3] = {{512, 256, 384}, {4096, 256, 64}, /* large: tiled */
                                  {16, 256, 256}, {100, 100, 100}, {8, 256, 768}};
static size_t det_matmul_shapes(float *out, int s0, int s1) {
    const int(*S)[3] = DET_MM_S;
    size_t tot = 0;
    for (int s = s0; s < s1; s++) {
        int N = S[s][0], I = S[s][1], O = S[s][2];
        size_t ni = (size_t)N * I, nw = (size_t)O * I, no = (size_t)N * O;
        if (out) {
            float *in = normal(ni, 321 + s, 1.0f), *W = normal(nw, 322 + s, 0.1f);
            float *b = normal(O, 323 + s, 1.0f), *dy = normal(no, 324 + s, 1.0f);
            float *y = out + tot, *din = y + no, *dW = din + ni, *db = dW + nw;
            K->matmul_fwd(y, in, W, b, N, I, O);
            t_fill_normal(dW, nw, 325, 1.0f);
            t_fill_normal(db, O, 326, 1.0f);
            K->matmul_bwd(din, dW, db, dy, in, W, N, I, O, 0);
        }
        tot += no + ni + nw + O;
    }
    return out ? 0 : tot;
}
static size_t det_matmul(float *out) { return det_matmul_shapes(out, 0, 2); }
static size_t det_matmul_mid(float *out) { return det_matmul_shapes(out, 2, 5); }
static size_t det_act(float *out) {
    size_t n = 200000;
    if (!out) return 8 * n;
    float *x = normal(n, 331, 3.0f), *b = normal(n, 332, 1.0f), *dy = normal(n, 333, 1.0f);
    K->silu_fwd(out, x, n);
    K->silu_bwd(out + n, dy, x, n);
    K->sigmoid_fwd(out + 2 * n, x, n);
    K->sigmoid_bwd(out + 3 * n, dy, out + 2 * n, n);
    K->swiglu_fwd(out + 4 * n, x, b, n);
    K->swiglu_bwd(out + 5 * n, out + 6 * n, dy, x, b, n);
    memcpy(out + 7 * n, x, n * sizeof(float));
    K->add_inplace(out + 7 * n, b, n);
    return 0;
}
static size_t det_conv(float *out) {
    int B = 2, T = 300, C = 256, W = 4;
    size_t n = (size_t)B * T * C, nw = (size_t)C * W;
    if (!out) return 2 * n + nw;
    float *x = normal(n, 341, 1.0f), *w = normal(nw, 342, 0.5f), *dy = normal(n, 343, 1.0f);
    K->conv_fwd(out, x, w, B, T, C, W);
    t_fill_normal(out + 2 * n, nw, 344, 1.0f);
    K->conv_bwd(out + n, out + 2 * n, dy, x, w, B, T, C, W);
    return 0;
}
static size_t det_l2norm(float *out) {
    int R = 2048, D = 64;
    size_t n = (size_t)R * D;
    if (!out) return 2 * n + R;
    float *x = normal(n, 351, 1.0f), *dy = normal(n, 352, 1.0f);
    K->l2norm_fwd(out, out + n, x, R, D, 1e-6f);
    K->l2norm_bwd(out + n + R, dy, out, out + n, R, D);
    return 0;
}
static size_t det_gate(float *out) {
    /* {512, 5, 48}: 3 channel blocks per head, so heads straddle the thread chunks at 2 and
     * 3 threads and the order of dA_log's block partials is exercised */
    static const int S[][3] = {{1024, 4, 64}, {4096, 4, 1}, {512, 5, 48}};
    size_t tot = 0;
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2; k++) {
            int N = S[s][0], H = S[s][1], Cg = S[s][2];
            size_t n = (size_t)N * H * Cg, nd = (size_t)H * Cg;
            if (out) {
                float lb = k ? -5.0f : 0.0f, *f, *A, *dtb, *o = out + tot;
                gate_inputs(N, H, Cg, 361 + s, &f, &A, &dtb);
                float *dg = normal(n, 363 + s, 1.0f);
                K->gate_fwd(o, f, A, dtb, N, H, Cg, lb);
                t_fill_normal(o + 2 * n, H + nd, 365, 1.0f);
                K->gate_bwd(o + n, o + 2 * n, o + 2 * n + H, dg, f, A, dtb, N, H, Cg, lb);
            }
            tot += 2 * n + H + nd;
        }
    return out ? 0 : tot;
}
static size_t det_gatednorm(float *out) {
    int R = 2048, D = 64;
    size_t n = (size_t)R * D, per = 3 * n + R + D;
    if (!out) return 2 * per;
    float *o = normal(n, 371, 1.0f), *z = normal(n, 372, 2.0f), *w = norm_weight(D, 373);
    float *dy = normal(n, 374, 1.0f);
    for (int act = 0; act < 2; act++) {
        float *b = out + act * per;
        K->gatednorm_fwd(b, b + n, o, z, w, R, D, 1e-6f, act);
        t_fill_normal(b + 3 * n + R, D, 375, 1.0f);
        K->gatednorm_bwd(b + n + R, b + 2 * n + R, b + 3 * n + R, dy, o, z, w, b + n, R, D, act);
    }
    return 0;
}
static size_t det_xent(float *out) {
    int N = 2500, V = 256;
    size_t n = (size_t)N * V;
    if (!out) return n + N + 4;
    float *x = normal(n, 381, 2.0f);
    uint8_t *t = tokens(N, 382);
    double m = K->xent_fwd(out, x, t, N, V), m2 = K->xent_fwd(NULL, x, t, N, V);
    memcpy(out + N, &m, sizeof m);
    memcpy(out + N + 2, &m2, sizeof m2);
    K->xent_bwd(out + N + 4, x, t, N, V, 1.0f / N);
    return 0;
}

static void kernel_determinism_threads_body(void);
TEST(kernel_determinism_threads) { on_each(kernel_determinism_threads_body, 1); }
TEST(kernel_determinism_threads_onednn) { on_onednn(kernel_determinism_threads_body); }
static void kernel_determinism_threads_body(void) {
    static const struct { const char *name; det_fn fn; int matmul; } G[] = {
        {"embed", det_embed, 0}, {"rmsnorm", det_rmsnorm, 0}, {"matmul (large)", det_matmul, 1},
        {"matmul (mid-size: one tile)", det_matmul_mid, 1},
        {"act", det_act, 0}, {"conv", det_conv, 0}, {"l2norm", det_l2norm, 0}, {"gate", det_gate, 0},
        {"gatednorm", det_gatednorm, 0}, {"xent", det_xent, 0}};
    /* 2 cores oversubscribed by 3, 4 and 8 threads: the tiles are fixed by the shape */
    static const int NT[] = {2, 3, 4, 8};
    int saved = omp_get_max_threads(), nsame = 0, nk = (int)(sizeof G / sizeof G[0]), nrun = 0;
    int nt = (int)(sizeof NT / sizeof NT[0]);
    for (int k = 0; k < nk; k++) {
        if (K->matmul_only && !G[k].matmul) continue; /* the oneDNN set: its matmul only */
        nrun++;
        size_t n = G[k].fn(NULL);
        float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        int all = 1;
        omp_set_num_threads(1);
        G[k].fn(ref);
        free_all();
        for (int i = 0; i < nt; i++) {
            omp_set_num_threads(NT[i]);
            memset(got, 0, n * sizeof(float));
            G[k].fn(got);
            free_all();
            int eq = same(ref, got, n);
            CHECKF(eq, "%s: results differ between 1 and %d threads", G[k].name, NT[i]);
            all &= eq;
        }
        nsame += all;
        CHECKF(t_all_finite(ref, n), "%s: non-finite output", G[k].name);
        free(ref);
        free(got);
    }
    omp_set_num_threads(saved);
    CHECKF(omp_get_max_threads() == saved, "thread count not restored");
    printf("  determinism: %d of %d kernel groups bitwise equal at 1, 2, 3, 4, 8 threads\n", nsame,
           nrun);
}

/* SiLU then the L2 norm in one pass (q and k of the mixer): the fused forward and backward
 * give the bits of the two kernels one after the other (dm_silu_fwd into a buffer then
 * dm_l2norm_fwd; dm_l2norm_bwd then dm_silu_bwd in place), over the threads, with a NaN,
 * an infinity and a zero row among the inputs; the backward also in place (dx == dy). */
TEST(kernel_silu_l2norm_fused_bitwise) {
    int R = 4 * 211 + 3, D = 64; /* over the parallel threshold */
    size_t n = (size_t)R * D;
    float *x = t_alloc(n), *dy = t_alloc(n), *t = t_alloc(n), *y1 = t_alloc(n), *y2 = t_alloc(n),
          *r1 = t_alloc(R), *r2 = t_alloc(R), *d1 = t_alloc(n), *d2 = t_alloc(n);
    t_fill_normal(x, n, 31, 2.0f);
    t_fill_normal(dy, n, 32, 1.0f);
    x[7] = NAN, x[D + 5] = INFINITY;
    for (int d = 0; d < D; d++) x[3 * D + d] = 0.0f;
    dm_silu_fwd(t, x, n);
    dm_l2norm_fwd(y1, r1, t, R, D, 1e-6f);
    dm_silu_l2norm_fwd(y2, r2, x, R, D, 1e-6f);
    CHECK(same(y1, y2, n) && same(r1, r2, R));
    dm_l2norm_bwd(d1, dy, y1, r1, R, D);
    dm_silu_bwd(d1, d1, x, n);
    dm_silu_l2norm_bwd(d2, dy, y1, r1, x, R, D);
    CHECK(same(d1, d2, n));
    memcpy(d2, dy, n * sizeof *d2);
    dm_silu_l2norm_bwd(d2, d2, y1, r1, x, R, D);
    CHECK(same(d1, d2, n));
    CHECK(isnan(y2[7]) && y2[3 * D] == 0.0f && isfinite(d2[2 * D]));
    free(x), free(dy), free(t), free(y1), free(y2), free(r1), free(r2), free(d1), free(d2);
}
