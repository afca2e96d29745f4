/* host.h — the model's memory as code outside the backend reaches it (ops/backend.h,
 * docs/backends.md): the backend itself, to map or copy a buffer, and the whole parameter
 * or gradient buffer copied to or from host memory. The public API (dormouse.h) adds
 * copies by tensor name. */
#ifndef DM_MODEL_HOST_H
#define DM_MODEL_HOST_H

#include "dormouse.h"

struct dm_backend;
/* The model's backend (chosen at creation from the `backend` key). */
struct dm_backend *dm_model_backend(const dm_model *m);
/* The parameters and gradients as the backend's memory: handles to pass to ops and to the
 * backend's calls (offset by a tensor's offset), never to dereference outside them. */
float *dm_model_param_mem(dm_model *m);
float *dm_model_grad_mem(dm_model *m);

#endif
