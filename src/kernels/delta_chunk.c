/* delta_chunk.c — the chunked (fused) delta-rule core, KDA and GDN, forward and backward.
 * docs/kda.md sections 3-5 and 7; DESIGN.md section 4; declarations at the end of
 * kernels/delta.h. Same semantics and layout as the reference (delta_ref.c):
 *   q,k [B,T,H,dk]  v,o,dO [B,T,H,dv]  g [B,T,H,dk] (KDA) or [B,T,H] (GDN)  beta [B,T,H]
 *   h0,hT,dhT,dh0 [B,H,dk,dv]   hs (optional) [B,H,nc,dk,dv], nc = ceil(T/C)
 *
 * Per (b,h) pair and chunk of n <= C tokens (rows r = 0..n-1), h = state at chunk start:
 *   G_r   = sum_{i<=r} g_i                       cumulative gate, in DOUBLE
 *   D_rj  = exp(G_r - G_j), j <= r               exact per pair (never exp(G_r)*exp(-G_j),
 *                                                never on the upper triangle); every D <= 1
 *                                                when g <= 0
 *   A[r,j]    = scale * sum_c q_rc k_jc D_rjc    j <= r   (Aqk)
 *   Lr[r,j]   = sum_c k_rc k_jc D_rjc            j <  r   (L = Diag(beta) Lr)
 *   Qs = scale * Q . e^G    Kb = beta . e^G . K    Kg = K . e^{G_end - G}
 *   R  = beta.V - Kb h                            (WY form: U - W h = T (beta.V - Kb h))
 *   Dl = (I + L)^-1 R                             UT transform T = (I+L)^-1 applied by
 *                                                 forward substitution (Dl = "v_new")
 *   O  = Qs h + A Dl
 *   h' = Diag(e^{G_end}) h + Kg^T Dl
 * Backward per chunk in reverse, dh = gradient of the chunk-end state (dhT for the last):
 *   Y   = [dO ; -dR],   -dR = (I + L)^-T (-(A^T dO + Kg dh))      (back substitution)
 *   [dA ; dL] = Y Dl^T          [dQs ; dKb] = Y h^T          dKg = Dl dh^T
 *   dh_prev   = Diag(e^{G_end}) dh + [Qs ; Kb]^T Y
 *   then the elementwise chains (Qs, Kb, Kg, beta.V), the pairwise terms of A and L, and
 *   dg = reverse cumsum of dG within the chunk.
 *
 * fp32 throughout except the cumulative gates. Matrix products through cblas_sgemm
 * (single-threaded inside our OpenMP region: one pool); (b,h) pairs over threads, each
 * pair serial: results are bitwise independent of the thread count.
 * The forward can keep the chunk-start states (hs) for the backward; without them the
 * backward reruns the forward scan first.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/delta.h"

#ifdef __FMA__
#define FMA(a, b, c) fmaf(a, b, c)
#else
#define FMA(a, b, c) ((a) * (b) + (c))
#endif

#define CH_MAX_D 256 /* dk, dv limit (dm_delta_chunk_supports) */

/* Explicit SIMD for the pairwise backward (GCC/Clang vector extensions): VL lanes of the
 * widest vector the build targets; arrays the pairwise loops touch have rows padded to a
 * multiple of VL (dkp) and zero in the padding, so no loop has a tail. */
