/* ab.h — seeded A/B sweeps (docs/architecture.md section 7): the one header of
 *   ab_stats.c   results and verdicts (pure)
 *   ab_spec.c    the sweep: seeds, variants, the keys that are the sweep's, ab.json
 *   ab_cells.c   cells on disk, and running them in child processes
 *   ab_report.c  the table and the history rows
 *   ab.c         the two jobs: run a sweep (`dormouse ab`), report one (`--report`)
 *
 * A sweep trains a control config and variants of it (each a few key=value overrides of
 * the control) on several seeds, for the same number of steps, and judges each variant
 * against the noise of the control:
 *   spread   max - min of the control's final val BPB over its seeds
 *   better   variant mean < control mean - spread
 *   worse    variant mean > control mean + spread
 *   wash     otherwise
 * Time is judged the same way on the median ms/step of each cell (steps after a warm-up),
 * against the control's timing spread, and only when no timing involved was taken on a
 * busy machine (history.h, dm_probe).
 *
 * Layout of a sweep directory AB_DIR:
 *   ab.json                 the sweep: corpus, steps, warm-up, seeds, arms (name,
 *                           overrides, full config); --report reads only this and cells
 *   <arm>/seed<k>/          one cell: a training run (config.json, metrics.jsonl with a
 *                           line per step, summary.json, ckpt-*), plus
 *     train.log             the run's output
 *     cell.json             the timing probe of the cell (wall, CPU, contention flags)
 * A cell is done when summary.json exists and its config.json and data_path match what
 * the sweep asks for (the corpus by its bytes: the size and CRC-32 data_path records, so a
 * corpus that moved, e.g. an installed copy, still matches); done cells are never rerun, so a cancelled sweep resumes, and a
 * variant can be added to a finished sweep by running it again with one more --variant.
 * Cells run interleaved by seed (seed 1 of every arm, then seed 2, ...), so a sweep
 * stopped early still holds comparable cells. */
#ifndef DM_AB_H
#define DM_AB_H

#include <stdint.h>
#include <stdio.h>

#include "dormouse.h"
#include "jobs/job.h"

#define DM_AB_MAX_ARMS 16
#define DM_AB_MAX_SEEDS 32
#define DM_AB_NAME 48

/* ---- results and verdicts (pure) ------------------------------------------------------ */

enum {
    DM_CELL_MISSING = 0, /* not run yet, or stopped before its summary */
    DM_CELL_DONE,        /* finished; bpb (and ms, flags) valid */
    DM_CELL_STALE,       /* finished, but with another config or corpus than the sweep's */
    DM_CELL_FAILED,      /* ran in this invocation and failed (see its train.log) */
};

typedef struct {
    int status;          /* DM_CELL_* */
    double bpb;          /* final validation BPB */
    double ms;           /* median ms/step over the steps after the warm-up; NAN: none */
    int steps;           /* the steps it trained (its own under a time_budget) */
    unsigned flags;      /* DM_PROBE_* of the cell's timing; non-zero = contended */
    double load_max, others_cores, steal_frac; /* the probe's readings (for the report) */
    char why[96];        /* STALE: the first differing key; FAILED: the exit code */
} dm_ab_cell;

/* Summary of one arm's cells (n = the sweep's seeds). */
typedef struct {
    int complete;            /* every cell is done */
    int n;                   /* cells done */
    double mean, spread;     /* val BPB over the done cells: mean, max - min */
    double ms_mean, ms_spread; /* median ms/step over the done cells: mean, max - min */
    int timed;               /* every done cell has a timing */
    int contended;           /* some done cell's timing is flagged */
} dm_ab_stats;

enum {
    DM_AB_WASH = 0,
    DM_AB_BETTER,
    DM_AB_WORSE,
    DM_AB_NA_MISSING,   /* an arm (variant or control) lacks cells */
    DM_AB_NA_SEEDS,     /* one seed: the control spread is unknown */
    DM_AB_NA_CONTENDED, /* a timing was taken on a busy machine */
    DM_AB_NA_UNTIMED,   /* a cell has no ms/step readings after the warm-up */
};

