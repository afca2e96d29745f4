/* load.c — a checkpoint's model with overrides (see load.h). */
#include "jobs/load.h"

#include "io/ckpt.h"

dm_model *dm_load_model(const char *path, const char *const *sets, int n_sets, dm_config *cfg,
                        long *step, dm_status *st) {
    char dir[4096], err[8192];
    dm_config saved;
    if (dm_ckpt_resolve(path, dir, sizeof dir, err, sizeof err) ||
        dm_ckpt_read_config(dir, &saved, step, err, sizeof err)) {
        dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
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