#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
/* lane indices that complete a shuffle of VL lanes (their values do not matter) */
#if VL == 16
#define VL_REST4 , 8, 9, 10, 11, 12, 13, 14, 15
#define VL_REST2 , 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
#define VL_REST1 , 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
#elif VL == 8
#define VL_REST4
#define VL_REST2 , 4, 5, 6, 7
#define VL_REST1 , 2, 3, 4, 5, 6, 7
#else
#define VL_REST4
#define VL_REST2
#define VL_REST1 , 2, 3
#endif
#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__FMA__))
#include <immintrin.h>
#endif
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
static inline vf vld(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vfma(vf a, vf b, vf c) { /* a*b + c, fused where the target has FMA */
#if VL == 16
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif VL == 8 && defined(__FMA__)
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

/* exp for float x, written so GCC vectorizes loops over it (no libm call, no branches).
 * Cody-Waite reduction to r in [-ln2/2, ln2/2], degree-6 polynomial, 2^n from the
 * exponent bits. Max error 1.3 ulp on [-88, 88]; 0 below -87.3 (the true value is
 * < 1.2e-38); +inf above 88.72; NaN stays NaN. */
static inline float dc_exp(float x) {
    const float shifter = 0x1.8p23f;
    float xc = x < -87.5f ? -87.5f : x;
    xc = xc > 88.5f ? 88.5f : xc;
    float t = FMA(xc, 0x1.715476p+0f, shifter);
    float n = t - shifter;
    float r = FMA(n, -0x1.62e43p-1f, xc);
    r = FMA(n, 0x1.05c61p-29f, r);
    float p = 0x1.6850e4p-10f;
    p = FMA(p, r, 0x1.123bccp-7f);
    p = FMA(p, r, 0x1.555b98p-5f);
    p = FMA(p, r, 0x1.55548ep-3f);
    p = FMA(p, r, 0x1.fffff8p-2f);
    p = FMA(p, r, 1.0f);
    p = FMA(p, r, 1.0f);
    int32_t ti;
    memcpy(&ti, &t, sizeof ti);
    int32_t si = (int32_t)((uint32_t)ti << 23) + 0x3f800000;
    float s;
    memcpy(&s, &si, sizeof s);
    float y = p * s;
    y = x < -87.3f ? 0.f : y;
    y = x > 88.72f ? INFINITY : y;
    return y;
}

typedef int32_t vi __attribute__((vector_size(VL * sizeof(float))));
static inline vf vsplat(float x) { return (vf){0} + x; }
static inline vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
#if VL == 16
/* exp on 16 lanes with AVX-512: n = round(x log2 e), r = x - n ln2 (two steps), the same
 * degree-6 polynomial as dc_exp, then p * 2^n by vscalefps, which gives 0 below the
 * float range and +inf above it (no clamps). Within 1.3 ulp of exp, like dc_exp. */
static inline vf vexp(vf x) {
    const __m512 xx = (__m512)x;
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xx, _mm512_set1_ps(0x1.715476p+0f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0x1.62e43p-1f), xx);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(0x1.05c61p-29f), r);
    __m512 p = _mm512_set1_ps(0x1.6850e4p-10f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.123bccp-7f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.555b98p-5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.55548ep-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.fffff8p-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return (vf)_mm512_scalef_ps(p, n);
}
#else
/* dc_exp on VL lanes: the same operations in the same order, so the same bits. */
static inline vf vexp(vf x) {
    const vf shifter = vsplat(0x1.8p23f);
    vf xc = vsel(x < -87.5f, vsplat(-87.5f), x);
    xc = vsel(xc > 88.5f, vsplat(88.5f), xc);
    const vf t = vfma(xc, vsplat(0x1.715476p+0f), shifter);
    const vf n = t - shifter;
    vf r = vfma(n, vsplat(-0x1.62e43p-1f), xc);
    r = vfma(n, vsplat(0x1.05c61p-29f), r);
    vf p = vsplat(0x1.6850e4p-10f);
    p = vfma(p, r, vsplat(0x1.123bccp-7f));
    p = vfma(p, r, vsplat(0x1.555b98p-5f));
    p = vfma(p, r, vsplat(0x1.55548ep-3f));
    p = vfma(p, r, vsplat(0x1.fffff8p-2f));
    p = vfma(p, r, vsplat(1.0f));
    p = vfma(p, r, vsplat(1.0f));
    const vi si = ((vi)t << 23) + 0x3f800000;
    vf y = p * (vf)si;
    y = vsel(x < -87.3f, vsplat(0.f), y);
    y = vsel(x > 88.72f, vsplat(INFINITY), y);
    return y;
}
#endif
/* sum of the lanes, as a fixed halving tree */
static inline float hsum(vf v) {
#if VL == 16
    v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
#endif
#if VL >= 8
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3 VL_REST4);
#endif
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1 VL_REST2);
    v += __builtin_shufflevector(v, v, 1, 0 VL_REST1);
    return v[0];
}

/* ------------------------------------------------------------------------------------ */
/* support, sizes                                                                        */

int dm_delta_chunk_supports(const dm_delta_dims *d, int chunk, const char **why) {
    const char *w = NULL;
    if (!d) w = "no dims";
    else if (chunk != 16 && chunk != 32 && chunk != 64) w = "chunk size not in {16, 32, 64}";
    else if (d->B <= 0 || d->T <= 0 || d->H <= 0 || d->dk <= 0 || d->dv <= 0)
        w = "non-positive dims";
    else if (d->scalar_gate != 0 && d->scalar_gate != 1) w = "scalar_gate not 0/1";
    else if (d->dk > CH_MAX_D || d->dv > CH_MAX_D) w = "dk or dv above 256";
    if (why) *why = w;
    return w == NULL;
}

static inline size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline int nchunks(const dm_delta_dims *d, int C) { return (d->T + C - 1) / C; }
static inline int padk(int dk) { return (dk + VL - 1) / VL * VL; }

size_t dm_delta_chunk_states(const dm_delta_dims *d, int chunk) {
    return (size_t)d->B * d->H * nchunks(d, chunk) * d->dk * d->dv;
}

/* Per-thread workspace. All sizes in floats, each buffer 64-byte aligned relative to
 * the slice start (the caller's work pointer should be 64-byte aligned for speed).
 * dkp = dk rounded up to VL; [., dkp] rows are zero in the padding. */
