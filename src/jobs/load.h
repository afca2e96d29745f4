/* load.h — the model of a checkpoint, with --set overrides, and the run it came from (the
 * eval and sample jobs); the newest checkpoint of a run that loads (those and train
 * --resume). */
#ifndef DM_LOAD_H
#define DM_LOAD_H

#include "dormouse.h"
#include "io/ckpt.h"
#include "jobs/job.h"

/* The config keys eval and sample read (besides the model keys, which must stay the
 * checkpoint's): NULL-terminated lists, the one source of `--help` and of the refusals. */
extern const char *const DM_EVAL_KEYS[];
extern const char *const DM_SAMPLE_KEYS[];

/* The checkpoints of a user path, newest first, each read and checked (dm_ckpt_open):
 * a run directory's, or the one a checkpoint directory or model file names. One that
 * does not read, or that the caller finds damaged (dm_ckpt_skip), is passed over, so a
 * damaged newest checkpoint falls back to the one before it. So is one of a run directory
 * whose model keys are not those of the run's config.json (not a checkpoint of that run:
 * train --resume, eval and sample all pass over it alike). Once one loads
 * (dm_ckpt_loaded), each one passed over gets a warning line naming it and why. */
typedef struct {
    const char *path;
    int with_optim;     /* also read and check optim.safetensors */
    long upto;          /* > 0: checkpoints of later steps are passed over (a fallback) */
    int k;              /* the next candidate */
    int skipped;
    char model_path[4200]; /* the model file of the checkpoint returned last */
    char first[2048];   /* why the newest one was passed over */
    char notes[8192];   /* the warning lines of the ones passed over */
    int run_read;       /* the run directory's config.json was looked for */
    int has_run;        /* it was read: run holds its model keys */
    dm_config run;
} dm_ckpt_iter;

/* The next checkpoint that reads and checks (the caller closes it), or NULL when none is
 * left, with a bad-input status: nothing there, or none of them loads (the newest's
 * error, and how many older ones failed too). */
dm_ckpt *dm_ckpt_next(dm_ckpt_iter *it, dm_status *st);
/* The checkpoint returned last is damaged (why: the loader's error): go on. */
void dm_ckpt_skip(dm_ckpt_iter *it, const char *why);
/* The checkpoint returned last loaded: warn about those passed over. */
void dm_ckpt_loaded(dm_ckpt_iter *it, const dm_job_io *io);

/* The newest checkpoint of path that loads (a run directory's, a checkpoint directory, a
 * model file: dm_ckpt_next), its config, the sets applied ("key=value"; a key must be a
 * model key equal to the checkpoint's (dm_config_check_model) or one of `usable`; any
 * other is refused as doing nothing for `cmd`), validated; the model built on the job's
 * share of the cores (dm_fair_threads: of the ranks of comm on this machine, NULL for one
 * process) and its parameters loaded. The config into cfg, the checkpoint's step into
 * step and its model file into model_path (each when not NULL; model_path holds 4096
 * bytes); the checkpoints passed over as warnings through io. NULL with a bad-input
 * status. */
dm_model *dm_load_model(const char *path, const char *const *sets, int n_sets,
                        const char *cmd, const char *const *usable, dm_config *cfg, long *step,
                        char *model_path, const dm_comm *comm, const dm_job_io *io,
                        dm_status *st);

/* The run directory a model file belongs to (RUN/ckpt-NNNNNNNN/model.safetensors, with
 * RUN/config.json) into run; 0 found, 1 not (a loose model file). */
int dm_load_run_dir(const char *model_path, char *run, size_t n);

#endif
