/* train_rundir.h — the run directory of a training run (train_rundir.c; rank 0 alone
 * touches it): the config, the lock, a fresh run or a resume, the checkpoints. */
#ifndef DM_TRAIN_RUNDIR_H
#define DM_TRAIN_RUNDIR_H

#include "jobs/train_ctx.h"

/* Rank 0: the config (defaults or the run's config.json; with --init-from the model keys
 * of its checkpoint, which the file and the sets must keep; then the file, then the
 * sets), checked; and the corpus paths: --data, else the run's data_path, else the
 * bundled one. */
int train_config(train_ctx *t);
/* Rank 0, once every rank is set up: the run directory (a fresh run's files, with a
 * fine-tuning run's parent.json and the parent's weights in the model, or the resumed
 * run's newest checkpoint that loads) and metrics.jsonl opened. */
int train_open_run(train_ctx *t);
/* The checkpoint after `done` steps when one is due; 1 when the run stops here (the
 * status set when not OK), else 0. */
int train_checkpoint(train_ctx *t, long done);
/* The run directory unlocked; left as it was found when the command failed before it
 * saved a checkpoint. */
void train_close_run(train_ctx *t);

#endif