typedef struct {
    int dkp;
    double *Gd;   /* [C, gw] cumulative gate (gw = dk, or 1 for GDN)          */
    float *Gh;    /* [C, dkp] KDA: G as a float pair, Gh + Gl = G to ~2^-48   */
    float *Gl;    /* [C, dkp]                                                  */
    float *Qp;    /* [C, dkp] q rows of the chunk                              */
    float *Kp;    /* [C, dkp] k rows of the chunk                              */
    float *eG;    /* [C, dk] exp(G_r)                                          */
    float *eGk;   /* [C, dk] exp(G_end - G_r)                                  */
    float *eGend; /* [dk]                                                      */
    float *X;     /* [2n, dk]: Qs rows 0..n-1, Kb rows n..2n-1                 */
    float *Kg;    /* [C, dk]                                                   */
    float *A;     /* [C, C] Aqk, lower incl. diagonal, upper zero              */
    float *Lr;    /* [C, C] L without beta, strictly lower, rest zero          */
    float *QK;    /* [C, C] GDN: Q K^T                                         */
    float *KK;    /* [C, C] GDN: K K^T                                         */
    float *Gm;    /* [C, C] GDN: exp(G_r - G_j), j <= r                        */
    float *Dl;    /* [C, dv] R, then (I+L)^-1 R                                */
    float *S;     /* [dk, dv] state                                            */
    /* backward only */
    float *Dc;    /* [C(C+1)/2, dkp] KDA pairwise decays D_rj of the chunk     */
    float *Y;     /* [2n, dv]: dO rows 0..n-1, -dR rows n..2n-1                */
    float *dAL;   /* [2C, C]: dA rows 0..n-1, dL rows n..2n-1 (ld C)           */
    float *dX;    /* [2n, dk]: dQs, dKb                                         */
    float *dKg;   /* [C, dk] dKg, then k . e^{G_end-G} . dKg                    */
    float *dS;    /* [dk, dv] gradient of the state                            */
    float *dqa;   /* [C, dkp] dq of the chunk                                  */
    float *dka;   /* [C, dkp] dk of the chunk                                  */
    float *dGa;   /* [C, dkp] one-sided dG terms (reverse-cumsummed into dg)   */
    float *dgi;   /* [C, dkp] KDA pairwise terms, already summed into dg form   */
    float *eGH;   /* [dk] e^{G_end} . rowsum(h . dh)                           */
    float *dba;   /* [C] dbeta                                                 */
    float *dgs;   /* [C] GDN pairwise terms in dg form                         */
    float *hs;    /* [nc, dk, dv] chunk-start states (when the caller has none) */
} ws_t;

static size_t ws_layout(const dm_delta_dims *d, int C, int bwd, float *base, ws_t *w) {
    const size_t dk = d->dk, dv = d->dv, Cs = C, dkp = padk(d->dk);
    const size_t gw = d->scalar_gate ? 1 : dk;
    const int kda = !d->scalar_gate;
    size_t off = 0;
    if (w) memset(w, 0, sizeof *w), w->dkp = (int)dkp;
#define TAKE(field, type, n)                                                              \
    do {                                                                                  \
        size_t nf_ = al16((n) * (sizeof(type) / sizeof(float)));                          \
        if (w) w->field = (type *)(base + off);                                           \
        off += nf_;                                                                       \
    } while (0)
    TAKE(Gd, double, Cs * gw);
    if (kda) {
        TAKE(Gh, float, Cs * dkp);
        TAKE(Gl, float, Cs * dkp);
    }
    TAKE(Qp, float, Cs * dkp);
    TAKE(Kp, float, Cs * dkp);
    TAKE(eG, float, Cs * dk);
    TAKE(eGk, float, Cs * dk);
    TAKE(eGend, float, dk);
    TAKE(X, float, 2 * Cs * dk);
    TAKE(Kg, float, Cs * dk);
    TAKE(A, float, Cs * Cs);
    TAKE(Lr, float, Cs * Cs);
    if (!kda) {
        TAKE(QK, float, Cs * Cs);
        TAKE(KK, float, Cs * Cs);
        TAKE(Gm, float, Cs * Cs);
    }
    TAKE(Dl, float, Cs * dv);
    TAKE(S, float, dk * dv);
    if (bwd) {
        if (kda) TAKE(Dc, float, Cs * (Cs + 1) / 2 * dkp);
        TAKE(Y, float, 2 * Cs * dv);
        TAKE(dAL, float, 2 * Cs * Cs);
        TAKE(dX, float, 2 * Cs * dk);
        TAKE(dKg, float, Cs * dk);
        TAKE(dS, float, dk * dv);
        TAKE(dqa, float, Cs * dkp);
        TAKE(dka, float, Cs * dkp);
        TAKE(dGa, float, Cs * dkp);
        TAKE(dgi, float, Cs * dkp);
        TAKE(eGH, float, dk);
        TAKE(dba, float, Cs);
        TAKE(dgs, float, Cs);
        TAKE(hs, float, (size_t)nchunks(d, C) * dk * dv);
    }
#undef TAKE
    return off;
}

size_t dm_delta_chunk_fwd_work(const dm_delta_dims *d, int chunk, int nthreads) {
    return (size_t)(nthreads < 1 ? 1 : nthreads) * ws_layout(d, chunk, 0, NULL, NULL);
}
size_t dm_delta_chunk_bwd_work(const dm_delta_dims *d, int chunk, int nthreads) {
    return (size_t)(nthreads < 1 ? 1 : nthreads) * ws_layout(d, chunk, 1, NULL, NULL);
}

/* Zero what must start as zero once per slice: the upper triangles of A / Lr (never
 * written) and the padding of every [., dkp] buffer (never written either). */
static void ws_zero(const dm_delta_dims *d, int C, int bwd, float *base) {
    memset(base, 0, ws_layout(d, C, bwd, NULL, NULL) * sizeof(float));
}

/* ------------------------------------------------------------------------------------ */
/* per-chunk pieces                                                                      */

typedef struct {
    const dm_delta_dims *d;
    const float *q, *k, *v, *g, *beta;
    size_t ldk, ldv;  /* row strides of q/k/g and v/o: H*dk, H*dv */
} in_t;

