/* cuda_runtime.h — what a .cu file sees under the CUDA emulator (tests/cuda_emu,
 * docs/emulator.md): the runtime's C API and, in C++, the device side (emu.h). */
#ifndef DM_EMU_CUDA_RUNTIME_H
#define DM_EMU_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "emu.h"
#endif
#endif
