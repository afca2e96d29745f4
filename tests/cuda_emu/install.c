/* install.c — for the programs that run the cuda backend on the CUDA emulator (the test of
 * whole steps, and the command built as dormouse_emu): they carry the CUDA module's code
 * (the translated kernels, src/backends/cuda and its entry) and hand its table to the
 * loader before main, so backend=cuda makes a model on emulated device memory. */
#include "kernels/cuda/entry.h"
#include "ops/cuda/loader.h"

const dm_cuda_module *dm_cuda_module_entry(void); /* src/backends/cuda/entry.c */

__attribute__((constructor)) static void dm_emu_install_cuda_module(void) {
    dm_cuda_module_install(dm_cuda_module_entry());
}