static inline size_t rowk(const dm_delta_dims *d, int b, int t, int h) {
    return (((size_t)b * d->T + t) * d->H + h) * (size_t)d->dk;
}
static inline size_t rowv(const dm_delta_dims *d, int b, int t, int h) {
    return (((size_t)b * d->T + t) * d->H + h) * (size_t)d->dv;
}
static inline size_t rows(const dm_delta_dims *d, int b, int t, int h) {
    return ((size_t)b * d->T + t) * d->H + h;
}

/* Gates and elementwise factors of chunk [t0, t0+n): Gd (Gh, Gl), Qp, Kp, eG, eGk, eGend,
 * X = [Qs; Kb], Kg. */
static void chunk_gates(const in_t *in, int b, int h, int t0, int n, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dkp = w->dkp;
    const float scale = d->scale;
    for (int r = 0; r < n; r++) {
        memcpy(w->Qp + (size_t)r * dkp, in->q + rowk(d, b, t0 + r, h), (size_t)dk * sizeof(float));
        memcpy(w->Kp + (size_t)r * dkp, in->k + rowk(d, b, t0 + r, h), (size_t)dk * sizeof(float));
    }
    if (d->scalar_gate) {
        double acc = 0;
        for (int r = 0; r < n; r++) {
            acc += (double)in->g[rows(d, b, t0 + r, h)];
            w->Gd[r] = acc;
        }
        const double Ge = w->Gd[n - 1];
        const float ee = dc_exp((float)Ge);
        for (int c = 0; c < dk; c++) w->eGend[c] = ee;
        for (int r = 0; r < n; r++) {
            const float er = dc_exp((float)w->Gd[r]), ek = dc_exp((float)(Ge - w->Gd[r]));
            float *eG = w->eG + (size_t)r * dk, *eGk = w->eGk + (size_t)r * dk;
            for (int c = 0; c < dk; c++) {
                eG[c] = er;
                eGk[c] = ek;
            }
        }
    } else {
        double *G0 = w->Gd;
        const float *g0 = in->g + rowk(d, b, t0, h);
        for (int c = 0; c < dk; c++) G0[c] = (double)g0[c];
        for (int r = 1; r < n; r++) {
            const float *gr = in->g + rowk(d, b, t0 + r, h);
            const double *Gp = w->Gd + (size_t)(r - 1) * dk;
            double *Gr = w->Gd + (size_t)r * dk;
            for (int c = 0; c < dk; c++) Gr[c] = Gp[c] + (double)gr[c];
        }
        const double *Ge = w->Gd + (size_t)(n - 1) * dk;
        for (int r = 0; r < n; r++) {
            const double *Gr = w->Gd + (size_t)r * dk;
            float *eG = w->eG + (size_t)r * dk, *eGk = w->eGk + (size_t)r * dk;
            float *gh = w->Gh + (size_t)r * dkp, *gl = w->Gl + (size_t)r * dkp;
            for (int c = 0; c < dk; c++) {
                eG[c] = dc_exp((float)Gr[c]);
                eGk[c] = dc_exp((float)(Ge[c] - Gr[c]));
                gh[c] = (float)Gr[c];
                gl[c] = (float)(Gr[c] - (double)gh[c]);
            }
        }
        memcpy(w->eGend, w->eG + (size_t)(n - 1) * dk, (size_t)dk * sizeof(float));
    }
    float *Qs = w->X, *Kb = w->X + (size_t)n * dk;
    for (int r = 0; r < n; r++) {
        const float *qr = w->Qp + (size_t)r * dkp, *kr = w->Kp + (size_t)r * dkp;
        const float br = in->beta[rows(d, b, t0 + r, h)];
        const float *eG = w->eG + (size_t)r * dk, *eGk = w->eGk + (size_t)r * dk;
        float *qs = Qs + (size_t)r * dk, *kb = Kb + (size_t)r * dk, *kg = w->Kg + (size_t)r * dk;
        for (int c = 0; c < dk; c++) {
            qs[c] = scale * qr[c] * eG[c];
            kb[c] = br * eG[c] * kr[c];
            kg[c] = kr[c] * eGk[c];
        }
    }
}

/* Intra-chunk matrices A (when want_A) and Lr.
 * KDA: exact pairwise decays D_rjc = exp(G_rc - G_jc) for j <= r only, the difference
 * taken from the float pair (Gh, Gl), which carries the double cumsum: the argument is
 * exact to ~1 ulp of the DIFFERENCE however large G is. Stored into Dc when non-NULL.
 * GDN: Q K^T and K K^T by sgemm, times Gm = exp(G_r - G_j) (lower triangle only). */
