/* bench.h — the step benchmark (`dormouse bench`, docs/architecture.md sections 7 and 9) and the
 * small pieces every benchmark program (bench/) shares: the contention flags of a history
 * row and the probe note (medians and spreads: base/stats.h). Results are reported with
 * dm_history_report. */
#ifndef DM_BENCH_H
#define DM_BENCH_H

#include <stdio.h>

#include "base/comm.h"
#include "base/stats.h"
#include "dormouse.h"
#include "io/history.h"
#include "jobs/job.h"

/* The flags column of a timing bracketed by the probe: "contended,WORDS" (WORDS from
 * dm_probe_flags_text, e.g. "contended,load,others") when the probe flagged it, else "". */
void dm_bench_flags(const dm_probe_result *r, char *buf, size_t n);

/* One line on the probe reading (load, other processes' cores, steal) for a '#' note. */
void dm_bench_probe_note(const dm_probe_result *r, char *buf, size_t n);

typedef struct {
    const char *data;               /* corpus: a file (plain or gzip) or a directory; NULL:
                                       the bundled one (dm_data_path) */
    int reps;                       /* timed repetitions per arm, >= 1 (after one warm-up) */
    const char *history;            /* append the rows to this file too; NULL: print only */
    const char *const *sets;        /* the arm: the defaults with these "key=value" */
    int n_sets;
    const char *const *baseline;    /* the baseline: the arm with these "key=value" */
    int n_baseline;                 /* 0: kda_impl=reference (the reference core) */
    int memory;                     /* also each arm's memory (dm_memory_line) and rows */
    int verify_data;                /* a prepared data directory: check its CRC-32s first */
    const char *from;               /* a run directory, checkpoint or model file: the arm
                                       takes its config and trained weights (and optimizer
                                       state when saved); the default baseline is then the
                                       same config at its initial weights. NULL: none */
    dm_comm *comm;                  /* under mpirun every rank runs both arms' steps, data-
                                       parallel (jobs/step.h); rank 0 reports; NULL: one
                                       process */
} dm_bench_args;

/* Time one training step of the arm and of the baseline, each on the batch of step 0 of
 * the corpus: forward, forward+backward, and the full step (forward, backward, optimizer
 * update). Both are built, warmed up once, then run a.reps times interleaved rep by rep
 * (the order alternating), bracketed by the contention probe. Reports '#' notes and
 * history rows (what "bench:step"; per arm ms and tokens/s of each stage, median and
 * max - min over reps; per stage the speed-up of the arm over the baseline, baseline time
 * / arm time per rep, median: metric STAGE_speedup_over_reference when the baseline is
 * the default kda_impl=reference, else STAGE_speedup_over_baseline with "| baseline
 * KEY=VALUE ..." in the config column; with a.memory also per arm saved_activations_mib
 * and total_mib, and saved_activations_ratio_to_baseline (or _reference): the arm's saved
 * activations over the baseline's) as notes, and appends the rows to a.history when set. Bad input: reps, config, baseline, corpus, model, history not writable; failed:
 * non-finite loss, out of memory, history not written; interrupted: a stop between reps. */
dm_status dm_bench_step(const dm_bench_args *a, const dm_job_io *io);
/* With a.from the arm is the checkpoint's model: its config with the sets applied (model
 * keys must stay the checkpoint's), its weights and optimizer state; without baseline keys
 * the baseline is that config at initialisation ("weights=init" against
 * "weights=trained"), so the speed-up rows say how a trained model's step compares with a
 * fresh one's. A step is the training step of jobs/step.h: the batch_size x grad_accum sequences of
 * step 0, and under mpirun (a.comm with N ranks) each rank's share with the gradient sum
 * and Muon's all-gather; tokens/s count the whole step's tokens. Under mpirun the notes
 * and rows also give, per arm, the bytes this rank (rank 0) sent per step (metric
 * comm_mb_per_step) and its time inside the exchanges (comm_ms_per_step), and the config
 * column names the processes ("processes=N"). */

#endif
