/* cuda.h — the cuda backend's interface (docs/cuda.md section 5): device memory through
 * the CUDA runtime, its implementations of the ops over src/kernels/cuda, its execution
 * policy. It lives in the CUDA module (libdormouse-cuda.so), which hands these to the
 * host through its entry table (kernels/cuda/entry.h); src/ops/cuda/probe.c makes the
 * backend object from them. Nothing here refers to a symbol of libdormouse. */
#ifndef DM_BACKENDS_CUDA_H
#define DM_BACKENDS_CUDA_H

#include <stddef.h>

#include "ops/backend.h"
#include "ops/op.h"

/* the backend's calls (memory, policy, the op layer's questions) */
extern const dm_backend_vt dm_cuda_vt;
/* its implementations of every op [DM_OP_COUNT] (ops.c) */
extern const dm_impl_list *const dm_cuda_impls[DM_OP_COUNT];
/* its private state on device `device`: a stream, a cuBLASLt context, device scratch.
 * NULL with the reason in err. */
void *dm_cuda_backend_state(int device, char *err, size_t errlen);

#endif
