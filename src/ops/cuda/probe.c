/* probe.c — the cuda backend's part in choosing a backend (backend.c): whether device N
 * can be used, and the refusal at model creation. In order: a build with the CUDA module,
 * the NVIDIA driver and the device (loader.c, no CUDA library loaded), the module
 * (loaded only then), and the module's own probe (the runtime against the driver, the
 * compute capability). The backend itself — device memory and the op implementations
 * over kernels/cuda — is not written yet (docs/cuda.md says what exists); until it is,
 * backend=cuda is refused with the reason and auto takes the CPU. */
#include <stdio.h>

#include "ops/backend.h"
#include "ops/cuda/loader.h"

const char *dm_backend_cuda_missing(int device) {
#if !DM_HAVE_CUDA
    (void)device;
#if DM_CUDA_OFF
    return "this build has no CUDA (configured with DM_CUDA=OFF)";
#else
    return "this build has no CUDA (the CUDA toolkit was not found at configure time)";
#endif
#else
    const char *why = dm_cuda_driver_missing(device);
    if (why) return why;
    const dm_cuda_module *m = dm_cuda_module_load(&why);
    if (!m) return why;
    why = m->unavailable(device);
    return why ? why
               : "a CUDA device is there and the CUDA kernels are built, but the cuda backend "
                 "that runs a training step on them is not written yet (docs/cuda.md)";
#endif
}

dm_backend *dm_backend_cuda_create(int device, char *err, size_t errlen) {
    if (err)
        snprintf(err, errlen, "backend=cuda (device=%d): %s; use backend=cpu", device,
                 dm_backend_cuda_missing(device));
    return NULL;
}
