/* cmd_eval.c — `dormouse eval` and `dormouse sample`: load a checkpoint, evaluate BPB
 * on a corpus window, or generate text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt.h"
#include "cli/cli.h"
#include "io/data.h"
#include "jobs/eval.h"
#include "jobs/sample.h"

/* Load the model of checkpoint path with --set overrides applied; model keys given in
 * sets must agree with the checkpoint. NULL (error printed) on failure. */
static dm_model *load_model(const char *path, const char *const *sets, int nsets, dm_config *cfg,
                            long *step) {
    char dir[4096], err[8192];
    dm_config saved;
    if (dm_ckpt_resolve(path, dir, sizeof dir, err, sizeof err) ||
        dm_ckpt_read_config(dir, &saved, step, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return NULL;
    }
    *cfg = saved;
    for (int i = 0; i < nsets; i++)
        if (dm_cli_set(cfg, sets[i])) return NULL;
    const char *diff = dm_config_model_diff(&saved, cfg);
    if (diff) {
        char va[64], vb[64];
        dm_config_get(&saved, diff, va, sizeof va);
        dm_config_get(cfg, diff, vb, sizeof vb);
        fprintf(stderr, "error: checkpoint %s has %s=%s, the flags ask for %s=%s\n", dir, diff, va,
                diff, vb);
        return NULL;
    }
    if (dm_config_validate(cfg, err, sizeof err)) {
        fprintf(stderr, "error: invalid config: %s\n", err);
        return NULL;
    }
    dm_set_threads(cfg->threads);
    dm_model *m = dm_model_create(cfg, err, sizeof err);
    if (!m || dm_ckpt_load(dir, m, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        dm_model_free(m);
        return NULL;
    }
    return m;
}

static const char *EVAL_HELP =
    "usage: dormouse eval CKPT [--data PATH] [--set key=value]...\n"
    "\n"
    "Bits per byte of a checkpoint on the last eval_window bytes of a corpus (default: the\n"
    "bundled corpus, i.e. the validation window of a default run). CKPT is a run directory\n"
    "(its newest checkpoint), a checkpoint directory or a model.safetensors file.\n"
    "--set may change eval_window, seq_len, batch_size, threads; model keys must match the\n"
    "checkpoint.\n";

int dm_cmd_eval(int argc, char **argv) {
    static const char *const with_value[] = {"--data", "--set", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *ckpt = NULL, *data = DM_DEFAULT_DATA, *sets[256];
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
    dm_config cfg;
    long step;
    dm_model *m = load_model(ckpt, sets, nsets, &cfg, &step);
    if (!m) return EXIT_USAGE;
    dm_corpus c;
    char err[8192];
    if (dm_corpus_load(&c, data, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        dm_model_free(m);
        return EXIT_USAGE;
    }
    size_t w = (size_t)cfg.eval_window < c.n ? (size_t)cfg.eval_window : c.n;
    if (w < 2) {
        fprintf(stderr, "error: corpus %s is too small to evaluate (%zu bytes)\n", data, c.n);
        dm_corpus_free(&c);
        dm_model_free(m);
        return EXIT_USAGE;
    }
    double bpb = dm_eval_bpb(m, c.bytes + (c.n - w), w, cfg.batch_size, cfg.seq_len);
    int rc = EXIT_OK;
    if (!(bpb == bpb)) {
        fprintf(stderr, "error: evaluation gave NaN\n");
        rc = EXIT_FAIL;
    } else {
        printf("val_bpb %.6f on the last %zu bytes of %s (checkpoint step %ld)\n", bpb, w, data, step);
    }
    dm_corpus_free(&c);
    dm_model_free(m);
    return rc;
}

static const char *SAMPLE_HELP =
    "usage: dormouse sample CKPT [--prompt S] [--len N] [--temperature X] [--top-k K] [--seed S]\n"
    "\n"
    "Generate bytes from a checkpoint by recurrent inference (O(1) state per byte), streamed\n"
    "to stdout after the prompt. Defaults: --len 400 --temperature 0.8 --top-k 0 (off)\n"
    "--seed 1; temperature 0 is greedy. CKPT as for `dormouse eval`.\n";

int dm_cmd_sample(int argc, char **argv) {
    static const char *const with_value[] = {"--prompt", "--len", "--temperature", "--top-k",
                                             "--seed", "--set", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *ckpt = NULL, *sets[256];
    int nsets = 0, r;
    dm_sample_args s = {"", 400, 0.8f, 0, 1};
    while ((r = dm_args_next(&a, "sample")) > 0) {
        long v;
        double d;
        if (!a.name) {
            if (ckpt) {
                fprintf(stderr, "dormouse sample: unexpected argument '%s'\n", a.value);
                return EXIT_USAGE;
            }
            ckpt = a.value;
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
        } else if (nsets < 256) sets[nsets++] = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    if (!ckpt) {
        fprintf(stderr, "dormouse sample: missing CKPT (try `dormouse sample --help`)\n");
        return EXIT_USAGE;
    }
    dm_config cfg;
    long step;
    dm_model *m = load_model(ckpt, sets, nsets, &cfg, &step);
    if (!m) return EXIT_USAGE;
    int rc = dm_sample(m, &s, stdout);
    printf("\n");
    if (rc) fprintf(stderr, "error: sampling failed (out of memory or non-finite logits)\n");
    dm_model_free(m);
    return rc ? EXIT_FAIL : EXIT_OK;
}
