/* registry.c — the backends, one line each (ops/backend.h: dm_backend_reg): the name the
 * `backend` key takes, how it is made, and its implementations of the ops. The first is the
 * host's. A new backend adds its folder, a line here and, when it needs one, a build
 * line. */
#include "backends/cpu/cpu.h"
#include "backends/fenced/fenced.h"
#include "dormouse.h"

const dm_backend_reg dm_backend_regs[] = {
    {"cpu", DM_BACKEND_CPU, dm_backend_cpu_create, dm_cpu_impls, &dm_cpu_vt},
    {"fenced", DM_BACKEND_FENCED, dm_backend_fenced_create, dm_cpu_impls, NULL},
    {"cuda", DM_BACKEND_CUDA, dm_backend_cuda_create, NULL, NULL},
};
const int dm_backend_n_regs = (int)(sizeof dm_backend_regs / sizeof dm_backend_regs[0]);
