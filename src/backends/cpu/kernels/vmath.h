/* vmath.h — float math that gcc vectorizes (libm's expf/log1pf do not vectorize without
 * -ffast-math, which we never use), shared by the CPU kernels: the one FMA macro, the
 * scalar helpers of the elementwise kernels, and the explicit vector layer (GCC vector
 * extensions) of the chunked delta core. kernel_exp_accuracy
 * (tests/test_kernels.c) checks them element by element against libm in double. */
#ifndef DM_VMATH_H
#define DM_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a*b + c in one rounding where the target has FMA (gcc vectorizes fmaf there), else
 * two: the exps' reductions and polynomials, which run faster fused (docs/kernels.md) */
#ifdef __FMA__
#define VFMA(a, b, c) fmaf(a, b, c)
#else
#define VFMA(a, b, c) ((a) * (b) + (c))
#endif

/* e^x in plain C that gcc vectorizes (libm's expf does not vectorize without -ffast-math).
 * Cephes polynomial after x = n ln2 + r; 2^n applied as 2^n1 * 2^n2 so that underflow to
 * denormals and overflow to inf round correctly; no float-to-int conversion (n is read
 * from the bits of the rounded sum). Max error over every float with a normal result:
 * 0.99 ulp, 1.02 ulp with FMA (VFMA); e^x = inf above 88.72, 0 below -103.9, NaN stays
 * NaN. */
static inline float exp_v(float x) {
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = VFMA(x, 1.44269504088896341f, magic);
    float n = t - magic;
    union { float f; uint32_t u; } bt = {t}, s1, s2;
    uint32_t ni = bt.u - 0x4B400000u; /* n as two's complement, |n| <= 151 */
    float r = VFMA(n, 2.12194440e-4f, VFMA(n, -0.693359375f, x));
    float p = 1.9875691500e-4f;
    p = VFMA(p, r, 1.3981999507e-3f);
    p = VFMA(p, r, 8.3334519073e-3f);
    p = VFMA(p, r, 4.1665795894e-2f);
    p = VFMA(p, r, 1.6666665459e-1f);
    p = VFMA(p, r, 5.0000001201e-1f);
    p = VFMA(p * r, r, r) + 1.0f;
    uint32_t n1 = (uint32_t)((int32_t)ni >> 1), n2 = ni - n1; /* both in the normal range */
    s1.u = (n1 + 127u) << 23;
    s2.u = (n2 + 127u) << 23;
    return p * s1.f * s2.f;
}

/* e^x for the chunked delta core (delta_chunk.c), written so GCC vectorizes loops over it
 * (no libm call, no branches). Cody-Waite reduction to r in [-ln2/2, ln2/2], a minimax
 * degree-6 polynomial, 2^n from the exponent bits in one step. Max error 1.3 ulp on
 * [-88, 88]; 0 below -87.3 (the true value is < 1.2e-38: no denormal results); +inf above
 * 88.72; NaN stays NaN.
 * Why two exps: exp_v above rounds denormal results correctly and serves the elementwise
 * kernels; exp_cw is the scalar twin of the core's vector vexp (below), operation for
 * operation, so that the core's scalar and vector paths give the same bits. Their
 * polynomials differ in the last bits, so one cannot replace the other without changing
 * the results of the kernels that use it. */
