/* ckpt.h — checkpoints of a run (DESIGN.md section 6).
 *
 * A checkpoint is a directory RUN_DIR/ckpt-NNNNNNNN (NNNNNNNN = steps done) holding
 *   model.safetensors  the parameters, by tensor name; metadata: format, config (JSON), step
 *   optim.safetensors  optimizer state (flat buffers in the parameter layout) and step
 * It is written as ckpt-NNNNNNNN.tmp, every file fsynced, then renamed: a crash leaves
 * the previous checkpoint intact and never a half-written one. The two newest are kept. */
#ifndef DM_CKPT_H
#define DM_CKPT_H

#include <stddef.h>

#include "dormouse.h"
#include "optim/optim.h"

/* Save model (+ optimizer when opt != NULL) at `step` under run_dir. 0 ok. */
int dm_ckpt_save(const char *run_dir, dm_model *m, const dm_optim *opt, long step, char *err,
                 size_t errlen);

/* Resolve a user path: a run directory (its newest checkpoint), a checkpoint directory, or
 * a model file. Writes the path of the model file into out. 0 ok; 1 when nothing is there. */
int dm_ckpt_resolve(const char *path, char *out, size_t outlen, char *err, size_t errlen);

/* Read the config stored in a model file (as resolved). 0 ok. */
int dm_ckpt_read_config(const char *model_path, dm_config *cfg, long *step, char *err,
                        size_t errlen);

/* Load parameters into m (whose config must have the checkpoint's model keys:
 * dm_config_check_model), and the optimizer state (optim.safetensors beside the model
 * file) into opt when opt != NULL. */
int dm_ckpt_load(const char *model_path, dm_model *m, dm_optim *opt, char *err, size_t errlen);

#endif
