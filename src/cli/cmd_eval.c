/* cmd_eval.c — `dormouse eval` and `dormouse sample`: their flags (the jobs are
 * src/jobs/eval.c and src/jobs/sample.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "jobs/eval.h"
#include "jobs/load.h"
#include "jobs/sample.h"

/* "k1, k2, ...;" of a NULL-terminated key list, on lines indented as the options' text */
static void print_keys(FILE *f, const char *const *keys) {
    int col = 21;
    fprintf(f, "%*s", col, "");
    for (int i = 0; keys[i]; i++) {
        fprintf(f, "%s%s", keys[i], keys[i + 1] ? "," : ";");
        col += (int)strlen(keys[i]) + 1;
        if (keys[i + 1] && col + 1 + (int)strlen(keys[i + 1]) + 1 > 88) {
            fprintf(f, "\n%*s", 21, "");
            col = 21;
        } else if (keys[i + 1]) {
            fputc(' ', f);
            col++;
        }
    }
}

static const char *EVAL_HELP =
    "usage: dormouse eval CKPT [--data PATH | --val PATH] [--set key=value]... [--verify-data]\n"
    "\n"
    "Bits per byte of a checkpoint on the last eval_window bytes of a corpus: the mean\n"
    "cross-entropy, in bits, of predicting every byte of the window from the bytes before\n"
    "it, the window cut into sequences of seq_len bytes (the same number `dormouse train`\n"
    "logs as val_bpb). CKPT is a run directory (its newest checkpoint that loads: a damaged\n"
    "one is skipped, with a note on stderr), a checkpoint directory or a model.safetensors\n"
    "file (exactly that one).\n"
    "\n"
    "The corpus: --val PATH or --data PATH (a file, plain or .gz, a directory, or a data\n"
    "directory of `dormouse prepare`, whose val.bin is scored); else the\n"
    "run's own, as recorded in its run directory (the --val it trained with, else its\n"
    "corpus), so `dormouse eval RUN_DIR` repeats the run's validation; else (a model file\n"
    "outside a run) the bundled corpus. A corpus shorter than eval_window is refused, as\n"
    "train refuses it; --set eval_window=N scores a smaller window. eval_windows=N scores N\n"
    "fixed windows of the validation set, eval_windows=all all of it (docs/data.md); the\n"
    "note gives the bytes scored. The matrix products run fp32 (precision=fp32) whatever\n"
    "the run trained with or this CPU has, so the number does not depend on the machine;\n"
    "--set precision=bf16 asks for bf16 on purpose, and the note names it. An evaluation\n"
    "of several windows shows its progress after 2 s; Ctrl-C (SIGINT) or SIGTERM stops\n"
    "it between windows: exit 130 or 143, no result.\n"
    "\n"
    "options:\n"
    "  --data PATH        score the last eval_window bytes of PATH\n"
    "  --val PATH         the same, for a validation file or directory\n"
    "  --verify-data      a data directory: check its .bin files' CRC-32s first\n"
    "  --set key=value    a config key eval reads (repeatable):\n";
static const char *EVAL_HELP2 =
    "\n"
    "                     model keys may be given only with the checkpoint's values; any\n"
    "                     other key does nothing for eval and is refused\n";

