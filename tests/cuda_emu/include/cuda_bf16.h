/* cuda_bf16.h — bfloat16 under the CUDA emulator (docs/emulator.md): the type, as 16 bits,
 * and its conversions (round to nearest even; a NaN stays a NaN). */
#ifndef DM_EMU_CUDA_BF16_H
#define DM_EMU_CUDA_BF16_H
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) b.x = (uint16_t)((u >> 16) | 0x40u);
    else b.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
#endif
