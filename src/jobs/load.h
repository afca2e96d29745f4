/* load.h — the model of a checkpoint, with --set overrides, and the run it came from (the
 * eval and sample jobs). */
#ifndef DM_LOAD_H
#define DM_LOAD_H

#include "dormouse.h"
#include "jobs/job.h"

/* The config keys eval and sample read (besides the model keys, which must stay the
 * checkpoint's): NULL-terminated lists, the one source of `--help` and of the refusals. */
extern const char *const DM_EVAL_KEYS[];
extern const char *const DM_SAMPLE_KEYS[];

/* Resolve path (a run directory: its newest checkpoint; a checkpoint directory; a model
 * file), read its config, apply sets ("key=value"; a key must be a model key equal to the
 * checkpoint's (dm_config_check_model) or one of `usable`; any other is refused as doing
 * nothing for `cmd`), validate, set the threads, build the model and load its parameters.
 * The config into cfg, the checkpoint's step into step and its model file into model_path
 * (each when not NULL; model_path holds 4096 bytes). NULL with a bad-input status. */
dm_model *dm_load_model(const char *path, const char *const *sets, int n_sets,
                        const char *cmd, const char *const *usable, dm_config *cfg, long *step,
                        char *model_path, dm_status *st);

/* The run directory a model file belongs to (RUN/ckpt-NNNNNNNN/model.safetensors, with
 * RUN/config.json) into run; 0 found, 1 not (a loose model file). */
int dm_load_run_dir(const char *model_path, char *run, size_t n);

#endif
