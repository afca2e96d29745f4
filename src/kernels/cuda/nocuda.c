/* nocuda.c — the probe of a build without CUDA (CMake found no toolkit, or DM_CUDA=OFF),
 * for the programs that link the CUDA code directly (test_cuda, bench_cuda): every device
 * is unavailable, and says why. The rest of kernels/cuda/cuda.h is not built, and there is
 * no module (the command's answer is src/ops/cuda/probe.c's). */
#include "kernels/cuda/cuda.h"

const char *dm_cuda_unavailable(int device) {
    (void)device;
#if DM_CUDA_OFF
    return "this build has no CUDA (configured with DM_CUDA=OFF)";
#else
    return "this build has no CUDA (the CUDA toolkit was not found at configure time)";
#endif
}
