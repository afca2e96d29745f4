/* train.h — the training job (`dormouse train`, docs/architecture.md section 6). */
#ifndef DM_TRAIN_H
#define DM_TRAIN_H

#include "base/comm.h"
#include "dormouse.h"
#include "jobs/job.h"

typedef struct {
    const char *data;         /* corpus: file or directory; NULL: on resume the run's own
                                 (its data_path), else the bundled one (dm_data_path) */
    const char *val;          /* validation corpus (its last eval_window bytes; then every
                                 byte of data trains); NULL: on resume the run's own (its
                                 val_path, when it has one), else the tail of data */
    const char *out;          /* run directory */
    const dm_config *cfg;     /* a new run's config before config_file and sets (NULL: the
                                 defaults); on resume the run's config.json is */
    const char *config_file;  /* JSON object of config keys applied next (NULL: none) */
    const char *const *sets;  /* "key=value", applied last */
    int n_sets;
    int resume;               /* continue the run in `out` from its newest checkpoint */
    const char *init_from;    /* a new run that starts from the weights of this run
                                 directory (its newest checkpoint that loads), checkpoint
                                 directory or model file, with a fresh optimizer and
                                 schedule: fine-tuning (NULL: from the seed's init; not
                                 with resume). Its model keys replace cfg's;
                                 config_file and sets may only repeat them */
    long until;               /* > 0: stop (with a checkpoint) once this many steps are done */
    dm_comm *comm;            /* the ranks of a run under mpirun (NULL: one process); every
                                 rank calls dm_train with the same arguments */
    int locked;               /* the caller holds the lock of `out` (an A/B cell, locked by its
                                 sweep); else the job takes it (io/rundir.h) */
    double (*clock)(void *);  /* the wall clock, seconds, of the time budget and of ckpt_time
                                 (NULL: the monotonic clock); a test gives one of its own */
    void *clock_ctx;          /* its argument */
    int verify_data;          /* a prepared data directory: read its .bin files and check
                                 their CRC-32s against meta.json before training */
} dm_train_args;

/* Train. The config: cfg (or the defaults; on resume the run's config.json; with
 * init_from the model keys of its checkpoint), then config_file, then sets, validated;
 * on resume the model keys must stay the run's (dm_config_check_model), with init_from
 * its checkpoint's, and `out` records the parent (RUN/parent.json). Reports the set-up as notes, every step as a step event
 * (logged = it wrote a metrics line), then the dispatch counters, the atlas and the
 * summary. Returns OK when done (or stopped by `until`); bad input (config, corpus,
 * checkpoint, a run already in `out`, `out` in use by another writer, a resume at or
 * past `steps` or on another corpus); failed (NaN loss or gradient, verify bound, I/O);
 * interrupted when io->stop was set: it stops after the current step, with a checkpoint
 * (before the first step: without one). A command that fails before it saved a
 * checkpoint leaves `out` as it found it (io/rundir.h). */
dm_status dm_train(const dm_train_args *a, const dm_job_io *io);
/* Under mpirun (comm with N ranks) the run is data-parallel (jobs/step.h): rank 0 alone
 * touches the run directory; all ranks return the same status (the first failing rank's,
 * its message prefixed "rank R: "). */

#endif