static void chunk_intra(const in_t *in, int n, int C, ws_t *w, int want_A, float *Dc) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dkp = w->dkp;
    const float scale = d->scale;
    if (d->scalar_gate) {
        /* QK, KK full n x n; Gm lower incl. diagonal (upper never evaluated) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dk, 1.f, w->Qp, dkp, w->Kp,
                    dkp, 0.f, w->QK, C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dk, 1.f, w->Kp, dkp, w->Kp,
                    dkp, 0.f, w->KK, C);
        for (int r = 0; r < n; r++) {
            const double Gr = w->Gd[r];
            float *gm = w->Gm + (size_t)r * C, *a = w->A + (size_t)r * C,
                  *l = w->Lr + (size_t)r * C;
            const float *qk = w->QK + (size_t)r * C, *kk = w->KK + (size_t)r * C;
            for (int j = 0; j <= r; j++) gm[j] = dc_exp((float)(Gr - w->Gd[j]));
            for (int j = 0; j <= r; j++) a[j] = scale * qk[j] * gm[j];
            for (int j = 0; j < r; j++) l[j] = kk[j] * gm[j];
        }
        return;
    }
    for (int r = 0; r < n; r++) {
        const float *ghr = w->Gh + (size_t)r * dkp, *glr = w->Gl + (size_t)r * dkp;
        const float *qr = w->Qp + (size_t)r * dkp, *kr = w->Kp + (size_t)r * dkp;
        float *a = w->A + (size_t)r * C, *l = w->Lr + (size_t)r * C;
        for (int j = 0; j <= r; j++) {
            const float *ghj = w->Gh + (size_t)j * dkp, *glj = w->Gl + (size_t)j * dkp;
            const float *kj = w->Kp + (size_t)j * dkp;
            float *D = Dc ? Dc + ((size_t)r * (r + 1) / 2 + j) * dkp : NULL;
            vf sa = vsplat(0.f), sl = vsplat(0.f);
            for (int c = 0; c < dkp; c += VL) {
                const vf x = (vld(ghr + c) - vld(ghj + c)) + (vld(glr + c) - vld(glj + c));
                const vf e = vexp(x);
                if (D) vst(D + c, e);
                const vf ke = vld(kj + c) * e;
                sa = vfma(vld(qr + c), ke, sa);
                sl = vfma(vld(kr + c), ke, sl);
            }
            if (want_A) a[j] = scale * hsum(sa);
            if (j < r) l[j] = hsum(sl);
        }
    }
}

/* Dl = beta.V - Kb h, then Dl <- (I + L)^-1 Dl by forward substitution, L = Diag(beta) Lr. */
static void chunk_delta(const in_t *in, int b, int h, int t0, int n, int C, const float *S,
                        ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dv = d->dv;
    for (int r = 0; r < n; r++) {
        const float *vr = in->v + rowv(d, b, t0 + r, h);
        const float br = in->beta[rows(d, b, t0 + r, h)];
        float *dl = w->Dl + (size_t)r * dv;
        for (int j = 0; j < dv; j++) dl[j] = br * vr[j];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, -1.f, w->X + (size_t)n * dk,
                dk, S, dv, 1.f, w->Dl, dv);
    for (int r = 1; r < n; r++) {
        const float br = in->beta[rows(d, b, t0 + r, h)];
        const float *l = w->Lr + (size_t)r * C;
        float *restrict dr = w->Dl + (size_t)r * dv;
        for (int j = 0; j < r; j++) {
            const float c = -br * l[j];
            const float *restrict dj = w->Dl + (size_t)j * dv;
            for (int x = 0; x < dv; x++) dr[x] = FMA(c, dj[x], dr[x]);
        }
    }
}

/* S <- Diag(eGend) S + Kg^T Dl */
static void chunk_state(const dm_delta_dims *d, int n, float *S, ws_t *w) {
    const int dk = d->dk, dv = d->dv;
    for (int c = 0; c < dk; c++) {
        const float e = w->eGend[c];
        float *s = S + (size_t)c * dv;
        for (int j = 0; j < dv; j++) s[j] *= e;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, dv, n, 1.f, w->Kg, dk, w->Dl, dv,
                1.f, S, dv);
}

/* ------------------------------------------------------------------------------------ */
/* forward                                                                               */

static void fwd_pair(const in_t *in, int C, int b, int h, const float *h0, float *o,
                     float *hT, float *hs, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int T = d->T, dk = d->dk, dv = d->dv, nc = nchunks(d, C);
    const size_t ss = (size_t)dk * dv, soff = ((size_t)b * d->H + h) * ss;
    float *S = w->S;
    if (h0) memcpy(S, h0 + soff, ss * sizeof(float));
    else memset(S, 0, ss * sizeof(float));
    for (int ci = 0; ci < nc; ci++) {
        const int t0 = ci * C, n = T - t0 < C ? T - t0 : C;
        if (hs) memcpy(hs + (((size_t)b * d->H + h) * nc + ci) * ss, S, ss * sizeof(float));
        chunk_gates(in, b, h, t0, n, w);
        chunk_intra(in, n, C, w, 1, NULL);
        chunk_delta(in, b, h, t0, n, C, S, w);
        float *O = o + rowv(d, b, t0, h);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, 1.f, w->X, dk, S, dv,
                    0.f, O, (int)in->ldv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, n, 1.f, w->A, C, w->Dl, dv,
                    1.f, O, (int)in->ldv);
        chunk_state(d, n, S, w);
    }
    if (hT) memcpy(hT + soff, S, ss * sizeof(float));
}

void dm_delta_chunk_fwd(const dm_delta_dims *d, int chunk, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        float *o, float *hT, float *hs, float *work, int nthreads) {
    const int npair = d->B * d->H;
    if (nthreads < 1) nthreads = 1;
    const size_t slice = ws_layout(d, chunk, 0, NULL, NULL);
    const in_t in = {d, q, k, v, g, beta, (size_t)d->H * d->dk, (size_t)d->H * d->dv};
#pragma omp parallel num_threads(nthreads)
    {
        float *base = work + (size_t)omp_get_thread_num() * slice;
        ws_t w;
        ws_layout(d, chunk, 0, base, &w);
        ws_zero(d, chunk, 0, base);
#pragma omp for schedule(static)
        for (int p = 0; p < npair; p++)
            fwd_pair(&in, chunk, p / d->H, p % d->H, h0, o, hT, hs, &w);
    }
}

