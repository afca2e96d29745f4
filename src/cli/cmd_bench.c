/* cmd_bench.c — `dormouse bench`: time the training step (the job is src/bench.c). */
#include <stdio.h>
#include <string.h>

#include "jobs/bench.h"
#include "cli/cli.h"

static const char *HELP =
    "usage: dormouse bench [--data PATH] [--set key=value]... [--reps N] [--history FILE]\n"
    "\n"
    "Time the training step of a config (default: the d2 model, batch 8 x 512) on one batch\n"
    "of the corpus: forward, forward+backward, and the full step (forward, backward,\n"
    "optimizer update). The same config with kda_impl=reference is the baseline, measured\n"
    "in the same run: both are built and warmed up with one step, then run N reps each,\n"
    "interleaved rep by rep. Reported per stage: ms and tokens/s, the median and the spread\n"
    "(max - min) over the reps, and the speed-up over the baseline (reference time / time,\n"
    "per rep, median). The reps are watched by the contention probe of `dormouse ab`: when\n"
    "the machine was busy (1-minute load above the cores + 0.5, CPU steal above 2%, or other\n"
    "processes on the cores the threads needed) the rows are flagged \"contended\" with the\n"
    "reasons.\n"
    "\n"
    "Output: notes (lines starting with '#', a readable table among them), then one row per\n"
    "measurement in the columns of benches/history.tsv: date, commit, machine, what\n"
    "(bench:step), config, metric (forward_ms, fwd_bwd_ms, step_ms, *_tokens_per_s,\n"
    "*_speedup_over_reference), value, spread, n (reps), flags (\"dirty\" when the source\n"
    "tree has uncommitted changes). The rows (the lines not starting with '#') can be\n"
    "appended to the history as they are.\n"
    "\n"
    "options:\n"
    "  --data PATH       corpus: a file (plain or .gz) or a directory (default\n"
    "                    " DM_DEFAULT_DATA "); the batch is training step 0's\n"
    "  --set key=value   one config key (repeatable; `dormouse train --help` lists them).\n"
    "                    Keys only the training loop reads (steps, eval_every, log_every,\n"
    "                    ckpt_every, verify_fused, atlas) change nothing here\n"
    "  --reps N          timed reps of each arm (default 5)\n"
    "  --history FILE    also append the rows to FILE (created with the header when\n"
    "                    missing), e.g. benches/history.tsv; default: print only\n"
    "\n"
    "example:\n"
    "  dormouse bench --set threads=2 --reps 9 --history benches/history.tsv\n"
    "\n"
    "Exit codes: 0 done, 1 runtime failure (non-finite loss, out of memory, history not\n"
    "written), 2 bad usage or input (flags, config, corpus, history not writable).\n";

int dm_cmd_bench(int argc, char **argv) {
    static const char *const with_value[] = {"--data", "--set", "--reps", "--history", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    dm_bench_args ba = {DM_DEFAULT_DATA, 5, NULL};
    dm_config cfg;
    dm_config_default(&cfg);
    int r;
    while ((r = dm_args_next(&a, "bench")) > 0) {
        long v;
        if (!a.name) {
            fprintf(stderr, "dormouse bench: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--data")) ba.data = a.value;
        else if (!strcmp(a.name, "--history")) ba.history = a.value;
        else if (!strcmp(a.name, "--reps")) {
            if (dm_cli_long("--reps", a.value, 1, 1000000, &v)) return EXIT_USAGE;
            ba.reps = (int)v;
        } else if (dm_cli_set(&cfg, a.value)) return EXIT_USAGE;
    }
    if (r < 0) return EXIT_USAGE;
    char err[DM_ERRLEN];
    if (dm_config_validate(&cfg, err, sizeof err)) {
        fprintf(stderr, "error: invalid config: %s\n", err);
        return EXIT_USAGE;
    }
    return dm_bench_step(&cfg, &ba, stdout);
}