typedef struct {
    int bpb, time;                /* DM_AB_* */
    double bpb_delta, ms_delta;   /* variant mean - control mean (NAN when incomplete) */
} dm_ab_verdict;

dm_ab_stats dm_ab_arm_stats(const dm_ab_cell *cells, int n);
/* better / worse / wash of a mean against the control's mean and spread: strictly
 * beyond the spread, lower is better (BPB and ms/step alike). */
int dm_ab_judge(double control_mean, double control_spread, double mean);
/* The verdicts of a variant against the control, cells indexed by seed. */
dm_ab_verdict dm_ab_compare(const dm_ab_cell *control, const dm_ab_cell *variant, int n);
/* "better", "worse", "wash", "n/a (missing cells)", "n/a (contended)", ... */
const char *dm_ab_verdict_text(int v);

/* ---- the sweep ---------------------------------------------------------------------- */

/* A corpus of the sweep: its path and the identity a run records of it. */
typedef struct {
    char path[4096];       /* absolute ("" on a variant: the control's) */
    int has_id;            /* the identity is known: a cell is done on the same bytes (its
                              data_path's size and CRC-32), at any path */
    uint64_t bytes;        /* ... the size and CRC-32 a run records (io/data.h) */
    uint32_t crc;
    uint64_t train;        /* a data directory's training bytes (its split); 0: a corpus
                              file or directory, split by the config's eval_window */
} dm_ab_data;

typedef struct {
    char name[DM_AB_NAME]; /* "control", or a variant's name (a directory name) */
    char overrides[1024];  /* "key=value key=value" over the control ("" for it) */
    dm_config cfg;         /* the arm's config (seed and log_every are set per cell) */
    dm_ab_data data;       /* a variant's own corpus (key data=PATH); path "": the
                              control's. Every arm validates on the same bytes */
} dm_ab_arm;

typedef struct {
    char dir[4096];        /* AB_DIR */
    dm_ab_data data;       /* the control's corpus (--data) */
    int steps;
    int warmup;            /* steps left out of the ms/step median */
    int n_arms;            /* arms[0] is the control */
    dm_ab_arm arms[DM_AB_MAX_ARMS];
    int n_seeds;
    uint64_t seeds[DM_AB_MAX_SEEDS];
} dm_ab_spec;

typedef struct {
    dm_ab_cell cell[DM_AB_MAX_ARMS][DM_AB_MAX_SEEDS]; /* [arm][seed index] */
} dm_ab_results;

/* Default warm-up: a tenth of the steps, at most 50. */
int dm_ab_default_warmup(int steps);
/* "1,2,3" -> seeds. 0 ok; else a one-line error. */
int dm_ab_parse_seeds(const char *text, uint64_t *seeds, int max, int *n, char *err,
                      size_t errlen);
/* Why key is the sweep's and cannot be set (NULL: it can): seed and log_every on the
 * control (--set) and on variants alike; steps and eval_window on variants (--steps and
 * the control's eval_window hold for every arm). The one policy of --set and --variant. */
const char *dm_ab_fixed_key(const char *key, int variant);
/* "NAME: key=value key=value" -> a variant of the control (config validated; seed, steps,
 * eval_window and log_every are the sweep's and cannot vary). The key data=PATH gives the
 * variant its own corpus (as given: dm_ab_make_spec resolves it), e.g. a data directory of
 * another vocabulary. 0 ok; else an error. */
int dm_ab_parse_variant(const char *text, const dm_config *control, dm_ab_arm *arm,
                        char *err, size_t errlen);
/* The corpus of arm a: its own, or the control's. */
const dm_ab_data *dm_ab_arm_data(const dm_ab_spec *s, int a);
/* Checks a spec before anything runs: names unique, configs valid, corpora present. */
int dm_ab_check_spec(const dm_ab_spec *s, char *err, size_t errlen);

/* The config of cell (arm a, seed index k): the arm's config with seed = seeds[k],
 * steps = the sweep's, log_every = 1 (so the median covers every step). */
