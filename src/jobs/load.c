/* load.c — a checkpoint's model with overrides, and its run directory (see load.h). */
#include "jobs/load.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/ckpt.h"

/* eval: the window and how it is cut, and how the forward runs */
const char *const DM_EVAL_KEYS[] = {"eval_window", "seq_len", "batch_size", "kda_impl", "gemm",
                                    "precision", "chunk_size", "norm_impl", "threads", NULL};
/* sample: recurrent inference reads only how the products run (the delta core is its
 * token-serial recurrence; the seed is --seed) */
const char *const DM_SAMPLE_KEYS[] = {"gemm", "precision", "norm_impl", "threads", NULL};

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

dm_model *dm_load_model(const char *path, const char *const *sets, int n_sets,
                        const char *cmd, const char *const *usable, dm_config *cfg, long *step,
                        char *model_path, dm_status *st) {
    char dir[4096], err[8192];
    dm_config saved;
    if (dm_ckpt_resolve(path, dir, sizeof dir, err, sizeof err) ||
        dm_ckpt_read_config(dir, &saved, step, err, sizeof err)) {
        dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
        return NULL;
    }
    if (model_path) snprintf(model_path, 4096, "%s", dir);
    for (int i = 0; i < n_sets; i++) { /* keys that would do nothing are refused */
        char key[64];
        if (!dm_split_set(sets[i], key, sizeof key) || key_group(key) < 0 ||
            key_group(key) == DM_KEY_MODEL || in_list(usable, key))
            continue; /* malformed or unknown keys: dm_config_apply_sets names them */
        size_t used = 0;
        char list[512] = "";
        for (const char *const *k = usable; k && *k; k++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *k);
        dm_fail(st, DM_JOB_BAD_INPUT, "--set %s: %s does not use %s (a %s key); it reads %s",
                sets[i], cmd, key, dm_config_group_name(key_group(key)), list);
        return NULL;
    }
    *cfg = saved;
    if (dm_config_apply_sets(cfg, "--set", sets, n_sets, st)) return NULL;
    if (dm_config_check_model(&saved, cfg, err, sizeof err)) {
        dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
        return NULL;
    }
    if (dm_config_validate(cfg, err, sizeof err)) {
        dm_fail(st, DM_JOB_BAD_INPUT, "invalid config: %s", err);
        return NULL;
    }
    dm_set_threads(cfg->threads);
    dm_model *m = dm_model_create(cfg, err, sizeof err);
    if (!m || dm_ckpt_load(dir, m, NULL, err, sizeof err)) {
        dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
        dm_model_free(m);
        return NULL;
    }
    return m;
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
