/* cmd_train.c — `dormouse train`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>


#include "io/ckpt.h"
#include "cli/cli.h"
#include "jobs/train.h"

static const char *HELP =
    "usage: dormouse train [--data PATH] [--out RUN_DIR] [--config FILE.json] [--set key=value]...\n"
    "       dormouse train --resume RUN_DIR [--set key=value]... [--until N]\n"
    "\n"
    "Train a model. Defaults: the d2 model (1,976,712 parameters) on the bundled corpus\n"
    "(" DM_DEFAULT_DATA "), batch 8 x 512 bytes; the last eval_window bytes of the corpus\n"
    "are the validation window, training samples come from everything before it.\n"
    "\n"
    "options:\n"
    "  --data PATH        corpus: a file (plain or .gz) or a directory (its files, sorted)\n"
    "  --out RUN_DIR      run directory (default runs/run-YYYYmmdd-HHMMSS): config.json,\n"
    "                     metrics.jsonl, ckpt-NNNNNNNN/, summary.json\n"
    "  --config FILE      JSON object of config keys\n"
    "  --set key=value    one config key (repeatable; applied after --config)\n"
    "  --resume RUN_DIR   continue RUN_DIR from its newest checkpoint, exactly; model keys\n"
    "                     cannot change, others (e.g. steps) can be --set\n"
    "  --until N          stop after step N with a checkpoint (the schedule still follows\n"
    "                     `steps`); continue later with --resume\n"
    "\n"
    "config keys (default, meaning):\n";

int dm_cmd_train(int argc, char **argv) {
    static const char *const with_value[] = {"--data", "--out", "--config", "--set",
                                             "--resume", "--until", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *data = NULL, *out = NULL, *config = NULL, *resume = NULL;
    const char *sets[256];
    int nsets = 0, r;
    long until = 0;
    while ((r = dm_args_next(&a, "train")) > 0) {
        if (!a.name) {
            fprintf(stderr, "dormouse train: unexpected argument '%s'\n", a.value);
            return EXIT_USAGE;
        }
        if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            dm_cli_print_keys(stdout);
            return EXIT_OK;
        }
        if (!strcmp(a.name, "--data")) data = a.value;
        else if (!strcmp(a.name, "--out")) out = a.value;
        else if (!strcmp(a.name, "--config")) config = a.value;
        else if (!strcmp(a.name, "--resume")) resume = a.value;
        else if (!strcmp(a.name, "--until")) {
            if (dm_cli_long("--until", a.value, 1, 1L << 40, &until)) return EXIT_USAGE;
        } else if (nsets < 256) sets[nsets++] = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    if (resume && out && strcmp(resume, out) != 0) {
        fprintf(stderr, "error: --resume continues RUN_DIR in place; do not give a different --out\n");
        return EXIT_USAGE;
    }

    dm_config cfg, saved;
    dm_config_default(&cfg);
    char err[8192], path[4200];
    if (resume) {
        snprintf(path, sizeof path, "%s/config.json", resume);
        struct stat st;
        if (stat(path, &st) != 0) {
            fprintf(stderr, "error: cannot resume: %s is not a run directory (no config.json)\n", resume);
            return EXIT_USAGE;
        }
        if (dm_cli_config_file(&cfg, path)) return EXIT_USAGE;
        saved = cfg;
    }
    if (config && dm_cli_config_file(&cfg, config)) return EXIT_USAGE;
    for (int i = 0; i < nsets; i++)
        if (dm_cli_set(&cfg, sets[i])) return EXIT_USAGE;
    if (dm_config_validate(&cfg, err, sizeof err)) {
        fprintf(stderr, "error: invalid config: %s\n", err);
        return EXIT_USAGE;
    }
    if (resume) {
        const char *diff = dm_config_model_diff(&saved, &cfg);
        if (diff) {
            char va[64], vb[64];
            dm_config_get(&saved, diff, va, sizeof va);
            dm_config_get(&cfg, diff, vb, sizeof vb);
            fprintf(stderr, "error: cannot resume: the run has %s=%s, the flags ask for %s=%s "
                            "(model keys cannot change)\n", diff, va, diff, vb);
            return EXIT_USAGE;
        }
    }

    /* the corpus: --data, else the one the run used, else the bundled one */
    char datapath[4200] = DM_DEFAULT_DATA, outbuf[256];
    if (data) snprintf(datapath, sizeof datapath, "%s", data);
    else if (resume) {
        snprintf(path, sizeof path, "%s/data_path", resume);
        char *p = dm_read_file(path, err, sizeof err);
        if (p) {
            p[strcspn(p, "\n")] = 0;
            snprintf(datapath, sizeof datapath, "%s", p);
            free(p);
        }
    }
    if (!out) out = resume;
    if (!out) {
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(outbuf, sizeof outbuf, "runs/run-%Y%m%d-%H%M%S", &tm);
        out = outbuf;
    }
    dm_train_args ta = {datapath, out, resume != NULL, until};
    return dm_train(&cfg, &ta);
}
