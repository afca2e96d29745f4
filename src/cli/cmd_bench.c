/* cmd_bench.c — `dormouse bench`: its flags (the job is src/jobs/bench.c). */
#include <stdio.h>
#include <string.h>

#include "jobs/bench.h"
#include "cli/cli.h"
#include "cli/commands.h"

static const char *HELP =
    "usage: dormouse bench [--data PATH] [--set key=value]... [--baseline key=value]...\n"
    "                      [--reps N] [--memory] [--history FILE] [--verify-data]\n"
    "                      [--from RUN_OR_CKPT]\n"
    "\n"
    "Time the training step of a config (default: the d2 model, batch 8 x 512) on one batch\n"
    "of the corpus: forward, forward+backward, and the full step (forward, backward,\n"
    "optimizer update), against a baseline measured in the same run: the same config with\n"
    "the --baseline keys applied (default: kda_impl=reference, the reference core). Both\n"
    "are built and warmed up with one step, then run N reps each, interleaved rep by rep\n"
    "(the order alternating). Reported per stage: ms and tokens/s, the median and the spread\n"
    "(max - min) over the reps, and the speed-up over the baseline (baseline time / time,\n"
    "per rep, median). The reps are watched by the contention probe of `dormouse ab`: when\n"
    "the machine was busy (1-minute load above the cores + 0.5, CPU steal above 2%, or other\n"
    "processes on the cores the threads needed) the rows are flagged \"contended\" with the\n"
    "reasons.\n"
    "\n"
    "Output: notes (lines starting with '#', a readable table among them), then one row per\n"
    "measurement in the columns of benches/history.tsv: date, commit, machine, what\n"
    "(bench:step), config, metric (forward_ms, fwd_bwd_ms, step_ms, *_tokens_per_s, and\n"
    "*_speedup_over_reference against the default baseline, else *_speedup_over_baseline\n"
    "with \"| baseline KEY=VALUE ...\" at the end of its config), value, spread, n (reps),\n"
    "flags (\"dirty\" when the source tree has uncommitted changes). The rows (the lines\n"
    "not starting with '#') can be appended to the history as they are.\n"
    "\n"
    "options:\n"
    "  --data PATH       corpus: a file (plain or .gz), a directory or a data directory\n"
    "                    of `dormouse prepare` (mapped; default: the bundled one, as for\n"
    "                    `dormouse train`); the batch is training step 0's\n"
    "  --verify-data     a data directory: check its .bin files' CRC-32s first\n"
    "  --from RUN_OR_CKPT  time the step of a trained model: the config, weights and\n"
    "                    optimizer state of the newest checkpoint of a run directory (or of\n"
    "                    a ckpt-N directory or model file); --set may change the keys that\n"
    "                    are not model keys. Without --baseline the baseline is the same\n"
    "                    config at its initial weights (weights=init), so the speed-up says\n"
    "                    how the trained model's step compares with a fresh one's\n"
    "  --set key=value   one config key (repeatable; `dormouse train --help` lists them).\n"
    "                    Keys only the training loop reads (steps, eval_every, log_every,\n"
    "                    ckpt_every, verify_fused, atlas) change nothing here\n"
    "  --baseline key=value  a key of the baseline (repeatable; applied over the config):\n"
    "                    e.g. --baseline gemm=openblas --baseline threads=2; a model key\n"
    "                    times two models. Default: kda_impl=reference\n"
    "  --reps N          timed reps of each arm (default 5)\n"
    "  --memory          also each arm's memory (`dormouse plan`'s figures) and the rows\n"
    "                    saved_activations_mib and total_mib per arm, and\n"
    "                    saved_activations_ratio_to_baseline (the arm's over the baseline's)\n"
    "  --history FILE    also append the rows to FILE (created with the header when\n"
    "                    missing), e.g. benches/history.tsv; default: print only\n"
    "\n"
    "A step is the training step: grad_accum micro-batches of batch_size sequences; tokens/s\n"
    "count all of them. Under `mpirun -np N` (grad_accum a multiple of N) every process runs\n"
    "its share and rank 0 reports, with per arm the MB rank 0 sent per step and its ms\n"
    "inside the exchanges (metrics comm_mb_per_step, comm_ms_per_step; processes=N in the\n"
    "config column). scripts/bench_mpi.sh compares mpirun -np 2 with one process.\n"
    "\n"
    "example:\n"
    "  dormouse bench --set threads=2 --reps 9 --history benches/history.tsv\n"
    "  mpirun -np 2 dormouse bench --set threads=1 --set batch_size=4 --set grad_accum=2\n"
    "  dormouse bench --set gemm=onednn --baseline gemm=openblas --reps 9\n"
    "  dormouse bench --set checkpointing=balanced --baseline checkpointing=none --memory\n"
    "  dormouse bench --from runs/default --reps 5\n"
    "\n"
    "Exit codes: 0 done, 1 runtime failure (non-finite loss, out of memory, history not\n"
    "written), 2 bad usage or input (flags, config, corpus, history not writable).\n";

int dm_cmd_bench(int argc, char **argv, const dm_job_io *io, dm_comm *comm) {
    static const char *const with_value[] = {"--data", "--set", "--baseline", "--reps",
                                             "--history", "--from", NULL};
    static const char *const flags[] = {"--help", "-h", "--memory", "--verify-data", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256], *baseline[256];
    dm_bench_args ba = {NULL, 5, NULL, sets, 0, baseline, 0, 0, 0, NULL, comm};
    int r;
    while ((r = dm_args_next(&a, "bench")) > 0) {
        long v;
        if (!a.name) {
            fprintf(stderr, "error: bench: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--memory")) ba.memory = 1;
        else if (!strcmp(a.name, "--verify-data")) ba.verify_data = 1;
        else if (!strcmp(a.name, "--data")) ba.data = a.value;
        else if (!strcmp(a.name, "--history")) ba.history = a.value;
        else if (!strcmp(a.name, "--from")) ba.from = a.value;
        else if (!strcmp(a.name, "--reps")) {
            if (dm_cli_long("--reps", a.value, 1, 1000000, &v)) return EXIT_USAGE;
            ba.reps = (int)v;
        } else if (ba.n_sets == 256 || ba.n_baseline == 256) {
            fprintf(stderr, "error: too many %s options\n", a.name);
            return EXIT_USAGE;
        } else if (!strcmp(a.name, "--baseline")) baseline[ba.n_baseline++] = a.value;
        else sets[ba.n_sets++] = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    dm_status st = dm_bench_step(&ba, io);
    return dm_cli_exit(io, &st);
}