static inline float exp_cw(float x) {
    const float shifter = 0x1.8p23f;
    float xc = x < -87.5f ? -87.5f : x;
    xc = xc > 88.5f ? 88.5f : xc;
    float t = VFMA(xc, 0x1.715476p+0f, shifter);
    float n = t - shifter;
    float r = VFMA(n, -0x1.62e43p-1f, xc);
    r = VFMA(n, 0x1.05c61p-29f, r);
    float p = 0x1.6850e4p-10f;
    p = VFMA(p, r, 0x1.123bccp-7f);
    p = VFMA(p, r, 0x1.555b98p-5f);
    p = VFMA(p, r, 0x1.55548ep-3f);
    p = VFMA(p, r, 0x1.fffff8p-2f);
    p = VFMA(p, r, 1.0f);
    p = VFMA(p, r, 1.0f);
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

/* stable logistic: one exp of -|x|, never overflows; 1/(1+e) for x >= 0, e/(1+e) below,
 * written as one division of the selected numerator (the same values) */
static inline float sigm(float x) {
    float e = exp_v(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* log(1 + t) for t in [0, 1] (vectorizes): 2 atanh(s), s = t / (2 + t) in [0, 1/3], series
 * to s^15; no cancellation for small t. Max error 2.8 ulp. */
static inline float log1p01(float t) {
    float s = t / (2.0f + t), z = s * s;
    float p = 1.0f / 15.0f;
    p = p * z + 1.0f / 13.0f;
    p = p * z + 1.0f / 11.0f;
    p = p * z + 1.0f / 9.0f;
    p = p * z + 1.0f / 7.0f;
    p = p * z + 1.0f / 5.0f;
    p = p * z + 1.0f / 3.0f;
    p = p * z + 1.0f;
    return 2.0f * s * p;
}

/* The 8-lane partial sums of the row kernels (norms, L2 norm, xent): s[0..7] combined in
 * one fixed order, so the result never depends on the thread count and vectorizes
 * without -ffast-math. */
static inline float sum8(const float s[8]) {
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* sum_i a[i]*b[i] with 8 independent partial sums, fixed order */
static inline float dot8(const float *a, const float *b, int n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    for (int j = 0; i < n; i++, j++) s[j] += a[i] * b[i];
    return sum8(s);
}

/* Prefetch the n floats at p, one cache line at a time: for the column-block loops of the
 * parameter gradients, which walk rows far apart (a 64-float block of a 256-float row
 * is 256 bytes every KiB), where the hardware prefetcher falls behind (the gate's
 * backward gains with the rows 8 ahead: docs/kernels.md). */
static inline void prefetch_floats(const float *p, int n) {
    for (int i = 0; i < n; i += 16) __builtin_prefetch(p + i);
}

/* Explicit SIMD for the chunked delta core (GCC/Clang vector extensions): VL lanes of the
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

typedef int32_t vi __attribute__((vector_size(VL * sizeof(float))));
static inline vf vsplat(float x) { return (vf){0} + x; }
static inline vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
#if VL == 16
/* exp on 16 lanes with AVX-512: n = round(x log2 e), r = x - n ln2 (two steps), the same
 * degree-6 polynomial as exp_cw, then p * 2^n by vscalefps, which underflows gradually
 * to 0 and overflows to +inf by itself (no clamps). Within 1.3 ulp of exp on the normal
 * range (measured against libm over [-200, 100]); NaN stays NaN, exp(-inf) = 0. */
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
/* exp_cw on VL lanes: the same operations in the same order, so the same bits. */
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

/* out[i] = sum of the lanes of v[i], i < 8: a transposing tree (24 shuffles and adds for
 * all eight, instead of 8 each) */
static inline void hsum8(const vf v[8], float out[8]) {
#if VL == 16
    vf w4[4], z[2];
    for (int p = 0; p < 4; p++)
        w4[p] = __builtin_shufflevector(v[2 * p], v[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17,
                                        18, 19, 20, 21, 22, 23) +
                __builtin_shufflevector(v[2 * p], v[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24,
                                        25, 26, 27, 28, 29, 30, 31);
    for (int q = 0; q < 2; q++)
        z[q] = __builtin_shufflevector(w4[2 * q], w4[2 * q + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17,
                                       18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(w4[2 * q], w4[2 * q + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20,
                                       21, 22, 23, 28, 29, 30, 31);
    const vf u = __builtin_shufflevector(z[0], z[1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24,
                                         25, 28, 29) +
                 __builtin_shufflevector(z[0], z[1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26,
                                         27, 30, 31);
    const vf f = __builtin_shufflevector(u, u, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12,
                                         14) +
                 __builtin_shufflevector(u, u, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13,
                                         15);
    float t[16];
    vst(t, f);
    memcpy(out, t, 8 * sizeof(float));
#else
    for (int i = 0; i < 8; i++) out[i] = hsum(v[i]);
#endif
}

#endif
