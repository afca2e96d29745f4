/* cmd_plot.c — `dormouse plot` and `dormouse metrics`: their flags (the jobs are
 * src/jobs/plot.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "jobs/plot.h"

static const char *PLOT_HELP =
    "usage: dormouse plot RUN_DIR... [--out FILE.png|FILE.svg] [--x step|time|tokens]\n"
    "       dormouse plot AB_DIR [--out FILE.png|FILE.svg] [--x step|time|tokens]\n"
    "\n"
    "Draw the training curves of one or several runs from their metrics.jsonl: the train\n"
    "loss (top) and the validation BPB (bottom, a dot at each evaluation), one color per\n"
    "run, with a legend. Both in bits per byte: the train loss is the mean cross-entropy of\n"
    "each logged interval in nats divided by ln 2, so the two panels compare directly. The\n"
    "y axes span the curves after the first tenth of x (the first steps sit far above and\n"
    "are clipped). An A/B sweep directory (AB_DIR, from `dormouse ab`) draws every (arm,\n"
    "seed) cell, one color per arm, with the control's spread over its seeds as a band.\n"
    "\n"
    "Beside the picture, FILE.tsv holds every point drawn (panel, kind, label, x, y; the\n"
    "axis ranges in `#axes` lines): pandas.read_csv(FILE.tsv, sep=\"\\t\", comment=\"#\").\n"
    "\n"
    "options:\n"
    "  --out FILE   .png or .svg (default: RUN_DIR/plot.png for one directory; for several,\n"
    "               FIRST_RUN_DIR/plot-N-runs.png)\n"
    "  --x AXIS     step (default), time (wall time of the run, continued across resumes)\n"
    "               or tokens (bytes trained on: step x batch_size x seq_len)\n"
    "\n"
    "Drawn with PLplot (Debian: libplplot-dev plplot-driver-cairo). A dormouse built\n"
    "without it says so and exits 1.\n";

int dm_cmd_plot(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--out", "--x", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *runs[256];
    dm_plot_args pa = {runs, 0, NULL, DM_PLOT_X_STEP};
    int r;
    while ((r = dm_args_next(&a, "plot")) > 0) {
        if (!a.name) {
            if (pa.n_runs == 256) {
                fprintf(stderr, "error: at most 256 run directories\n");
                return EXIT_USAGE;
            }
            runs[pa.n_runs++] = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(PLOT_HELP, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--out")) pa.out = a.value;
        else if ((pa.x = dm_plot_x_parse(a.value)) < 0) {
            fprintf(stderr, "error: --x expects step, time or tokens, got '%s'\n", a.value);
            return EXIT_USAGE;
        }
    }
    if (r < 0) return EXIT_USAGE;
    if (!pa.n_runs) {
        fprintf(stderr, "error: plot: missing RUN_DIR (try `dormouse plot --help`)\n");
        return EXIT_USAGE;
    }
    dm_status st = dm_plot(&pa, io);
    return dm_cli_exit(io, &st);
}

static const char *METRICS_HELP =
    "usage: dormouse metrics RUN_DIR... [--csv] [--out FILE]\n"
    "\n"
    "The metrics of runs (their metrics.jsonl). Without --csv, one line per run: the last\n"
    "step, the train loss there (the mean of its logged interval) in nats and in bits per\n"
    "byte (nats / ln 2), the last and the best validation BPB with their steps, the median\n"
    "tokens/s and the wall time. With --csv, every logged line of every run as CSV for\n"
    "spreadsheets and pandas: a `run` column, then the union of the runs' keys (step, loss,\n"
    "loss_avg, lr, grad_norm, ms_per_step, tokens_per_s, elapsed_s, val_bpb, ...); a line\n"
    "without a key (val_bpb off evaluation steps) leaves it empty. An A/B sweep directory\n"
    "stands for its cells.\n"
    "\n"
    "options:\n"
    "  --csv        CSV instead of the table\n"
    "  --out FILE   write to FILE instead of stdout\n"
    "\n"
    "example:\n"
    "  dormouse metrics runs/a runs/b --csv --out metrics.csv\n"
    "  python3 -c 'import csv; print(list(csv.DictReader(open(\"metrics.csv\")))[-1])'\n"
    "  python3 -c 'import pandas as pd; print(pd.read_csv(\"metrics.csv\").tail())'\n"
    "(pandas is not among dormouse's packages: Debian's python3-pandas, or pip)\n";

int dm_cmd_metrics(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--out", NULL};
    static const char *const flags[] = {"--help", "-h", "--csv", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *runs[256];
    dm_metrics_args ma = {runs, 0, 0, NULL};
    int r;
    while ((r = dm_args_next(&a, "metrics")) > 0) {
        if (!a.name) {
            if (ma.n_runs == 256) {
                fprintf(stderr, "error: at most 256 run directories\n");
                return EXIT_USAGE;
            }
            runs[ma.n_runs++] = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(METRICS_HELP, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--csv")) ma.csv = 1;
        else ma.out = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    if (!ma.n_runs) {
        fprintf(stderr, "error: metrics: missing RUN_DIR (try `dormouse metrics --help`)\n");
        return EXIT_USAGE;
    }
    dm_status st = dm_metrics_job(&ma, io);
    return dm_cli_exit(io, &st);
}
