/* vmath.h — float math that gcc vectorizes (libm's expf/log1pf do not vectorize without
 * -ffast-math, which we never use): shared by the elementwise kernels. kernel_exp_accuracy
 * (tests/test_kernels.c) checks them element by element against libm in double. */
#ifndef DM_VMATH_H
#define DM_VMATH_H

#include <math.h>
#include <stdint.h>

/* a*b + c in one rounding where the target has FMA (gcc vectorizes fmaf there), else
 * two: exp_v's reduction and polynomial (one thread, 1M elements: silu forward 0.76 ->
 * 0.52 ns per element, sigmoid 0.72 -> 0.50, SwiGLU backward 1.07 -> 0.89) */
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
 * backward, d2 shapes: 4.3 -> 2.7 ms with the rows 8 ahead). */
static inline void prefetch_floats(const float *p, int n) {
    for (int i = 0; i < n; i += 16) __builtin_prefetch(p + i);
}

#endif
