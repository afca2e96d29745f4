/* cmd_plan.c — `dormouse plan`: its flags (the job is src/jobs/plan.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "jobs/plan.h"

static const char *HELP =
    "usage: dormouse plan [--config FILE.json] [--set key=value]... [--reps N]\n"
    "\n"
    "What a config needs, without training: the memory of the model and of one training\n"
    "step at its batch_size x seq_len, and the measured time of a step. Memory, in MiB:\n"
    "  parameters, gradients    f32, one buffer each (and the bf16 copy of the parameters\n"
    "                           when the products run on hardware bf16)\n"
    "  optimizer state          AdamW moments (and Muon momentum), the parameters' layout\n"
    "  optimizer scratch        Muon's update buffer and Newton-Schulz work\n"
    "  gradient sum             with grad_accum > 1, the sum of the micro-batches'\n"
    "                           gradients (the parameters' layout)\n"
    "  saved activations        what the forward keeps for the backward: the residual\n"
    "                           stream and what `checkpointing` keeps (also shown for each\n"
    "                           of none, balanced, full)\n"
    "  recompute workspace      one block's activations that are not kept (balanced, full)\n"
    "  scratch                  the backward's gradients and the kernels' scratch\n"
    "  total                    the sum: what the arena, the model, the optimizer and the\n"
    "                           step allocate\n"
    "Then N training steps (each: the forward and backward of all grad_accum\n"
    "micro-batches, their gradient sum, the optimizer update) after one warm-up step,\n"
    "on bytes from the seeded generator (a step's time does not depend on the bytes):\n"
    "the median ms/step and its spread (max - min), tokens/s, the time `steps` steps take\n"
    "(evaluation apart), and the peak resident memory of the process.\n"
    "\n"
    "options:\n"
    "  --config FILE      JSON object of config keys\n"
    "  --set key=value    one config key (repeatable; applied after --config; `dormouse\n"
    "                     train --help` lists them)\n"
    "  --reps N           timed steps after the warm-up (default 3); 0: the figures only,\n"
    "                     nothing run and no arena allocated\n"
    "\n"
    "examples:\n"
    "  dormouse plan\n"
    "  dormouse plan --set checkpointing=balanced --set n_layer=8\n"
    "  dormouse plan --set batch_size=1 --set seq_len=65536 --set checkpointing=full\n"
    "\n"
    "Exit codes: 0 done, 1 runtime failure (out of memory, non-finite loss), 2 bad usage\n"
    "or input (flags, config).\n";

int dm_cmd_plan(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--config", "--set", "--reps", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256];
    dm_plan_args pa = {NULL, sets, 0, 3};
    int r;
    while ((r = dm_args_next(&a, "plan")) > 0) {
        long v;
        if (!a.name) {
            fprintf(stderr, "error: plan: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--config")) pa.config_file = a.value;
        else if (!strcmp(a.name, "--reps")) {
            if (dm_cli_long("--reps", a.value, 0, 1000000, &v)) return EXIT_USAGE;
            pa.reps = (int)v;
        } else if (pa.n_sets < 256) sets[pa.n_sets++] = a.value;
        else {
            fprintf(stderr, "error: too many --set options\n");
            return EXIT_USAGE;
        }
    }
    if (r < 0) return EXIT_USAGE;
    dm_status st = dm_plan_job(&pa, io);
    return dm_cli_exit(io, &st);
}
