/* plot.h — training curves of runs and of A/B sweeps (`dormouse plot`, `dormouse ab
 * --plot`), and the metrics of runs as a table or CSV (`dormouse metrics`). */
#ifndef DM_PLOT_H
#define DM_PLOT_H

#include "jobs/job.h"

enum { DM_PLOT_X_STEP = 0, DM_PLOT_X_TIME, DM_PLOT_X_TOKENS };

/* "step" | "time" | "tokens" -> DM_PLOT_X_*; -1 when none of them. */
int dm_plot_x_parse(const char *name);

typedef struct {
    const char *const *runs; /* run directories, or A/B sweep directories (their ab.json) */
    int n_runs;
    const char *out;         /* .png or .svg; NULL: RUN/plot.png for one directory, else
                                FIRST_RUN/plot-N-runs.png */
    int x;                   /* DM_PLOT_X_* */
} dm_plot_args;

/* Draw the train loss (panel 1, in bits per byte: the mean loss of each logged interval
 * / ln 2) and the validation BPB (panel 2, at each evaluation) of every run against x,
 * one color per run with a legend; a sweep directory adds every cell of it as in
 * dm_plot_ab (then it must be the only directory). Writes out and, beside it, the series
 * drawn as a TSV (same name, .tsv; figure.h). Notes what it wrote. Bad input: no run, a
 * directory without metrics.jsonl or with nothing logged, the extension; failed: the
 * drawing (PLplot missing says how to get it). */
dm_status dm_plot(const dm_plot_args *a, const dm_job_io *io);

/* The figure of the sweep in dir: every (arm, seed) cell a line in its arm's color, the
 * control's spread (min to max over its seeds at each step) as a band in both panels.
 * out NULL: AB_DIR/plot.png. */
dm_status dm_plot_ab(const char *dir, const char *out, int x, const dm_job_io *io);

typedef struct {
    const char *const *runs; /* run directories or sweep directories (their cells) */
    int n_runs;
    int csv;                 /* every logged line as CSV, a `run` column first */
    const char *out;         /* NULL: the text goes to the notes (stdout) */
} dm_metrics_args;

/* `dormouse metrics`: per run the steps, the final train loss (nats and bits per byte),
 * the last and best validation BPB with their steps, the median tokens/s and the time; or
 * with csv every metrics line of every run (the union of their keys as columns). */
dm_status dm_metrics_job(const dm_metrics_args *a, const dm_job_io *io);

#endif
