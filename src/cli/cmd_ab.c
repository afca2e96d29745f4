/* cmd_ab.c — `dormouse ab`: its flags (the jobs are src/jobs/ab.c: run, report). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "jobs/ab.h"

static const char *HELP =
    "usage: dormouse ab --dir AB_DIR [--data PATH] [--config FILE.json] [--set key=value]...\n"
    "                   [--variant \"NAME: key=value ...\"]... [--seeds 1,2,...] [--steps N]\n"
    "                   [--warmup N] [--history FILE | --no-history]\n"
    "       dormouse ab --dir AB_DIR --report [--warmup N]\n"
    "\n"
    "Train a control config and variants of it on several seeds and judge each variant\n"
    "against the noise of the control. Every (arm, seed) cell is a training run in\n"
    "AB_DIR/ARM/seedK/ (output in its train.log), with the same steps and validation\n"
    "window; cells run interleaved by seed (every arm's first seed, then the second, ...).\n"
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
    "A finished cell of another config is an error (use a new AB_DIR). A completed sweep\n"
    "that trained any cell appends per arm a val_bpb row and a ms_per_step row (flagged\n"
    "\"contended\" when any of its timings was) to the benchmark history.\n"
    "\n"
    "options:\n"
    "  --dir AB_DIR        the sweep directory (AB_DIR/ab.json describes the sweep)\n"
    "  --data PATH         corpus (default " DM_DEFAULT_DATA ")\n"
    "  --config FILE       JSON object of config keys for the control\n"
    "  --set key=value     one control config key (repeatable; after --config); the\n"
    "                      variants start from it\n"
    "  --variant SPEC      \"NAME: key=value key=value\": an arm that overrides keys of\n"
    "                      the control (repeatable; NAME: letters, digits, _ - .). A\n"
    "                      variant with no keys is a copy of the control (an A/A check).\n"
    "                      seed, steps, eval_window and log_every are the sweep's\n"
    "  --seeds LIST        comma-separated seeds (default 1,2)\n"
    "  --steps N           steps of every cell (default: the config's `steps`)\n"
    "  --warmup N          steps left out of the ms/step median (default steps/10, at\n"
    "                      most 50)\n"
    "  --history FILE      where to append history rows (default\n"
    "                      " DM_DEFAULT_HISTORY ")\n"
    "  --no-history        append nothing\n"
    "  --report            print the table of AB_DIR from its cells; runs nothing\n"
    "\n"
    "example:\n"
    "  dormouse ab --dir runs/ab-retract --set steps=3000 --seeds 1,2,3 \\\n"
    "      --variant \"every4: retract_every=4\" --variant \"off: retract=off\"\n"
    "\n"
    "Exit codes: 0 every cell done (or --report), 1 a cell failed, 2 bad usage or input,\n"
    "130 interrupted (rerun the command to resume).\n";

int dm_cmd_ab(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--dir",   "--data",  "--config", "--set",
                                             "--variant", "--seeds", "--steps", "--warmup",
                                             "--history", NULL};
    static const char *const flags[] = {"--help", "-h", "--report", "--no-history", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256], *variants[256];
    dm_ab_args ab = {0};
    ab.sets = sets;
    ab.variants = variants;
    ab.warmup = -1;
    ab.history = DM_DEFAULT_HISTORY;
    int report = 0, r, run_opts = 0;
    while ((r = dm_args_next(&a, "ab")) > 0) {
        if (!a.name) {
            fprintf(stderr, "dormouse ab: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--dir")) ab.dir = a.value;
        else if (!strcmp(a.name, "--report")) report = 1;
        else if (!strcmp(a.name, "--warmup")) {
            if (dm_cli_long("--warmup", a.value, 0, 1L << 30, &ab.warmup)) return EXIT_USAGE;
        } else {
            run_opts = 1; /* everything else describes a sweep to run */
            if (!strcmp(a.name, "--data")) ab.data = a.value;
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
        fprintf(stderr, "dormouse ab: missing --dir AB_DIR (try `dormouse ab --help`)\n");
        return EXIT_USAGE;
    }
    if (report && run_opts) {
        fprintf(stderr, "error: --report reads the sweep from AB_DIR/ab.json; give only "
                        "--dir (and --warmup)\n");
        return EXIT_USAGE;
    }
    dm_status st = report ? dm_ab_report(ab.dir, ab.warmup, io) : dm_ab_run(&ab, io);
    return dm_cli_exit(io, &st);
}
