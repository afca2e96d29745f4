/* metrics.h — a run's metrics.jsonl read back as a table (docs/architecture.md section
 * 10): one row per logged step, one column per key, for the plots, `dormouse metrics` (and
 * its CSV) and the A/B timing medians.
 *
 * metrics.jsonl holds one JSON object of numbers per line ("step", "loss", "loss_avg",
 * "lr", "grad_norm", "ms_per_step", "tokens_per_s", "elapsed_s", and "val_bpb" on
 * evaluation steps, ...). The columns are the keys in the order they first appear; a row
 * lacking a key holds NAN there. */
#ifndef DM_METRICS_H
#define DM_METRICS_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    int n_rows, n_cols;
    char **cols; /* [n_cols] names */
    double *v;   /* [n_rows, n_cols], NAN where a line lacks the key */
} dm_metrics;

/* Read path (a metrics.jsonl). A last line without its newline that does not parse (a
 * run killed while writing it) is left out; any other line that is not a JSON object of
 * numbers is an error naming the file and line. 0 ok (m->n_rows may be 0); else err. */
int dm_metrics_read(const char *path, dm_metrics *m, char *err, size_t errlen);
void dm_metrics_free(dm_metrics *m);
/* The index of column name, or -1. */
int dm_metrics_col(const dm_metrics *m, const char *name);
/* The value at (row, column index); NAN when col < 0. */
double dm_metrics_at(const dm_metrics *m, int row, int col);
/* The wall time of the run: its elapsed_s, which starts again at 0 on a resume, summed
 * over the invocations (0 without the column). */
double dm_metrics_wall(const dm_metrics *m);

/* CSV (RFC 4180 quoting, one line per row ending in \n): dm_metrics_csv_header writes
 * "run," then cols; dm_metrics_csv_rows one line per row of m: run, then the value of
 * each of cols in the shortest form that reads back as the same double, empty where NAN
 * or where m lacks the column. */
void dm_metrics_csv_header(FILE *f, const char *const *cols, int n_cols);
void dm_metrics_csv_rows(FILE *f, const char *run, const dm_metrics *m,
                         const char *const *cols, int n_cols);

#endif
