/* entry.c — the CUDA module's entry point (kernels/cuda/entry.h): built into
 * libdormouse-cuda.so (and into the emulator's test programs, which hand the table to the
 * loader themselves: tests/cuda_emu). */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "backends/cuda/cuda.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/entry.h"

static char what[96];

static const dm_cuda_module table = {
    .abi = DM_CUDA_MODULE_ABI,
    .size = sizeof(dm_cuda_module),
    .what = what,
    .unavailable = dm_cuda_unavailable,
    .device_name = dm_cuda_device_name,
    .error = dm_cuda_error,
    .backend_vt = &dm_cuda_vt,
    .backend_impls = dm_cuda_impls,
    .backend_state = dm_cuda_backend_state,
};

__attribute__((visibility("default"))) const dm_cuda_module *dm_cuda_module_entry(void) {
    size_t lt = cublasLtGetVersion(); /* major*10000 + minor*100 + patch */
    snprintf(what, sizeof what, "CUDA runtime %d.%d (static), cuBLASLt %zu.%zu.%zu",
             CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, lt / 10000, lt / 100 % 100,
             lt % 100);
    return &table;
}
