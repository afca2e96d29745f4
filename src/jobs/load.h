/* load.h — the model of a checkpoint, with --set overrides (the eval and sample jobs). */
#ifndef DM_LOAD_H
#define DM_LOAD_H

#include "dormouse.h"
#include "jobs/job.h"

/* Resolve path (a run directory: its newest checkpoint; a checkpoint directory; a model
 * file), read its config, apply sets ("key=value"; the model keys must stay the
 * checkpoint's: dm_config_check_model), validate, set the threads, build the model and
 * load its parameters. The config into cfg and the checkpoint's step into step (when not
 * NULL). NULL with a bad-input status on failure. */
dm_model *dm_load_model(const char *path, const char *const *sets, int n_sets, dm_config *cfg,
                        long *step, dm_status *st);

#endif
