/* probe.c — the cuda backend's part in choosing a backend (backend.c): whether device N
 * can be used, and the backend object. In order: a module handed over by the program
 * itself (the emulator's tests, loader.h); else a build with the CUDA module, the NVIDIA
 * driver and the device (loader.c, no CUDA library loaded), the module (loaded only then),
 * and the module's own probe (the runtime against the driver, the compute capability). The
 * backend's memory, policy and op implementations are the module's (src/backends/cuda);
 * this file makes the backend object from its table. backend=auto keeps the CPU: the
 * cuda backend has run on the CUDA emulator only, never on a GPU (docs/cuda.md). */
#include <stdio.h>

#include "ops/backend.h"
#include "ops/cuda/loader.h"

/* the module whose backend can run on device `device`, or NULL with the reason */
static const dm_cuda_module *module_for(int device, const char **why) {
    const dm_cuda_module *m = dm_cuda_module_installed();
    if (!m) {
#if !DM_HAVE_CUDA
        (void)device;
#if DM_CUDA_OFF
        *why = "this build has no CUDA (configured with DM_CUDA=OFF)";
#else
        *why = "this build has no CUDA (the CUDA toolkit was not found at configure time)";
#endif
        return NULL;
#else
        if ((*why = dm_cuda_driver_missing(device))) return NULL;
        if (!(m = dm_cuda_module_load(why))) return NULL;
#endif
    }
    *why = m->unavailable(device);
    return *why ? NULL : m;
}

const char *dm_backend_cuda_missing(int device) {
    const char *why = NULL;
    if (!module_for(device, &why)) return why;
    return "a CUDA device is there, but backend=auto keeps the CPU until the cuda backend "
           "has run on a GPU (it has run on the CUDA emulator only); ask for backend=cuda";
}

dm_backend *dm_backend_cuda_create(int device, char *err, size_t errlen) {
    const char *why = NULL;
    const dm_cuda_module *m = module_for(device, &why);
    if (!m) {
        if (err)
            snprintf(err, errlen, "backend=cuda (device=%d): %s; use backend=cpu", device, why);
        return NULL;
    }
    void *st = m->backend_state(device, err, errlen);
    if (!st) return NULL;
    dm_backend *be = dm_backend_make(dm_backend_reg_of(DM_BACKEND_CUDA), DM_MEM_CUDA,
                                     m->backend_vt, st, err, errlen);
    if (!be) return NULL; /* out of memory: the state is left (once per process) */
    be->impls = m->backend_impls;
    return be;
}
