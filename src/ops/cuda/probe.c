/* probe.c — the cuda backend's part in choosing a backend (backend.c): whether device N
 * can be used, and the refusal at model creation. The backend itself — device memory and
 * the op implementations over kernels/cuda — is not written yet (docs/cuda.md says what
 * exists); until it is, backend=cuda is refused with the reason and auto takes the CPU. */
#include <stdio.h>

#include "kernels/cuda/cuda.h"
#include "ops/backend.h"

const char *dm_backend_cuda_missing(int device) {
    const char *why = dm_cuda_unavailable(device);
    return why ? why
               : "a CUDA device is there and the CUDA kernels are built, but the cuda backend "
                 "that runs a training step on them is not written yet (docs/cuda.md)";
}

dm_backend *dm_backend_cuda_create(int device, char *err, size_t errlen) {
    if (err)
        snprintf(err, errlen, "backend=cuda (device=%d): %s; use backend=cpu", device,
                 dm_backend_cuda_missing(device));
    return NULL;
}
