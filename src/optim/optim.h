/* optim.h — the optimizer of a run: parameter groups (which tensor gets AdamW or Muon,
 * at which lr and weight decay), the lr schedule, global-norm clipping, the update, and
 * its state for checkpoints (docs/architecture.md section 5). */
#ifndef DM_OPTIM_H
#define DM_OPTIM_H

#include <stdio.h>

#include "base/comm.h"
#include "dormouse.h"
#include "optim/common.h"

typedef struct dm_optim dm_optim;

dm_optim *dm_optim_create(dm_model *m, const dm_config *c, char *err, size_t errlen);
void dm_optim_free(dm_optim *o);
const dm_group *dm_optim_group(const dm_optim *o, int tensor);
/* One line per tensor: name, shape, optimizer, lr, weight decay. */
void dm_optim_print_groups(const dm_optim *o, const dm_model *m, FILE *f);

/* lr multiplier at 0-based step: linear warmup, then cosine / wsd / constant to
 * min_lr_frac over `steps`; when schedule_steps > steps (a run a time budget cut), the
 * schedule over schedule_steps until dm_lr_cooldown_start(steps), then a linear cooldown
 * from its lr there to min_lr_frac at the last step. A step's lr depends on steps only
 * through that: before the cooldown starts it is the same for every steps. */
float dm_lr_factor(const dm_config *c, long step);
/* The first step of the cooldown of a cut run of `steps`: its last ceil(steps / 10). */
long dm_lr_cooldown_start(long steps);
/* Global L2 norm of the gradients, summed in double in a fixed order (the op grad_norm). */
double dm_grad_norm(const dm_model *m);

/* One update at 0-based step from the gradients in m: clip by global norm (grad_clip),
 * then AdamW / Muon per group. Returns the gradient norm before clipping; NAN when the
 * exchange between ranks failed (dm_comm_error). */
double dm_optim_step(dm_optim *o, dm_model *m, long step);
/* The same without waiting for the backend: the norm and the clipping factor stay in its
 * memory, where the updates read them; dm_optim_norm reads the norm (waiting). 0, or 1
 * when the exchange between ranks failed. */
int dm_optim_step_queued(dm_optim *o, dm_model *m, long step);
/* dm_optim_step_queued in its two parts: the step's values (the learning rates, decays and
 * Adam's bias corrections of step `step`) put into the backend's memory, queued; then the
 * update's work, which reads them there and asks the host for nothing that changes from
 * step to step but whether Muon retracts (step % retract_every): a backend can capture that
 * work once (per retraction case) and replay it after each step's dm_optim_prepare. */
void dm_optim_prepare(dm_optim *o, long step);
/* 1 when step `step`'s update retracts (Muon's retraction on its cadence) */
int dm_optim_retracts(const dm_optim *o, long step);
int dm_optim_enqueue(dm_optim *o, dm_model *m, long step);
double dm_optim_norm(const dm_optim *o);
/* where the last step left the norm: one double of the backend's memory */
const double *dm_optim_norm_mem(const dm_optim *o);
/* The schedule's length, `steps` (train's time budget fixes it after measuring steps). */
void dm_optim_set_steps(dm_optim *o, int steps, int schedule_steps);

/* Share Muon's work among the ranks of comm (NULL: one process, the default), by the
 * fixed rule of muon.c; every rank must hold the same gradients at each step (gradsum.h)
 * and ends it with the same parameters and state. 0 ok, else err (out of memory). */
int dm_optim_set_comm(dm_optim *o, dm_comm *comm, char *err, size_t errlen);
/* One line: Muon's units per rank and their NS GFLOP ("muon: 36 units on 2 ranks: ..."). */
void dm_optim_shard_text(const dm_optim *o, char *buf, size_t n);

/* Time Muon's all-gather among ranks into atlas; NULL turns it off. (The optimizer's ops,
 * adamw, ns, retract, ..., run on the model's op layer and are timed with its atlas,
 * dm_model_set_atlas.) */
struct dm_atlas;
void dm_optim_set_atlas(dm_optim *o, struct dm_atlas *atlas);


/* The bytes the optimizer allocates in large buffers: its state (the buffers of
 * dm_optim_state), its scratch (Muon's update buffer, Newton-Schulz and Stiefel work) and
 * the buffer its units are all-gathered through among ranks (0 in one process). oneDNN's
 * own scratch for bf16 Newton-Schulz (ns_precision=bf16) is oneDNN's and not counted. */
typedef struct {
    size_t state, scratch, gather;
} dm_optim_mem;
void dm_optim_memory(const dm_optim *o, dm_optim_mem *mem);

/* Fill out[0..max) with the state buffers (optim/common.h); returns how many. */
int dm_optim_state(const dm_optim *o, dm_optim_buf *out, int max);
/* Load the buffer `name` from src[0..n) (src NULL: zeros). 0 ok; else err (no such buffer,
 * another size). */
int dm_optim_load(dm_optim *o, const char *name, const float *src, size_t n, char *err,
                  size_t errlen);

#endif
