/* train_ctx.h — the context the rooms of the training job (jobs/train.h) share, and the
 * few helpers they all use (train_ctx.c). The rooms, each calling only those below it:
 *
 *   train_loop.c    the job: set-up, the step loop, one step, a fallback's second run
 *   train_rundir.h  the run directory: the config, the lock, resume, the checkpoints,
 *                   a fine-tuning run's parent
 *   train_report.h  what the run tells: the set-up notes, metrics.jsonl, the step events
 *                   and the evaluations on their cadence, the summary
 *   train_budget.h  time_budget: the steps fixed from the measured rate, a slowed run cut
 *   train_ranks.h   the ranks under mpirun: agreement, the config and state sent out
 *
 * Each room keeps its own state in one member of train_ctx; the rest of the context is
 * the run itself (config, corpus, model, optimizer, the step's numbers). Every function
 * that can fail sets the status (dm_fail) and returns its code, 0 when it is OK. */
#ifndef DM_TRAIN_CTX_H
#define DM_TRAIN_CTX_H

#include "base/comm.h"
#include "io/data.h"
#include "io/history.h" /* the contention probe */
#include "io/linelog.h"
#include "io/rundir.h"
#include "jobs/budget.h"
#include "jobs/plan.h"  /* dm_memory */
#include "jobs/step.h"
#include "jobs/train.h"
#include "ops/atlas.h"
#include "optim/optim.h"

/* the ranks of the run (train_ranks.c) */
typedef struct {
    dm_comm *comm;        /* NULL: one process */
    int rank, n;
    int stop;             /* a stop asked for, agreed by every rank */
} train_ranks_state;

/* the run directory (train_rundir.c, rank 0): locked while we write it; undone when we
 * fail before saving a checkpoint */
typedef struct {
    dm_rundir rd;
    int rd_open;
    long last_ckpt;       /* the step of the newest checkpoint in the run; -1: none */
    int saved;            /* this invocation saved a checkpoint */
    double wall_before;   /* a resumed run's wall time before this invocation */
    double ckpt_mark, ckpt_s; /* the last checkpoint's end; the time spent saving them */
    int n_ckpt;
    /* A resume is on probation (docs/robustness.md) from the checkpoint it loaded (step
     * `start`) until a step after the first checkpoint it saves is finite. Meanwhile the
     * checkpoint before the loaded one is not pruned, and a non-finite step falls back to
     * it (one process) or stops with it kept. */
    int probation;
    long fallback;        /* the step of the checkpoint before the loaded one; -1: none */
    long first_saved;     /* the first checkpoint this invocation saved; -1: none yet */
    long upto;            /* > 0: resume from a checkpoint of at most this step */
    long *fall_to;        /* set to `fallback` when a step falls back; NULL: none may */
    int fell_back;        /* this invocation is a fallback's */
} train_rundir_state;

/* the model a fine-tuning run starts from (train --init-from; train_rundir.c, rank 0):
 * a fresh run's from --init-from, a resumed run's from its parent.json */
struct dm_ckpt;
typedef struct {
    char path[4096];      /* as named, absolute ("": the run starts from the seed's init) */
    char model[4200];     /* the model file of the checkpoint its weights come from */
    long step;            /* that checkpoint's step */
    uint32_t crc;         /* the CRC-32 of that model file */
    struct dm_ckpt *ck;   /* a fresh run: the checkpoint, open from the config until its
                             weights are in the model */
} train_parent_state;

/* the time budget and ckpt_time, on the job's clock (train_clock) (train_budget.c) */
typedef struct {
    double t_job;         /* when the job began (time_budget counts from it) */
    int budgeted;         /* a fresh run with a time_budget */
    long fit_at;          /* time_budget: steps are fixed after this step (0: not pending) */
    double fit_dt[DM_BUDGET_MEASURE]; /* the measured steps' times, seconds */
    double mark, excluded; /* the last step's end; evaluation and checkpoint time since */
    double recent[DM_BUDGET_WINDOW]; /* the last steps' times (a ring) */
    int n_recent;
    double eval_s;        /* the last evaluation's time */
} train_budget_state;

/* what the run reports (train_report.c) */
typedef struct {
    dm_linelog metrics;   /* metrics.jsonl, appended (rank 0; fd -1 when not open) */
    int metrics_behind;   /* lines wait in memory for the disk (noted once) */
    long metrics_lost;    /* the step whose line could not even be kept; 0: none */
    dm_atlas *atlas;      /* atlas=1, else NULL */
    long atlas_from;      /* the atlas counts from this step (after two warm-up steps) */
    dm_memory mem;        /* the memory of a training step (batch_size x seq_len) */
    /* since the last metrics line */
    double interval_t, loss_sum;
    int interval_n;
    /* the whole run */
    double t_start, t_train, last_bpb, verify_worst, last_tick;
    long val_step;        /* the step last_bpb was measured at */
    dm_probe probe;       /* was the machine busy while we trained (history.h) */
    char verify_what[64];
    int eval_cut;         /* the last evaluation was cut short by a stop */
    double *step_ms;      /* this invocation's step times, ms (the drift; NULL: none kept) */
    long n_step_ms, cap_step_ms;
} train_report_state;

typedef struct {
    const dm_train_args *a;
    const dm_job_io *io;
    dm_status *st;
    dm_config cfg;
    char data[4096];      /* the corpus path */
    char val[4096];       /* the validation corpus ("": the tail of data) */
    int nthreads;
    dm_corpus corpus;
    dm_model *m;
    dm_optim *opt;
    dm_stepper stepper;   /* the step over micro-batches and ranks */
    long start;           /* steps done before this invocation (resume) */
    /* this step */
    float loss, lr;
    double gnorm, vrel;   /* vrel: the verify difference, -1 when not verified */
    double t0;            /* its start */
    train_ranks_state ranks;
    train_rundir_state run;
    train_parent_state parent;
    train_budget_state bud;
    train_report_state rep;
} train_ctx;

/* now on the job's clock: the args' (a test's) or the monotonic one */
double train_clock(const train_ctx *t);
/* What a failure keeps (the newest checkpoint, or the directory as it was), for its
 * message. */
const char *train_kept(const train_ctx *t, char *buf, size_t n);
/* dir/name <- text, atomically */
int train_write_file(const char *dir, const char *name, const char *text, char *err,
                     size_t errlen);
/* config.json of the run: rank 0 writes it (after set-up, and when the budget changed
 * steps); the others return 0. */
int train_write_config(train_ctx *t);

#endif