/* ------------------------------------------------------------------------------------ */
/* backward                                                                              */

/* Pairwise (A, L) terms of one KDA chunk, VL key channels at a time with the row-r
 * accumulators in registers. With a = scale dA_rj (j <= r), l = beta_r dL_rj (j < r),
 * D = D_rj (cached by chunk_intra):
 *   dq_r += a D.k_j;  dk_r += l D.k_j;  dk_j += D.(a q_r + l k_r);
 *   the gate: t_rj = k_j.D.(a q_r + l k_r) is d/dG_r (and -d/dG_j), so it adds to dg_i
 *   for j < i <= r. Summed directly in that form, dg_i += sum_{r>=i} sum_{j<i} t_rj, as
 *   running row prefixes (acc after j is sum_{j'<=j} t_rj', added to dg_{j+1}): no
 *   +t/-t pair ever has to cancel in floating point. */
static void intra_bwd_kda(const in_t *in, int b, int h, int t0, int n, int C, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dkp = w->dkp;
    const float scale = d->scale;
    const float *dA = w->dAL, *dL = w->dAL + (size_t)n * C;
    float ac[64], lc[64];
    for (int r = 0; r < n; r++) {
        const float br = in->beta[rows(d, b, t0 + r, h)];
        float dbr = 0.f;
        for (int j = 0; j < r; j++) {
            const float dl = dL[(size_t)r * C + j];
            ac[j] = scale * dA[(size_t)r * C + j];
            lc[j] = br * dl;
            dbr = FMA(dl, w->Lr[(size_t)r * C + j], dbr);
        }
        w->dba[r] += dbr;
        const float ad = scale * dA[(size_t)r * C + r];
        const float *Dr = w->Dc + (size_t)r * (r + 1) / 2 * dkp;
        for (int c0 = 0; c0 < dkp; c0 += VL) {
            const vf q = vld(w->Qp + (size_t)r * dkp + c0), k = vld(w->Kp + (size_t)r * dkp + c0);
            vf aq = vld(w->dqa + (size_t)r * dkp + c0), ak = vld(w->dka + (size_t)r * dkp + c0);
            vf acc = q * 0.f;
            for (int j = 0; j < r; j++) {
                const vf D = vld(Dr + (size_t)j * dkp + c0);
                const vf kj = vld(w->Kp + (size_t)j * dkp + c0);
                const vf p = D * kj;
                aq = vfma(p, p * 0.f + ac[j], aq);
                ak = vfma(p, p * 0.f + lc[j], ak);
                const vf wv = D * vfma(q, q * 0.f + ac[j], k * lc[j]);
                float *dkj = w->dka + (size_t)j * dkp + c0;
                vst(dkj, vld(dkj) + wv);
                acc = vfma(kj, wv, acc);
                float *gj = w->dgi + (size_t)(j + 1) * dkp + c0;
                vst(gj, vld(gj) + acc);
            }
            /* j = r: D = 1, no gate dependence */
            aq = vfma(k, k * 0.f + ad, aq);
            ak = vfma(q, q * 0.f + ad, ak);
            vst(w->dqa + (size_t)r * dkp + c0, aq);
            vst(w->dka + (size_t)r * dkp + c0, ak);
        }
    }
}

/* GDN pairwise terms with Ea = scale dA . Gm (j <= r), El = Diag(beta) dL . Gm (j < r):
 *   dQ += Ea K;  dK += Ea^T Q + (El + El^T) K;  dbeta_r += sum_j dL_rj Lr_rj;
 *   M = Ea . QK + El . KK is d/dG_r (and -d/dG_j) of pair (r,j): summed into dg form
 *   directly (row prefixes, see intra_bwd_kda). Ea overwrites dA, El overwrites dL. */
static void intra_bwd_gdn(const in_t *in, int b, int h, int t0, int n, int C, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dkp = w->dkp;
    const float scale = d->scale;
    float *Ea = w->dAL, *El = w->dAL + (size_t)n * C;
    for (int r = 0; r < n; r++) {
        const float br = in->beta[rows(d, b, t0 + r, h)];
        float *ea = Ea + (size_t)r * C, *el = El + (size_t)r * C;
        const float *gm = w->Gm + (size_t)r * C, *qk = w->QK + (size_t)r * C,
                    *kk = w->KK + (size_t)r * C, *lr = w->Lr + (size_t)r * C;
        float dbr = 0.f;
        for (int j = 0; j < r; j++) dbr = FMA(el[j], lr[j], dbr);
        w->dba[r] += dbr;
        for (int j = 0; j <= r; j++) ea[j] = scale * ea[j] * gm[j];
        for (int j = 0; j < r; j++) el[j] = br * el[j] * gm[j];
        for (int j = r + 1; j < n; j++) ea[j] = 0.f;
        for (int j = r; j < n; j++) el[j] = 0.f;
        float acc = 0.f;
        for (int j = 0; j < r; j++) {
            acc += FMA(ea[j], qk[j], el[j] * kk[j]);
            w->dgs[j + 1] += acc;
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dk, n, 1.f, Ea, C, w->Kp, dkp, 1.f,
                w->dqa, dkp);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, dk, n, 1.f, Ea, C, w->Qp, dkp, 1.f,
                w->dka, dkp);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dk, n, 1.f, El, C, w->Kp, dkp, 1.f,
                w->dka, dkp);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, dk, n, 1.f, El, C, w->Kp, dkp, 1.f,
                w->dka, dkp);
}

