/* cmd_train.c — `dormouse train`: its flags (the job is src/jobs/train.c). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "jobs/train.h"

static const char *HELP =
    "usage: dormouse train [--data PATH] [--val PATH] [--out RUN_DIR] [--config FILE.json]\n"
    "                      [--time-budget DURATION] [--steps N] [--set key=value]...\n"
    "                      [--verify-data]\n"
    "       dormouse train --init-from RUN_OR_CKPT [--data PATH] [--out RUN_DIR] ...\n"
    "       dormouse train --resume RUN_DIR [--set key=value]... [--until N]\n"
    "\n"
    "Train a model. Defaults: the d2 model (1,976,712 parameters) on the bundled corpus\n"
    "(data/kjv.txt.gz of the source tree; installed: PREFIX/share/dormouse/kjv.txt.gz),\n"
    "batch 8 x 512 bytes; the last eval_window bytes of the corpus are the validation\n"
    "window, training samples come from everything before it. Units: the train loss is the\n"
    "mean cross-entropy in nats per byte; val_bpb is in bits per byte (nats / ln 2).\n"
    "\n"
    "options:\n"
    "  --data PATH        corpus: a file (plain or .gz), a directory (its files, sorted),\n"
    "                     or a data directory of `dormouse prepare` (train.bin trains,\n"
    "                     val.bin validates; mapped, not read: docs/data.md)\n"
    "  --verify-data      a data directory: read its .bin files and check their CRC-32s\n"
    "                     against meta.json before training (a damaged one: exit 2)\n"
    "  --val PATH         validation corpus of its own (file or directory): the last\n"
    "                     eval_window bytes of PATH are the validation window, and all of\n"
    "                     --data trains; recorded in the run (resume and eval use it)\n"
    "  --out RUN_DIR      run directory (default runs/run-YYYYmmdd-HHMMSS, printed at the\n"
    "                     start): config.json, data_path, metrics.jsonl, ckpt-NNNNNNNN/,\n"
    "                     summary.json\n"
    "  --config FILE      JSON object of config keys\n"
    "  --set key=value    one config key (repeatable; applied after --config)\n"
    "  --steps N          the same as --set steps=N\n"
    "  --time-budget D    the same as --set time_budget=D (e.g. 5m, 90s, 1h30m): the run,\n"
    "                     evaluation included, fits D of wall clock: the warmup's first\n"
    "                     steps (at most 64) are timed, then `steps` is fixed from their\n"
    "                     rate (or at a stop before: Ctrl-C keeps the steps done); a\n"
    "                     machine that slows down later gets the run cut with a cooldown\n"
    "                     (schedule_steps), ending within 5% of D at 2x slower, and grown\n"
    "                     back up to the plan when it recovers.\n"
    "                     config.json records both keys (a rerun with them set is the same\n"
    "                     run, bit for bit; a resume keeps them). docs/budget.md\n"
    "  --resume RUN_DIR   continue RUN_DIR from its newest checkpoint, exactly; model keys\n"
    "                     cannot change, others (e.g. steps) can be --set\n"
    "  --init-from RUN_OR_CKPT\n"
    "                     fine-tune: a new run (in --out) that starts from the weights of\n"
    "                     RUN_OR_CKPT (a run directory: its newest checkpoint that loads;\n"
    "                     a ckpt-NNNNNNNN directory; a model file), with a fresh optimizer\n"
    "                     and lr schedule, on --data. The model keys are the parent's (a\n"
    "                     --set or --config asking for another value exits 2 naming the\n"
    "                     key); the other keys are a fresh run's. RUN_DIR/parent.json\n"
    "                     records the parent (path, step, CRC-32 of its model file); a\n"
    "                     --resume of the new run continues it without reading the parent.\n"
    "                     Not with --resume\n"
    "  --until N          stop after step N with a checkpoint (the schedule still follows\n"
    "                     `steps`); continue later with --resume\n"
    "\n"
    "Checkpoints: every ckpt_time of wall clock (5 minutes), every ckpt_every steps when set,\n"
    "and at the end; the two newest are kept (sample and eval use the newest, also while the\n"
    "run trains). -v prints the parameter and dispatch tables (kept as params.txt and\n"
    "dispatch.txt in RUN_DIR).\n"
    "\n"
    "Ctrl-C (SIGINT) or SIGTERM stops after the current step (or the current window of an\n"
    "evaluation of several) with a checkpoint, exit 130 (SIGINT) or 143 (SIGTERM); before\n"
    "the first step, without one. A second one ends the process at once.\n"
    "\n"
    "RUN_DIR is locked while a command writes it (RUN_DIR/.lock): a second writer exits 2\n"
    "(\"RUN_DIR is in use by process N\"). A command that fails before it saved a\n"
    "checkpoint leaves RUN_DIR as it found it. --resume continues from the newest checkpoint\n"
    "that loads (a damaged one is skipped, with a note), on the corpus the run trained on\n"
    "(data_path records its size and CRC-32; --data must name the same bytes), and only\n"
    "when steps is beyond the checkpoint's step. Its config is RUN_DIR/config.json, then\n"
    "--set, against the checkpoint's own: keys of length, cadence and threads may differ\n"
    "(\"changed: steps 1000 -> 2000\"); another key that differs stops it (exit 2) unless\n"
    "--set states it (docs/robustness.md).\n"
    "\n"
    "A step is grad_accum micro-batches of batch_size sequences. Under MPI,\n"
    "  mpirun -np N dormouse train ... --set grad_accum=M   (M a multiple of N)\n"
    "trains one model data-parallel: rank r runs micro-batches r, r+N, ... of each step and\n"
    "the results are those of one process with the same grad_accum, bit for bit; rank 0\n"
    "alone reads and writes the run directory; a checkpoint resumes under any N. SIGTERM to\n"
    "any rank stops them all after the same step with a checkpoint (docs/mpi.md).\n"
    "\n"
    "config keys (name, default, meaning), by group:\n\n";

int dm_cmd_train(int argc, char **argv, const dm_job_io *io, dm_comm *comm) {
    static const char *const with_value[] = {"--data", "--val", "--out", "--config", "--set",
                                             "--resume", "--until", "--time-budget",
                                             "--steps", "--init-from", NULL};
    static const char *const flags[] = {"--help", "-h", "--verify-data", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *out = NULL, *resume = NULL, *sets[256];
    char budget[256], steps[256];
    dm_train_args ta = {0};
    int r;
    while ((r = dm_args_next(&a, "train")) > 0) {
        if (!a.name) {
            fprintf(stderr, "error: train: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            dm_cli_print_keys(stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--data")) ta.data = a.value;
        else if (!strcmp(a.name, "--verify-data")) ta.verify_data = 1;
        else if (!strcmp(a.name, "--val")) ta.val = a.value;
        else if (!strcmp(a.name, "--out")) out = a.value;
        else if (!strcmp(a.name, "--config")) ta.config_file = a.value;
        else if (!strcmp(a.name, "--resume")) resume = a.value;
        else if (!strcmp(a.name, "--init-from")) ta.init_from = a.value;
        else if (!strcmp(a.name, "--until")) {
            if (dm_cli_long("--until", a.value, 1, 1L << 40, &ta.until)) return EXIT_USAGE;
        } else if (ta.n_sets < 256) { /* --set, --time-budget, --steps (the last one wins) */
            const char *set = a.value;
            if (!strcmp(a.name, "--time-budget"))
                snprintf(budget, sizeof budget, "time_budget=%s", a.value), set = budget;
            else if (!strcmp(a.name, "--steps"))
                snprintf(steps, sizeof steps, "steps=%s", a.value), set = steps;
            sets[ta.n_sets++] = set;
        } else {
            fprintf(stderr, "error: too many --set options\n");
            return EXIT_USAGE;
        }
    }
    if (r < 0) return EXIT_USAGE;
    if (resume && ta.init_from) {
        fprintf(stderr, "error: --init-from starts a new run and --resume continues one: give "
                "one of them\n");
        return EXIT_USAGE;
    }
    if (resume && out && strcmp(resume, out) != 0) {
        fprintf(stderr, "error: --resume continues RUN_DIR in place; do not give a different --out\n");
        return EXIT_USAGE;
    }
    char outbuf[256];
    if (!out) out = resume;
    if (!out) {
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(outbuf, sizeof outbuf, "runs/run-%Y%m%d-%H%M%S", &tm);
        size_t len = strlen(outbuf);
        for (int k = 2; access(outbuf, F_OK) == 0 && k < 1000; k++) /* started the same second */
            snprintf(outbuf + len, sizeof outbuf - len, "-%d", k);
        out = outbuf;
    }
    ta.out = out;
    ta.resume = resume != NULL;
    ta.sets = sets;
    ta.comm = comm;
    dm_status st = dm_train(&ta, io);
    return dm_cli_exit(io, &st);
}
