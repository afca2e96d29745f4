/* cmd_ab.c — `dormouse ab`: seeded A/B sweeps (the job is src/ab.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/ab.h"
#include "cli/cli.h"

#define DM_DEFAULT_HISTORY DM_SOURCE_DIR "/benches/history.tsv"

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

int dm_cmd_ab(int argc, char **argv) {
    static const char *const with_value[] = {"--dir",   "--data",  "--config", "--set",
                                             "--variant", "--seeds", "--steps", "--warmup",
                                             "--history", NULL};
    static const char *const flags[] = {"--help", "-h", "--report", "--no-history", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *dir = NULL, *data = NULL, *config = NULL, *seeds = "1,2",
               *history = DM_DEFAULT_HISTORY;
    const char *sets[256], *variants[DM_AB_MAX_ARMS];
    int nsets = 0, nvar = 0, report = 0, no_history = 0, r, run_opts = 0;
    long steps = 0, warmup = -1;
    while ((r = dm_args_next(&a, "ab")) > 0) {
        if (!a.name) {
            fprintf(stderr, "dormouse ab: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--dir")) dir = a.value;
        else if (!strcmp(a.name, "--report")) report = 1;
        else if (!strcmp(a.name, "--warmup")) {
            if (dm_cli_long("--warmup", a.value, 0, 1L << 30, &warmup)) return EXIT_USAGE;
        } else {
            run_opts = 1; /* everything else describes a sweep to run */
            if (!strcmp(a.name, "--data")) data = a.value;
            else if (!strcmp(a.name, "--config")) config = a.value;
            else if (!strcmp(a.name, "--seeds")) seeds = a.value;
            else if (!strcmp(a.name, "--history")) history = a.value;
            else if (!strcmp(a.name, "--no-history")) no_history = 1;
            else if (!strcmp(a.name, "--steps")) {
                if (dm_cli_long("--steps", a.value, 1, 1L << 30, &steps)) return EXIT_USAGE;
            } else if (!strcmp(a.name, "--variant")) {
                if (nvar == DM_AB_MAX_ARMS - 1) {
                    fprintf(stderr, "error: at most %d variants\n", DM_AB_MAX_ARMS - 1);
                    return EXIT_USAGE;
                }
                variants[nvar++] = a.value;
            } else if (nsets < 256) sets[nsets++] = a.value;
            else {
                fprintf(stderr, "error: too many --set options\n");
                return EXIT_USAGE;
            }
        }
    }
    if (r < 0) return EXIT_USAGE;
    if (!dir) {
        fprintf(stderr, "dormouse ab: missing --dir AB_DIR (try `dormouse ab --help`)\n");
        return EXIT_USAGE;
    }

    static dm_ab_spec spec; /* large: not on the stack */
    static dm_ab_results res;
    char err[8192];
    if (report) {
        if (run_opts) {
            fprintf(stderr, "error: --report reads the sweep from AB_DIR/ab.json; give only "
                            "--dir (and --warmup)\n");
            return EXIT_USAGE;
        }
        int lrc = dm_ab_load_spec(dir, &spec, err, sizeof err);
        if (lrc) {
            fprintf(stderr, "error: %s\n", err);
            return lrc == 2 ? EXIT_USAGE : EXIT_FAIL;
        }
        if (warmup >= 0) spec.warmup = (int)warmup;
        dm_ab_load_results(&spec, &res);
        dm_ab_print(&spec, &res, stdout);
        return EXIT_OK;
    }

    /* the control: defaults, then --config, then --set, then --steps */
    memset(&spec, 0, sizeof spec);
    snprintf(spec.dir, sizeof spec.dir, "%s", dir);
    dm_ab_arm *control = &spec.arms[0];
    snprintf(control->name, sizeof control->name, "control");
    dm_config_default(&control->cfg);
    if (config && dm_cli_config_file(&control->cfg, config)) return EXIT_USAGE;
    for (int i = 0; i < nsets; i++) {
        if (!strncmp(sets[i], "seed=", 5) || !strncmp(sets[i], "log_every=", 10)) {
            fprintf(stderr, "error: --set %.*s: %s\n", (int)strcspn(sets[i], "="), sets[i],
                    sets[i][0] == 's' ? "the seeds are the sweep's (--seeds)"
                                      : "A/B cells log every step");
            return EXIT_USAGE;
        }
        if (dm_cli_set(&control->cfg, sets[i])) return EXIT_USAGE;
    }
    if (steps > 0) control->cfg.steps = (int)steps;
    spec.steps = control->cfg.steps;
    spec.warmup = warmup >= 0 ? (int)warmup : dm_ab_default_warmup(spec.steps);
    spec.n_arms = 1;
    for (int i = 0; i < nvar; i++)
        if (dm_ab_parse_variant(variants[i], &control->cfg, &spec.arms[spec.n_arms++], err,
                                sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            return EXIT_USAGE;
        }
    if (dm_ab_parse_seeds(seeds, spec.seeds, DM_AB_MAX_SEEDS, &spec.n_seeds, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_USAGE;
    }
    const char *corpus = data ? data : DM_DEFAULT_DATA;
    char *abs = realpath(corpus, NULL);
    if (!abs) {
        fprintf(stderr, "error: corpus %s not found\n", corpus);
        return EXIT_USAGE;
    }
    snprintf(spec.data, sizeof spec.data, "%s", abs);
    free(abs);
    if (spec.warmup >= spec.steps) {
        fprintf(stderr, "error: --warmup %d leaves no step of %d to time\n", spec.warmup,
                spec.steps);
        return EXIT_USAGE;
    }
    if (dm_ab_check_spec(&spec, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_USAGE;
    }

    int ran = 0;
    int rc = dm_ab_run(&spec, &res, &ran, stdout);
    if (rc == EXIT_USAGE) return rc;
    dm_ab_print(&spec, &res, stdout);
    if (rc != 0) return rc;
    if (no_history) return EXIT_OK;
    if (ran == 0) {
        printf("\nhistory: every cell was cached; nothing appended\n");
        return EXIT_OK;
    }
    if (!strcmp(history, DM_DEFAULT_HISTORY) && access(DM_SOURCE_DIR "/benches", F_OK) != 0) {
        /* a binary away from its source tree: only an explicit --history is an error */
        printf("\nhistory: %s is gone; nothing appended (use --history FILE)\n",
               DM_SOURCE_DIR "/benches");
        return EXIT_OK;
    }
    if (dm_ab_history(&spec, &res, history, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_FAIL;
    }
    printf("\nhistory: appended %d rows to %s\n", 2 * spec.n_arms, history);
    return EXIT_OK;
}