typedef struct {
    const float *dO, *dhT;
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;
} grad_t;

static void bwd_pair(const in_t *in, int C, int b, int h, const float *h0, const float *hs_in,
                     const grad_t *gr, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int T = d->T, dk = d->dk, dv = d->dv, nc = nchunks(d, C), H = d->H, dkp = w->dkp;
    const size_t ss = (size_t)dk * dv, soff = ((size_t)b * H + h) * ss;
    const float scale = d->scale;
    const int kda = !d->scalar_gate;

    /* 1. chunk-start states: the caller's, or a forward scan */
    const float *hs;
    if (hs_in) {
        hs = hs_in + ((size_t)b * H + h) * nc * ss;
    } else {
        float *S = w->S;
        if (h0) memcpy(S, h0 + soff, ss * sizeof(float));
        else memset(S, 0, ss * sizeof(float));
        for (int ci = 0; ci < nc; ci++) {
            const int t0 = ci * C, n = T - t0 < C ? T - t0 : C;
            memcpy(w->hs + (size_t)ci * ss, S, ss * sizeof(float));
            if (ci == nc - 1) break; /* the last chunk's end state is not needed */
            chunk_gates(in, b, h, t0, n, w);
            chunk_intra(in, n, C, w, 0, NULL);
            chunk_delta(in, b, h, t0, n, C, S, w);
            chunk_state(d, n, S, w);
        }
        hs = w->hs;
    }

    /* 2. reverse over chunks */
    float *dS = w->dS;
    if (gr->dhT) memcpy(dS, gr->dhT + soff, ss * sizeof(float));
    else memset(dS, 0, ss * sizeof(float));
    for (int ci = nc - 1; ci >= 0; ci--) {
        const int t0 = ci * C, n = T - t0 < C ? T - t0 : C;
        const float *S = hs + (size_t)ci * ss;
        chunk_gates(in, b, h, t0, n, w);
        chunk_intra(in, n, C, w, 1, kda ? w->Dc : NULL);
        chunk_delta(in, b, h, t0, n, C, S, w);

        float *Yt = w->Y, *Yb = w->Y + (size_t)n * dv;
        for (int r = 0; r < n; r++)
            memcpy(Yt + (size_t)r * dv, gr->dO + rowv(d, b, t0 + r, h), (size_t)dv * sizeof(float));
        /* -dDl = -(A^T dO + Kg dS), then -dR by back substitution with (I+L)^T */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, dv, n, -1.f, w->A, C, Yt, dv,
                    0.f, Yb, dv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, -1.f, w->Kg, dk, dS,
                    dv, 1.f, Yb, dv);
        for (int j = n - 1; j >= 1; j--) {
            const float bj = in->beta[rows(d, b, t0 + j, h)];
            const float *l = w->Lr + (size_t)j * C;
            const float *restrict yj = Yb + (size_t)j * dv;
            for (int r = 0; r < j; r++) {
                const float c = -bj * l[r];
                float *restrict yr = Yb + (size_t)r * dv;
                for (int x = 0; x < dv; x++) yr[x] = FMA(c, yj[x], yr[x]);
            }
        }
        /* [dA ; dL] = Y Dl^T;  [dQs ; dKb] = Y S^T;  dKg = Dl dS^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 2 * n, n, dv, 1.f, w->Y, dv, w->Dl,
                    dv, 0.f, w->dAL, C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 2 * n, dk, dv, 1.f, w->Y, dv, S, dv,
                    0.f, w->dX, dk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, dk, dv, 1.f, w->Dl, dv, dS, dv,
                    0.f, w->dKg, dk);
        /* the e^{G_end} h term of the gate, then dS <- Diag(e^{G_end}) dS + [Qs;Kb]^T Y */
        for (int c = 0; c < dk; c++) {
            const float *s = S + (size_t)c * dv;
            float *ds = dS + (size_t)c * dv;
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (int j = 0; j < dv; j++) acc = FMA(s[j], ds[j], acc);
            const float e = w->eGend[c];
            w->eGH[c] = e * acc;
            for (int j = 0; j < dv; j++) ds[j] *= e;
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, dv, 2 * n, 1.f, w->X, dk, w->Y,
                    dv, 1.f, dS, dv);

        /* elementwise chains: Qs, Kb, Kg, beta.V. Gate terms: Qs and Kb give d/dG_r
         * (reverse-cumsummed below); Kg = K e^{G_end - G} gives +t to G_end and -t to G_r,
         * i.e. dg_i += sum_{r<i} t_r (a forward prefix below, no cancellation). */
        const float *dQs = w->dX, *dKb = w->dX + (size_t)n * dk;
        for (int r = 0; r < n; r++) {
            const float *qr = w->Qp + (size_t)r * dkp, *kr = w->Kp + (size_t)r * dkp;
            const float *vr = in->v + rowv(d, b, t0 + r, h);
            const float br = in->beta[rows(d, b, t0 + r, h)];
            const float *eG = w->eG + (size_t)r * dk, *eGk = w->eGk + (size_t)r * dk;
            const float *dqs = dQs + (size_t)r * dk, *dkb = dKb + (size_t)r * dk;
            float *dkg = w->dKg + (size_t)r * dk;
            float *dqa = w->dqa + (size_t)r * dkp, *dka = w->dka + (size_t)r * dkp,
                  *dGa = w->dGa + (size_t)r * dkp;
            float db = 0.f;
#pragma omp simd reduction(+ : db)
            for (int c = 0; c < dk; c++) {
                const float dqi = scale * eG[c] * dqs[c];
                const float ekb = eG[c] * dkb[c];
                const float dkbi = br * ekb;
                const float dkgi = eGk[c] * dkg[c];
                dqa[c] = dqi;
                dka[c] = dkbi + dkgi;
                dGa[c] = qr[c] * dqi + kr[c] * dkbi;
                dkg[c] = kr[c] * dkgi;
                db = FMA(kr[c], ekb, db);
            }
            const float *ybr = Yb + (size_t)r * dv;
            float *dvr = gr->dv + rowv(d, b, t0 + r, h);
            float dbv = 0.f;
#pragma omp simd reduction(+ : dbv)
            for (int j = 0; j < dv; j++) {
                dvr[j] = -br * ybr[j];
                dbv = FMA(vr[j], ybr[j], dbv);
            }
            w->dba[r] = db - dbv;
        }
        {
            float *dGl = w->dGa + (size_t)(n - 1) * dkp;
            for (int c = 0; c < dk; c++) dGl[c] += w->eGH[c];
        }
        /* pairwise terms of A and L */
        if (kda) {
            memset(w->dgi, 0, (size_t)n * dkp * sizeof(float));
            intra_bwd_kda(in, b, h, t0, n, C, w);
        } else {
            memset(w->dgs, 0, (size_t)n * sizeof(float));
            intra_bwd_gdn(in, b, h, t0, n, C, w);
        }
        /* dg_i = sum_{r>=i} dGa_r + sum_{r<i} Kg term_r + pairwise_i; write out */
        for (int r = n - 2; r >= 0; r--) {
            float *a = w->dGa + (size_t)r * dkp;
            const float *nx = w->dGa + (size_t)(r + 1) * dkp;
            for (int c = 0; c < dk; c++) a[c] += nx[c];
        }
        if (kda) {
            float *pre = w->eGH; /* reused: running prefix of the Kg term */
            memset(pre, 0, (size_t)dk * sizeof(float));
            for (int r = 0; r < n; r++) {
                const float *a = w->dGa + (size_t)r * dkp, *p = w->dgi + (size_t)r * dkp,
                            *kt = w->dKg + (size_t)r * dk;
                float *out = gr->dg + rowk(d, b, t0 + r, h);
                for (int c = 0; c < dk; c++) {
                    out[c] = a[c] + pre[c] + p[c];
                    pre[c] += kt[c];
                }
            }
        } else {
            float pre = 0.f;
            for (int r = 0; r < n; r++) {
                const float *a = w->dGa + (size_t)r * dkp, *kt = w->dKg + (size_t)r * dk;
                float sa = 0.f, sk = 0.f;
                for (int c = 0; c < dk; c++) {
                    sa += a[c];
                    sk += kt[c];
                }
                gr->dg[rows(d, b, t0 + r, h)] = sa + pre + w->dgs[r];
                pre += sk;
            }
        }
        for (int r = 0; r < n; r++) {
            memcpy(gr->dq + rowk(d, b, t0 + r, h), w->dqa + (size_t)r * dkp, (size_t)dk * sizeof(float));
            memcpy(gr->dk + rowk(d, b, t0 + r, h), w->dka + (size_t)r * dkp, (size_t)dk * sizeof(float));
            gr->dbeta[rows(d, b, t0 + r, h)] = w->dba[r];
        }
    }
    if (gr->dh0) memcpy(gr->dh0 + soff, dS, ss * sizeof(float));
}

void dm_delta_chunk_bwd(const dm_delta_dims *d, int chunk, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        const float *hs, const float *dO, const float *dhT, float *dq,
                        float *dk, float *dv, float *dg, float *dbeta, float *dh0, float *work,
                        int nthreads) {
    const int npair = d->B * d->H;
    if (nthreads < 1) nthreads = 1;
    const size_t slice = ws_layout(d, chunk, 1, NULL, NULL);
    const in_t in = {d, q, k, v, g, beta, (size_t)d->H * d->dk, (size_t)d->H * d->dv};
    const grad_t gr = {dO, dhT, dq, dk, dv, dg, dbeta, dh0};
#pragma omp parallel num_threads(nthreads)
    {
        float *base = work + (size_t)omp_get_thread_num() * slice;
        ws_t w;
        ws_layout(d, chunk, 1, base, &w);
        ws_zero(d, chunk, 1, base);
#pragma omp for schedule(static)
        for (int p = 0; p < npair; p++) bwd_pair(&in, chunk, p / d->H, p % d->H, h0, hs, &gr, &w);
    }
}