int dm_cmd_eval(int argc, char **argv, const dm_job_io *io, dm_comm *comm) {
    static const char *const with_value[] = {"--data", "--val", "--set", NULL};
    static const char *const flags[] = {"--help", "-h", "--verify-data", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256];
    dm_eval_args ea = {NULL, NULL, NULL, sets, 0, NULL, 0};
    int r;
    while ((r = dm_args_next(&a, "eval")) > 0) {
        if (!a.name) {
            if (ea.ckpt) {
                fprintf(stderr, "error: eval: unexpected argument '%s'\n", a.value);
                return EXIT_USAGE;
            }
            ea.ckpt = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(EVAL_HELP, stdout);
            print_keys(stdout, DM_EVAL_KEYS);
            fputs(EVAL_HELP2, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--data")) ea.data = a.value;
        else if (!strcmp(a.name, "--val")) ea.val = a.value;
        else if (!strcmp(a.name, "--verify-data")) ea.verify_data = 1;
        else if (ea.n_sets < 256) sets[ea.n_sets++] = a.value;
        else {
            fprintf(stderr, "error: too many --set options\n");
            return EXIT_USAGE;
        }
    }
    if (r < 0) return EXIT_USAGE;
    if (!ea.ckpt) {
        fprintf(stderr, "error: eval: missing CKPT (try `dormouse eval --help`)\n");
        return EXIT_USAGE;
    }
    ea.comm = comm;
    dm_status st = dm_eval(&ea, io);
    return dm_cli_exit(io, &st);
}

static const char *SAMPLE_HELP =
    "usage: dormouse sample CKPT [--prompt S | --prompt-file FILE] [--len N] [--temperature X]\n"
    "                            [--top-k K] [--top-p P] [--num-samples N] [--stop STRING]\n"
    "                            [--seed S] [--set key=value]...\n"
    "\n"
    "Generate bytes from a checkpoint by recurrent inference (O(1) state per byte), streamed\n"
    "to stdout after the prompt, then a newline. CKPT as for `dormouse eval`.\n"
    "\n"
    "options:\n"
    "  --prompt S         bytes to start from (default: none, i.e. after a newline)\n"
    "  --prompt-file F    the prompt is the bytes of file F\n"
    "  --len N            bytes to generate per sample (default 400)\n"
    "  --temperature X    0 is greedy (default 0.8)\n"
    "  --top-k K          draw from the K most likely bytes only (default 0: all)\n"
    "  --top-p P          draw from the fewest most likely bytes whose probability sums to\n"
    "                     P or more (nucleus sampling; default 1: all)\n"
    "  --num-samples N    N samples from the same prompt, each under a line\n"
    "                     \"=== sample K of N ===\" (default 1)\n"
    "  --stop STRING      end a sample once it has generated STRING (printed; \\n, \\t, \\\\\n"
    "                     are read as newline, tab, backslash)\n"
    "  --seed S           sample K draws from the stream (S, K): the same S gives the same\n"
    "                     samples (default 1)\n"
    "  --set key=value    a config key sample reads (repeatable):\n";
static const char *SAMPLE_HELP2 =
    "\n"
    "                     model keys may be given only with the checkpoint's values\n";

/* \n, \t, \r, \\ in s -> the bytes, into buf; returns the length, -1 on a bad escape */
static long unescape(const char *s, char *buf, size_t n) {
    size_t k = 0;
    for (; *s && k < n; s++) {
        if (*s != '\\') {
            buf[k++] = *s;
            continue;
        }
        switch (*++s) {
        case 'n': buf[k++] = '\n'; break;
        case 't': buf[k++] = '\t'; break;
        case 'r': buf[k++] = '\r'; break;
        case '\\': buf[k++] = '\\'; break;
        default: return -1;
        }
    }
    return *s ? -1 : (long)k;
}

int dm_cmd_sample(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--prompt", "--prompt-file", "--len", "--temperature",
                                             "--top-k", "--top-p", "--num-samples", "--stop",
                                             "--seed", "--set", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *sets[256];
    char stop[1024];
    int r;
    dm_sample_args s = {.sets = sets, .len = 400, .temperature = 0.8f, .top_p = 1, .seed = 1,
                        .num_samples = 1};
    while ((r = dm_args_next(&a, "sample")) > 0) {
        long v;
        double d;
        if (!a.name) {
            if (s.ckpt) {
                fprintf(stderr, "error: sample: unexpected argument '%s'\n", a.value);
                return EXIT_USAGE;
            }
            s.ckpt = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(SAMPLE_HELP, stdout);
            print_keys(stdout, DM_SAMPLE_KEYS);
            fputs(SAMPLE_HELP2, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--prompt")) {
            s.prompt = a.value;
            s.prompt_len = strlen(a.value);
        } else if (!strcmp(a.name, "--prompt-file")) s.prompt_file = a.value;
        else if (!strcmp(a.name, "--len")) {
            if (dm_cli_long("--len", a.value, 0, 1L << 30, &v)) return EXIT_USAGE;
            s.len = (int)v;
        } else if (!strcmp(a.name, "--temperature")) {
            if (dm_cli_double("--temperature", a.value, 0, 100, &d)) return EXIT_USAGE;
            s.temperature = (float)d;
        } else if (!strcmp(a.name, "--top-k")) {
            if (dm_cli_long("--top-k", a.value, 0, 256, &v)) return EXIT_USAGE;
            s.top_k = (int)v;
        } else if (!strcmp(a.name, "--top-p")) {
            if (dm_cli_double("--top-p", a.value, 1e-9, 1, &d)) return EXIT_USAGE;
            s.top_p = (float)d;
        } else if (!strcmp(a.name, "--num-samples")) {
            if (dm_cli_long("--num-samples", a.value, 1, 1000000, &v)) return EXIT_USAGE;
            s.num_samples = (int)v;
        } else if (!strcmp(a.name, "--stop")) {
            long n = unescape(a.value, stop, sizeof stop);
            if (n <= 0) {
                fprintf(stderr, "error: --stop expects a non-empty string (escapes \\n \\t \\r "
                                "\\\\, at most %zu bytes), got '%s'\n", sizeof stop, a.value);
                return EXIT_USAGE;
            }
            s.stop = stop;
            s.stop_len = (size_t)n;
        } else if (!strcmp(a.name, "--seed")) {
            if (dm_cli_long("--seed", a.value, 0, 0x7fffffffffffffffL, &v)) return EXIT_USAGE;
            s.seed = (uint64_t)v;
        } else if (s.n_sets < 256) sets[s.n_sets++] = a.value;
        else {
            fprintf(stderr, "error: too many --set options\n");
            return EXIT_USAGE;
        }
    }
    if (r < 0) return EXIT_USAGE;
    if (!s.ckpt) {
        fprintf(stderr, "error: sample: missing CKPT (try `dormouse sample --help`)\n");
        return EXIT_USAGE;
    }
    if (s.prompt && s.prompt_file) {
        fprintf(stderr, "error: give --prompt or --prompt-file, not both\n");
        return EXIT_USAGE;
    }
    dm_status st = dm_sample(&s, io);
    return dm_cli_exit(io, &st);
}
