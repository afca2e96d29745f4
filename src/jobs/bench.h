/* bench.h — the step benchmark (`dormouse bench`, DESIGN.md sections 7 and 9) and the
 * small pieces every benchmark program (bench/) shares: medians and spreads, and the
 * contention flags of a history row. Results are reported with dm_history_report. */
#ifndef DM_BENCH_H
#define DM_BENCH_H

#include <stdio.h>

#include "dormouse.h"
#include "io/history.h"

/* Median of x[0..n) (x is left as it is; the mean of the middle two when n is even);
 * *spread = max - min when spread != NULL. n >= 1. */
double dm_bench_median(const double *x, int n, double *spread);

/* The flags column of a timing bracketed by the probe: "contended,WORDS" (WORDS from
 * dm_probe_flags_text, e.g. "contended,load,others") when the probe flagged it, else "". */
void dm_bench_flags(const dm_probe_result *r, char *buf, size_t n);

/* One line on the probe reading (load, other processes' cores, steal) for a '#' note. */
void dm_bench_probe_note(const dm_probe_result *r, char *buf, size_t n);

typedef struct {
    const char *data;    /* corpus: a file (plain or gzip) or a directory */
    int reps;            /* timed repetitions per arm, >= 1 (after one warm-up) */
    const char *history; /* append the rows to this file too; NULL: print only */
} dm_bench_args;

/* Time one training step of cfg (validated) on the batch of step 0 of the corpus:
 * forward, forward+backward, and the full step (forward, backward, optimizer update).
 * The same config with kda_impl=reference is the baseline: both arms are built, warmed up
 * once, then run a.reps times interleaved rep by rep (the order alternating), bracketed
 * by the contention probe. Prints '#' notes and history rows (what "bench:step"; per arm
 * ms and tokens/s of each stage, median and max - min over reps; per stage the speed-up
 * of cfg over the baseline, reference time / cfg time per rep, median) to out, and
 * appends the rows to a.history when set. Returns the exit code: 0 ok, 1 runtime failure
 * (non-finite loss, out of memory, history not writable), 2 bad input (corpus, model). */
int dm_bench_step(const dm_config *cfg, const dm_bench_args *a, FILE *out);

#endif