void dm_ab_cell_config(const dm_ab_spec *s, int a, int k, dm_config *out);
/* AB_DIR/<arm>/seed<k> */
void dm_ab_cell_dir(const dm_ab_spec *s, int a, int k, char *buf, size_t n);
/* "1,2,7" */
void dm_ab_seeds_text(const dm_ab_spec *s, char *buf, size_t n);

/* Save / load AB_DIR/ab.json. 0 ok; else an error (load: 2 = no sweep there). */
int dm_ab_save_spec(const dm_ab_spec *s, char *err, size_t errlen);
int dm_ab_load_spec(const char *dir, dm_ab_spec *s, char *err, size_t errlen);

/* Read every cell's state from disk (done / missing / stale). */
void dm_ab_load_results(const dm_ab_spec *s, dm_ab_results *r);

/* Run the cells that are not done, interleaved by seed, each in a child process (fork,
 * then the train job, whose events and status go to the cell's train.log) bracketed by a
 * contention probe; a line per cell as a note (a failed one as a warning), the running
 * cell's step as a labelled step event about once a second. Call before this process has
 * used OpenMP. The sweep's directory is locked while it runs, and each cell before it is
 * cleared (io/rundir.h): a second sweep of the directory, or a `train` writing a cell, is
 * refused. *ran = cells trained now. Returns OK when every cell is done; failed when
 * a cell failed; bad input on stale cells, a directory or cell in use, or a cell that
 * refused its input (every other would too); interrupted when io->stop was set: the
 * running cell gets SIGTERM once (its train job stops after the current step; the next
 * run of the sweep redoes it). */
dm_job_code dm_ab_run_cells(const dm_ab_spec *s, dm_ab_results *r, int *ran,
                            const dm_job_io *io, dm_status *st);

/* The table: per arm the BPB of each seed, mean, delta, verdict; the control spread;
 * the same for ms/step with contention marks; missing and contended cells by name. */
void dm_ab_print(const dm_ab_spec *s, const dm_ab_results *r, FILE *f);

/* Append one val_bpb and one ms_per_step row per arm to the history file (only for a
 * sweep with every cell done). 0 ok; else an error. */
int dm_ab_history(const dm_ab_spec *s, const dm_ab_results *r, const char *path, char *err,
                  size_t errlen);

/* ---- the jobs ----------------------------------------------------------------------- */

typedef struct {
    const char *dir;          /* AB_DIR */
    const char *data;         /* corpus; NULL: the bundled one (dm_data_path) */
    const char *config_file;  /* JSON object of the control's keys (NULL: none) */
    const char *const *sets;  /* "key=value" of the control, after config_file */
    int n_sets;
    const char *const *variants; /* "NAME: key=value ..." */
    int n_variants;
    const char *seeds;        /* "1,2,..." (NULL: "1,2") */
    long steps;               /* > 0: the steps of every cell (else the control's `steps`) */
    long warmup;              /* >= 0: steps left out of the ms/step median (else default) */
    const char *history;      /* append the rows here (--history FILE); NULL: nothing */
    int verify_data;          /* a prepared data directory: check its CRC-32s first */
} dm_ab_args;

/* The spec of a sweep from its arguments (the control: defaults, config_file, sets with
 * dm_ab_fixed_key refused, steps), checked (dm_ab_check_spec). 0 ok; else bad input. */
int dm_ab_make_spec(const dm_ab_args *a, dm_ab_spec *s, dm_status *st);

/* `dormouse ab`: make the spec, run the missing cells (dm_ab_run_cells), report the table
 * as a note (not after bad input), for a complete sweep that trained a cell append the
 * history rows when a->history is set. (`ab --plot` draws the plot after it, also after a
 * failed or interrupted cell: the cells there are drawn; jobs/plot.h.) */
dm_status dm_ab_run(const dm_ab_args *a, const dm_job_io *io);

/* `dormouse ab --report`: the table of AB_DIR from ab.json and its cells; warmup >= 0
 * overrides the sweep's. Bad input when AB_DIR holds no sweep. */
dm_status dm_ab_report(const char *dir, long warmup, const dm_job_io *io);

#endif
