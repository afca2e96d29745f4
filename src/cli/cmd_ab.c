/* cmd_ab.c — `dormouse ab`: its flags (the jobs are src/jobs/ab.c: run, report). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "jobs/ab.h"
#include "jobs/plot.h"

static const char *HELP =
    "usage: dormouse ab --dir AB_DIR [--data PATH] [--config FILE.json] [--set key=value]...\n"
    "                   [--variant \"NAME: key=value ...\"]... [--seeds 1,2,...] [--steps N]\n"
    "                   [--warmup N] [--history FILE] [--plot [--x step|time|tokens]]\n"
    "       dormouse ab --dir AB_DIR --report [--warmup N] [--plot [--x step|time|tokens]]\n"
    "\n"
    "Train a control config and variants of it on several seeds and judge each variant\n"
    "against the noise of the control. Every (arm, seed) cell is a training run in\n"
    "AB_DIR/ARM/seedK/ (output in its train.log), with the same steps and validation\n"
    "window; cells run interleaved by seed (every arm's first seed, then the second, ...).\n"
    "An arm with a time_budget (e.g. --set time_budget=5m, or in a variant) compares at a\n"
    "fixed wall clock instead: each of its cells fixes its own steps from its measured\n"
    "rate (train --time-budget), and the table lists them.\n"
    "\n"
    "The table gives per arm the final val BPB of each seed, the mean and the delta to the\n"
    "control; the control spread (max - min over its seeds); and per variant a verdict:\n"
    "better (mean below the control mean by more than the spread), worse (above by more),\n"
    "or wash. Time likewise: the median ms/step of each cell over the steps after the\n"
    "warm-up, judged against the control's timing spread. A timing taken while the\n"
    "machine was busy is marked * and gives no time verdict (\"n/a (contended)\"): the\n"
    "1-minute load average above the cores + 0.5, CPU steal above 2%, or other processes\n"
    "using more than 0.1 of the cores the cell's threads needed (from /proc/stat over the\n"
    "cell, less the cell's own CPU time); readings in AB_DIR/ARM/seedK/cell.json. One\n"
    "seed gives no verdict (no spread to judge by).\n"
    "\n"
    "Finished cells are kept: a cell whose summary.json exists and whose config and\n"
    "corpus match is never rerun, so a cancelled sweep (Ctrl-C) resumes when the same\n"
    "command runs again, and a finished sweep gains a variant by adding one --variant.\n"
    "A finished cell of another config is an error (use a new AB_DIR). With --history FILE\n"
    "a completed sweep that trained any cell appends per arm a val_bpb row and a\n"
    "ms_per_step row (flagged \"contended\" when any of its timings was) to FILE, e.g.\n"
    "benches/history.tsv; without it nothing is appended anywhere.\n"
    "\n"
    "options:\n"
    "  --dir AB_DIR        the sweep directory (AB_DIR/ab.json describes the sweep)\n"
    "  --data PATH         corpus (default: the bundled one, as for `dormouse train`); a\n"
    "                      finished cell is reused when it trained on the same bytes (size\n"
    "                      and CRC-32), wherever the corpus now lies\n"
    "  --verify-data       a data directory of `dormouse prepare`: check its CRC-32s first\n"
    "  --config FILE       JSON object of config keys for the control\n"
    "  --set key=value     one control config key (repeatable; after --config); the\n"
    "                      variants start from it\n"
    "  --variant SPEC      \"NAME: key=value key=value\": an arm that overrides keys of\n"
    "                      the control (repeatable; NAME: letters, digits, _ - .). A\n"
    "                      variant with no keys is a copy of the control (an A/A check).\n"
    "                      seed, steps, eval_window and log_every are the sweep's.\n"
    "                      data=PATH gives the variant its own corpus, e.g. a data\n"
    "                      directory of another vocabulary (prepare --vocab N), whose\n"
    "                      validation text must be the control's (compare with\n"
    "                      prepare --val-split tail, or the same --val-seed)\n"
    "  --seeds LIST        comma-separated seeds (default 1,2)\n"
    "  --steps N           steps of every cell (default: the config's `steps`)\n"
    "  --warmup N          steps left out of the ms/step median (default steps/10, at\n"
    "                      most 50)\n"
    "  --history FILE      append the sweep's history rows to FILE (default: none)\n"
    "  --no-history        append nothing (the default; kept for old scripts)\n"
    "  --report            print the table of AB_DIR from its cells; runs nothing\n"
    "  --plot              after the table draw AB_DIR/plot.png (and plot.tsv): the train\n"
    "                      loss and validation BPB of every arm and seed, one color per\n"
    "                      arm, the control's spread over its seeds as a band (as\n"
    "                      `dormouse plot AB_DIR`, which can also write SVG)\n"
    "  --x AXIS            the plot's x axis: step (default), time or tokens\n"
    "\n"
    "example:\n"
    "  dormouse ab --dir runs/ab-retract --set steps=1000 --seeds 1,2,3 \\\n"
    "      --variant \"sphere: retract=sphere\" \\\n"
    "      --variant \"sphere5: retract=sphere retract_every=5\"\n"
    "\n"
    "Exit codes: 0 every cell done (or --report), 1 a cell failed, 2 bad usage or input\n"
    "(also: AB_DIR or a cell in use by another process), 130 interrupted by SIGINT, 143 by\n"
    "SIGTERM (rerun the command to resume).\n";

int dm_cmd_ab(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--dir",   "--data",  "--config", "--set",
                                             "--variant", "--seeds", "--steps", "--warmup",
                                             "--history", "--x", NULL};
    static const char *const flags[] = {"--help", "-h", "--report", "--no-history", "--plot",
                                        "--verify-data", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256], *variants[256];
    dm_ab_args ab = {0};
    ab.sets = sets;
    ab.variants = variants;
    ab.warmup = -1;
    int report = 0, r, run_opts = 0, x_given = 0, plot = 0, plot_x = DM_PLOT_X_STEP;
    while ((r = dm_args_next(&a, "ab")) > 0) {
        if (!a.name) {
            fprintf(stderr, "error: ab: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--dir")) ab.dir = a.value;
        else if (!strcmp(a.name, "--report")) report = 1;
        else if (!strcmp(a.name, "--plot")) plot = 1;
        else if (!strcmp(a.name, "--x")) {
            if ((plot_x = dm_plot_x_parse(a.value)) < 0) {
                fprintf(stderr, "error: --x expects step, time or tokens, got '%s'\n", a.value);
                return EXIT_USAGE;
            }
            x_given = 1;
        }
        else if (!strcmp(a.name, "--warmup")) {
            if (dm_cli_long("--warmup", a.value, 0, 1L << 30, &ab.warmup)) return EXIT_USAGE;
        } else {
            run_opts = 1; /* everything else describes a sweep to run */
            if (!strcmp(a.name, "--data")) ab.data = a.value;
            else if (!strcmp(a.name, "--verify-data")) ab.verify_data = 1;
            else if (!strcmp(a.name, "--config")) ab.config_file = a.value;
            else if (!strcmp(a.name, "--seeds")) ab.seeds = a.value;
            else if (!strcmp(a.name, "--history")) ab.history = a.value;
            else if (!strcmp(a.name, "--no-history")) ab.history = NULL;
            else if (!strcmp(a.name, "--steps")) {
                if (dm_cli_long("--steps", a.value, 1, 1L << 30, &ab.steps)) return EXIT_USAGE;
            } else if (ab.n_sets == 256 || ab.n_variants == 256) {
                fprintf(stderr, "error: too many %s options\n", a.name);
                return EXIT_USAGE;
            } else if (!strcmp(a.name, "--variant")) variants[ab.n_variants++] = a.value;
            else sets[ab.n_sets++] = a.value;
        }
    }
    if (r < 0) return EXIT_USAGE;
    if (!ab.dir) {
        fprintf(stderr, "error: ab: missing --dir AB_DIR (try `dormouse ab --help`)\n");
        return EXIT_USAGE;
    }
    if (report && run_opts) {
        fprintf(stderr, "error: --report reads the sweep from AB_DIR/ab.json; give only "
                        "--dir (and --warmup, --plot, --x)\n");
        return EXIT_USAGE;
    }
    if (x_given && !plot) {
        fprintf(stderr, "error: --x sets the axis of --plot; add --plot\n");
        return EXIT_USAGE;
    }
    dm_status st = report ? dm_ab_report(ab.dir, ab.warmup, io) : dm_ab_run(&ab, io);
    /* the plot after the table: of a report that read its sweep, of a sweep after any but
     * bad input (a failed or interrupted cell's neighbours are drawn) */
    if (plot && (report ? st.code == DM_JOB_OK : st.code != DM_JOB_BAD_INPUT)) {
        dm_status pst = dm_plot_ab(ab.dir, NULL, plot_x, io);
        if (pst.code && !st.code) st = pst;
        else if (pst.code) dm_job_warn(io, "plot: %s\n", pst.msg);
    }
    return dm_cli_exit(io, &st);
}
