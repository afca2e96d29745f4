/* bf16.c — f32 to bf16: the upper 16 bits of the f32, rounded to nearest even (the
 * rounding of the products' operands in bf16 mixed precision). NaN stays a (quiet) NaN;
 * values beyond the largest bf16 round to infinity as f32 would. */
#include <string.h>

#include "backends/cpu/kernels/kernels.h"

#define BF16_PAR_MIN 65536 /* elements below which a parallel region does not pay */

void dm_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= BF16_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = dm_bf16_of(src[i]); /* NaN: quiet, kept */
}

void dm_bf16_from_f32_scaled(uint16_t *dst, const float *src, double scale, size_t n) {
#pragma omp parallel for schedule(static) if (n >= BF16_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        dst[i] = dm_bf16_of((float)((double)src[i] * scale));
    }
}

void dm_bf16_round(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= BF16_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)dm_bf16_of(src[i]) << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}
