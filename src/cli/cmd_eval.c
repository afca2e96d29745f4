/* cmd_eval.c — `dormouse eval` and `dormouse sample`: their flags (the jobs are
 * src/jobs/eval.c and src/jobs/sample.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "jobs/eval.h"
#include "jobs/sample.h"

static const char *EVAL_HELP =
    "usage: dormouse eval CKPT [--data PATH] [--set key=value]...\n"
    "\n"
    "Bits per byte of a checkpoint on the last eval_window bytes of a corpus (default: the\n"
    "bundled corpus, i.e. the validation window of a default run). CKPT is a run directory\n"
    "(its newest checkpoint), a checkpoint directory or a model.safetensors file.\n"
    "--set may change eval_window, seq_len, batch_size, threads; model keys must match the\n"
    "checkpoint.\n";

int dm_cmd_eval(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--data", "--set", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *ckpt = NULL, *data = NULL, *sets[256];
    int nsets = 0, r;
    while ((r = dm_args_next(&a, "eval")) > 0) {
        if (!a.name) {
            if (ckpt) {
                fprintf(stderr, "dormouse eval: unexpected argument '%s'\n", a.value);
                return EXIT_USAGE;
            }
            ckpt = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(EVAL_HELP, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--data")) data = a.value;
        else if (nsets < 256) sets[nsets++] = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    if (!ckpt) {
        fprintf(stderr, "dormouse eval: missing CKPT (try `dormouse eval --help`)\n");
        return EXIT_USAGE;
    }
    dm_eval_args ea = {ckpt, data, sets, nsets};
    dm_status st = dm_eval(&ea, io);
    return dm_cli_exit(io, &st);
}

static const char *SAMPLE_HELP =
    "usage: dormouse sample CKPT [--prompt S] [--len N] [--temperature X] [--top-k K] [--seed S]\n"
    "                            [--set key=value]...\n"
    "\n"
    "Generate bytes from a checkpoint by recurrent inference (O(1) state per byte), streamed\n"
    "to stdout after the prompt. Defaults: --len 400 --temperature 0.8 --top-k 0 (off)\n"
    "--seed 1; temperature 0 is greedy. CKPT and --set as for `dormouse eval`.\n";

int dm_cmd_sample(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--prompt", "--len", "--temperature", "--top-k",
                                             "--seed", "--set", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256];
    int r;
    dm_sample_args s = {NULL, sets, 0, "", 400, 0.8f, 0, 1};
    while ((r = dm_args_next(&a, "sample")) > 0) {
        long v;
        double d;
        if (!a.name) {
            if (s.ckpt) {
                fprintf(stderr, "dormouse sample: unexpected argument '%s'\n", a.value);
                return EXIT_USAGE;
            }
            s.ckpt = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(SAMPLE_HELP, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--prompt")) s.prompt = a.value;
        else if (!strcmp(a.name, "--len")) {
            if (dm_cli_long("--len", a.value, 0, 1L << 30, &v)) return EXIT_USAGE;
            s.len = (int)v;
        } else if (!strcmp(a.name, "--temperature")) {
            if (dm_cli_double("--temperature", a.value, 0, 100, &d)) return EXIT_USAGE;
            s.temperature = (float)d;
        } else if (!strcmp(a.name, "--top-k")) {
            if (dm_cli_long("--top-k", a.value, 0, 256, &v)) return EXIT_USAGE;
            s.top_k = (int)v;
        } else if (!strcmp(a.name, "--seed")) {
            if (dm_cli_long("--seed", a.value, 0, 0x7fffffffffffffffL, &v)) return EXIT_USAGE;
            s.seed = (uint64_t)v;
        } else if (s.n_sets < 256) sets[s.n_sets++] = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    if (!s.ckpt) {
        fprintf(stderr, "dormouse sample: missing CKPT (try `dormouse sample --help`)\n");
        return EXIT_USAGE;
    }
    dm_status st = dm_sample(&s, io);
    return dm_cli_exit(io, &st);
}
