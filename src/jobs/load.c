/* load.c — a checkpoint's model with overrides, its run directory, and the newest
 * checkpoint that loads (see load.h). */
#include "jobs/load.h"

#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/files.h"
#include "jobs/fair.h"
#include "jobs/step.h" /* the oversubscription note */
#include "model/host.h"


/* eval: the window and how it is cut, and how the forward runs */
const char *const DM_EVAL_KEYS[] = {"eval_window", "seq_len",      "batch_size", "kda_impl",
                                    "gemm",        "precision",    "chunk_size", "norm_impl",
                                    "threads",     "eval_windows", "backend",    "comm_timeout",
                                    NULL};
/* sample: recurrent inference reads only how the products run (the delta core is its
 * token-serial recurrence; the seed is --seed) */
const char *const DM_SAMPLE_KEYS[] = {"gemm", "precision", "norm_impl", "threads", "backend",
                                      NULL};

/* the group of a config key; -1 when there is no such key */
static int key_group(const char *key) {
    for (int i = 0; dm_config_key_name(i); i++)
        if (!strcmp(dm_config_key_name(i), key)) return dm_config_key_group(i);
    return -1;
}

static int in_list(const char *const *list, const char *key) {
    for (; list && *list; list++)
        if (!strcmp(*list, key)) return 1;
    return 0;
}

/* a line for dm_ckpt_loaded to warn with (cut when the notes are full) */
__attribute__((format(printf, 2, 3))) static void add_note(dm_ckpt_iter *it, const char *fmt,
                                                           ...) {
    size_t used = strlen(it->notes);
    if (used + 1 >= sizeof it->notes) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->notes + used, sizeof it->notes - used, fmt, ap);
    va_end(ap);
}

/* 1 (why in err) when c lies in a run directory whose config.json has other model keys:
 * a model file copied in, or made with another shape, is not a checkpoint of that run,
 * whatever its checksums say. */
static int foreign(dm_ckpt_iter *it, const dm_ckpt *c, char *err, size_t errlen) {
    char run[4096], path[4200], va[64], vb[64];
    if (!it->run_read && dm_load_run_dir(it->model_path, run, sizeof run) == 0) {
        snprintf(path, sizeof path, "%s/config.json", run);
        char *js = dm_read_file(path, err, errlen);
        dm_config_default(&it->run);
        it->has_run = js && !dm_config_from_json(&it->run, js, err, errlen);
        free(js);
    }
    it->run_read = 1;
    if (!it->has_run) return 0;
    const char *k = dm_config_diff(dm_ckpt_config(c), &it->run, DM_KEYS_MODEL, va, vb, sizeof va);
    if (!k) return 0;
    dm_load_run_dir(it->model_path, run, sizeof run);
    snprintf(err, errlen, "%.2000s is not a checkpoint of %.1000s: it has %s=%s, the run's "
             "config.json %s=%s (model keys cannot change)", it->model_path, run, k, va, k, vb);
    return 1;
}

dm_ckpt *dm_ckpt_next(dm_ckpt_iter *it, dm_status *st) {
    char err[4096];
    for (;;) {
        if (dm_ckpt_candidate(it->path, it->k, it->model_path, sizeof it->model_path, err,
                              sizeof err)) {
            if (it->k == 0) dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
            else if (it->skipped > 1)
                dm_fail(st, DM_JOB_BAD_INPUT, "%s (and %d older checkpoint%s %s not load "
                        "either)", it->first, it->skipped - 1, it->skipped > 2 ? "s" : "",
                        it->skipped > 2 ? "do" : "does");
            else dm_fail(st, DM_JOB_BAD_INPUT, "%s", it->first);
            return NULL;
        }
        it->k++;
        dm_ckpt *c = dm_ckpt_open(it->model_path, it->with_optim, err, sizeof err);
        if (c && it->upto > 0 && dm_ckpt_step(c) > it->upto) {
            dm_ckpt_close(c); /* the caller named it when it asked for a fallback */
            continue;
        }
        if (c && foreign(it, c, err, sizeof err)) {
            dm_ckpt_close(c);
            c = NULL;
        }
        if (c && dm_ckpt_unverified(c))
            add_note(it, "note: %.2000s has no checksums (an older dormouse wrote it): read "
                     "without that check; the checkpoints saved from now on carry them\n",
                     it->model_path);
        if (c) return c;
        dm_ckpt_skip(it, err);
    }
}

void dm_ckpt_skip(dm_ckpt_iter *it, const char *why) {
    if (it->skipped++ == 0) snprintf(it->first, sizeof it->first, "%.2000s", why);
    add_note(it, "note: skipping a checkpoint that does not load: %.2000s\n", why);
}

void dm_ckpt_loaded(dm_ckpt_iter *it, const dm_job_io *io) {
    if (it->notes[0]) dm_job_warn(io, "%s", it->notes);
    it->notes[0] = 0;
}

