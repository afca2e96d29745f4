/* host.h — the model's memory as code outside the backend reaches it (ops/backend.h,
 * docs/backends.md): the backend itself, to map or copy a buffer, and the whole parameter
 * or gradient buffer copied to or from host memory. The public API (dormouse.h) adds
 * copies by tensor name. */
#ifndef DM_MODEL_HOST_H
#define DM_MODEL_HOST_H

#include "dormouse.h"
#include "ops/buffer.h"

struct dm_backend;
/* dm_model_create for a job: threads > 0 is its share of the machine's cores (jobs/fair.h,
 * jobs/step.h), which the backend's policy takes in place of the config's `threads`
 * (the config the model keeps, and its checkpoints save, stays as asked). */
dm_model *dm_model_create_threads(const dm_config *cfg, int threads, char *err,
                                  size_t errlen);
/* The model's backend (chosen at creation from the `backend` key). */
struct dm_backend *dm_model_backend(const dm_model *m);
/* The parameters and gradients as the backend's memory: handles to pass to ops and to the
 * backend's calls (offset by a tensor's offset), never to dereference outside them. */
dm_bf *dm_model_param_mem(dm_model *m);
dm_bf *dm_model_grad_mem(dm_model *m);
/* dm_model_forward without reading the loss: the batch's mean loss is left in the double of
 * the backend's memory that dm_model_loss_mem returns (its value until the next forward),
 * so a step waits for the backend only when its caller reads it. 0; 1 when the batch's
 * memory could not be reserved. */
int dm_model_forward_queued(dm_model *m, const void *tokens, int B, int T);
const double *dm_model_loss_mem(const dm_model *m);
/* dm_model_forward_queued in its two parts: the batch's memory reserved and its ids put
 * into the backend's memory (queued; 0, or 1 as above); then the forward from them, which
 * reads nothing else from the host (a backend can capture it once and replay it after each
 * batch's put). */
int dm_model_put_batch(dm_model *m, const void *tokens, int B, int T);
void dm_model_forward_put(dm_model *m);
/* The host's side of dm_model_forward_put and of dm_model_backward when their work was
 * replayed from a capture instead (the model then has a forward for the backward to
 * consume; then it has consumed it). */
void dm_model_forward_replayed(dm_model *m);
void dm_model_backward_replayed(dm_model *m);
/* A count that changes whenever the model's activation memory is laid out again (a batch
 * of another shape): work captured before then reads memory that moved. */
long dm_model_layout_gen(const dm_model *m);
/* its op layer's counts (ops.h: dm_ops_counts, DM_OPS_COUNTS longs), and counts added */
void dm_model_op_counts(const dm_model *m, long *out);
void dm_model_op_counts_add(dm_model *m, const long *delta);

#endif
