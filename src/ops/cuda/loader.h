/* loader.h — finding a CUDA device and loading the CUDA module (docs/cuda.md section 2),
 * without linking any CUDA library: the driver (libcuda.so.1) and the module
 * (libdormouse-cuda.so, kernels/cuda/entry.h) are opened with dlopen when asked for.
 *
 * Where the module is looked for, first match only:
 *   1. $DM_CUDA_MODULE, when set and not empty: the module's path (nothing else is tried);
 *   2. beside the running program (/proc/self/exe's folder): the build tree, where
 *      build/dormouse and build/libdormouse-cuda.so sit together;
 *   3. DM_CUDA_MODULE_RELDIR from the program's folder (../lib/dormouse): an install
 *      moved to another prefix (`cmake --install build --prefix P`) finds its own;
 *   4. DM_CUDA_MODULE_DIR (PREFIX/lib/dormouse of the configure), where `make install`
 *      puts it: programs of other folders linked with libdormouse find it there. */
#ifndef DM_OPS_CUDA_LOADER_H
#define DM_OPS_CUDA_LOADER_H

#include <stddef.h>

#include "kernels/cuda/entry.h"

#define DM_CUDA_MODULE_FILE "libdormouse-cuda.so"

/* NULL when the NVIDIA driver answers and shows device `device`; else why not, one line
 * (no driver, the driver's error, no device, the index out of range). Loads libcuda.so.1
 * (the driver's library, not the toolkit's) once; loads no module. */
const char *dm_cuda_driver_missing(int device);

/* The module's path by the order above into buf; *found = 1 when a file is there
 * (always 1 for $DM_CUDA_MODULE: loading it says whether it is). */
const char *dm_cuda_module_path(char *buf, size_t n, int *found);

/* The module at `path`: dlopen, the entry symbol, the ABI and size checked. NULL with the
 * reason in why (naming the path). Each call opens it anew (dlopen counts references). */
const dm_cuda_module *dm_cuda_module_open(const char *path, char *why, size_t n);

/* The module by the search order, loaded once per process and kept; NULL with the reason
 * (*why, constant for the process) when it cannot be loaded. */
const dm_cuda_module *dm_cuda_module_load(const char **why);

/* A program that carries the module's code in itself (the CUDA emulator's test programs,
 * tests/cuda_emu) hands its table here before any backend is made; from then on
 * dm_cuda_module_installed answers it and the probe opens no driver and no module. */
void dm_cuda_module_install(const dm_cuda_module *m);
const dm_cuda_module *dm_cuda_module_installed(void);

#endif /* DM_OPS_CUDA_LOADER_H */
