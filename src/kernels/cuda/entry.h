/* entry.h — the CUDA module's one entry point (docs/cuda.md section 2).
 *
 * The CUDA kernels, their runtime side, cuBLASLt and the cuda backend (src/backends/cuda)
 * live in a module of their own, libdormouse-cuda.so, that the dormouse command and
 * libdormouse load with dlopen only when a CUDA device answers (src/ops/cuda/loader.c).
 * Neither links a CUDA library: the module holds the static CUDA runtime and needs
 * libcublasLt.so, found through its rpath to the toolkit's lib/ or LD_LIBRARY_PATH.
 *
 * The module exports one symbol, DM_CUDA_ENTRY_SYMBOL, a function returning its table.
 * The table starts with its ABI number and size so that a loader refuses a module of
 * another dormouse before calling anything in it. A new entry goes at the end with
 * DM_CUDA_MODULE_ABI raised; so does a change of what the entries pass (the op layer's
 * dm_ops, the ops' argument structs, the policy). The module refers to no symbol of
 * libdormouse: what it needs from the host comes through its arguments. */
#ifndef DM_KERNELS_CUDA_ENTRY_H
#define DM_KERNELS_CUDA_ENTRY_H

#include <stddef.h>

#define DM_CUDA_MODULE_ABI 5
#define DM_CUDA_ENTRY_SYMBOL "dm_cuda_module_entry"

struct dm_backend_vt;
struct dm_impl_list;

typedef struct dm_cuda_module {
    int abi;          /* DM_CUDA_MODULE_ABI of the build that made it */
    size_t size;      /* sizeof(dm_cuda_module) there */
    const char *what; /* "CUDA 13.0 runtime (static), cuBLASLt 13.0.0" */
    /* cuda.h's probe, device name and error text (runtime.c) */
    const char *(*unavailable)(int device);
    void (*device_name)(int device, char *buf, size_t n);
    const char *(*error)(int err);
    /* the cuda backend (src/backends/cuda/cuda.h; ABI 2): its calls (ops/backend.h:
     * dm_backend_vt), its implementations of the ops [DM_OP_COUNT] (ops/op.h), and its
     * private state on device `device` (NULL with the reason in err) */
    const struct dm_backend_vt *backend_vt;
    const struct dm_impl_list *const *backend_impls;
    void *(*backend_state)(int device, char *err, size_t errlen);
} dm_cuda_module;

typedef const dm_cuda_module *(*dm_cuda_entry_fn)(void);

#endif /* DM_KERNELS_CUDA_ENTRY_H */