/* The first of sets whose key cmd does not use (not a model key, not in usable), refused
 * as doing nothing; 0 when there is none. */
static int unused_key(const char *const *sets, int n_sets, const char *cmd,
                      const char *const *usable, dm_status *st) {
    for (int i = 0; i < n_sets; i++) {
        char key[64];
        if (!dm_split_set(sets[i], key, sizeof key) || key_group(key) < 0 ||
            key_group(key) == DM_KEY_MODEL || in_list(usable, key))
            continue; /* malformed or unknown keys: dm_config_apply_sets names them */
        size_t used = 0;
        char list[512] = "";
        for (const char *const *k = usable; k && *k; k++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *k);
        return dm_fail(st, DM_JOB_BAD_INPUT, "--set %s: %s does not use %s (a %s key); it reads "
                       "%s", sets[i], cmd, key, dm_config_group_name(key_group(key)), list);
    }
    return 0;
}

/* 1 (a bad-input status) when path is a file of text: a corpus named where a checkpoint
 * goes ("dormouse eval notes.txt") */
static int text_not_ckpt(const char *path, const char *cmd, dm_status *st) {
    unsigned char b[8];
    struct stat sb;
    size_t l = strlen(path);
    if (l >= 12 && !strcmp(path + l - 12, ".safetensors")) return 0; /* its reader says why */
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) /* a safetensors file starts with its header's length */
        if (!(b[i] >= 32 && b[i] < 127) && b[i] != '\n' && b[i] != '\r' && b[i] != '\t')
            return 0;
    return dm_fail(st, DM_JOB_BAD_INPUT, "%s is a text file, not a checkpoint: `dormouse %s` "
                   "takes a run directory, a ckpt-NNNNNNNN directory or a model.safetensors "
                   "file%s", path, cmd, strcmp(cmd, "eval") ? "" : " (to score this text with "
                   "a checkpoint: dormouse eval RUN_DIR --data FILE)");
}

dm_model *dm_load_model(const char *path, const char *const *sets, int n_sets,
                        const char *cmd, const char *const *usable, dm_config *cfg, long *step,
                        char *model_path, const dm_comm *comm, const dm_job_io *io,
                        dm_status *st) {
    char err[8192];
    if (text_not_ckpt(path, cmd, st)) return NULL;
    dm_ckpt_iter it = {.path = path};
    dm_model *m = NULL;
    dm_ckpt *c;
    while ((c = dm_ckpt_next(&it, st))) {
        const dm_config *saved = dm_ckpt_config(c);
        *cfg = *saved;
        if (step) *step = dm_ckpt_step(c);
        if (model_path) snprintf(model_path, 4096, "%.4095s", it.model_path);
        int bad = unused_key(sets, n_sets, cmd, usable, st) ||
                  dm_config_apply_sets(cfg, "--set", sets, n_sets, st);
        if (!bad && dm_config_check_model(saved, cfg, err, sizeof err))
            bad = dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
        if (!bad && dm_config_validate(cfg, err, sizeof err))
            bad = dm_fail(st, DM_JOB_BAD_INPUT, "invalid config: %s", err);
        if (!bad && m && dm_config_check_model(dm_model_config(m), cfg, err, sizeof err)) {
            dm_model_free(m); /* an older checkpoint of another model: build it anew */
            m = NULL;
        }
        if (!bad && !m) {
            char over[256];
            int shared, n = dm_fair_threads(cfg, comm, io, !strcmp(cmd, "sample"), &shared);
            if (shared) cfg->threads = n; /* the job's later calls keep the share */
            if (dm_step_oversubscribed(cfg->threads, over, sizeof over)[0])
                dm_job_warn(io, "%s", over);
            m = dm_model_create_threads(cfg, n, err, sizeof err);
            if (!m) bad = dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
        }
        int rc = bad ? DM_CKPT_OK : dm_ckpt_into(c, m, NULL, err, sizeof err);
        dm_ckpt_close(c);
        if (bad || rc == DM_CKPT_MISMATCH) {
            if (!bad) dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
            break;
        }
        if (rc == DM_CKPT_OK) {
            dm_ckpt_loaded(&it, io);
            return m;
        }
        dm_ckpt_skip(&it, err);
    }
    dm_model_free(m);
    return NULL;
}

int dm_load_run_dir(const char *model_path, char *run, size_t n) {
    char a[4096], b[4096], p[4200];
    snprintf(a, sizeof a, "%s", model_path);
    char *ck = dirname(a); /* RUN/ckpt-NNNNNNNN */
    snprintf(b, sizeof b, "%s", ck);
    const char *base = strrchr(b, '/');
    base = base ? base + 1 : b;
    long s;
    char tail;
    if (sscanf(base, "ckpt-%ld%c", &s, &tail) != 1) return 1;
    char *rd = dirname(b);
    snprintf(p, sizeof p, "%s/config.json", rd);
    if (access(p, F_OK) != 0) return 1;
    snprintf(run, n, "%s", rd);
    return 0;
}
