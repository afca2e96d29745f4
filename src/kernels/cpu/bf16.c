/* bf16.c — f32 to bf16: the upper 16 bits of the f32, rounded to nearest even (the
 * rounding of the products' operands in bf16 mixed precision). NaN stays a (quiet) NaN;
 * values beyond the largest bf16 round to infinity as f32 would. */
#include <string.h>

#include "kernels/cpu/kernels.h"

#define BF16_PAR_MIN 65536 /* elements below which a parallel region does not pay */

static inline uint32_t rne16(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u; /* NaN: quiet, kept */
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

void dm_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= BF16_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        dst[i] = (uint16_t)rne16(u);
    }
}

void dm_bf16_from_f32_scaled(uint16_t *dst, const float *src, double scale, size_t n) {
#pragma omp parallel for schedule(static) if (n >= BF16_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = (float)((double)src[i] * scale);
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        dst[i] = (uint16_t)rne16(u);
    }
}

void dm_bf16_round(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= BF16_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        u = rne16(u) << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}
