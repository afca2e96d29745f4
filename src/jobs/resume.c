/* resume.c — what a resumed run may change (see resume.h). */
#include "jobs/resume.h"

#include <stdio.h>
#include <string.h>

const char *const DM_RESUME_MUTABLE[] = {
    "steps",        "time_budget", "schedule_steps", "eval_every",   "eval_window",
    "eval_windows", "log_every",   "ckpt_every",     "ckpt_time",    "verify_fused",
    "checkpointing", "threads",    "atlas",          "backend",      "device",
    "comm_timeout", "step_graph", NULL};

static int listed(const char *const *list, const char *key) {
    for (; *list; list++)
        if (!strcmp(*list, key)) return 1;
    return 0;
}

/* 1 when one of sets ("key=value") names key */
static int stated(const char *const *sets, int n_sets, const char *key) {
    char k[64];
    for (int i = 0; i < n_sets; i++)
        if (dm_split_set(sets[i], k, sizeof k) && !strcmp(k, key)) return 1;
    return 0;
}

int dm_resume_config(const dm_config *saved, const dm_config *run, const char *const *sets,
                     int n_sets, const char *dir, long step, const dm_job_io *io,
                     dm_status *st) {
    char was[128], now[128];
    for (int i = 0; dm_config_key_name(i); i++) {
        const char *k = dm_config_key_name(i);
        if (dm_config_key_group(i) == DM_KEY_MODEL) continue;
        if (dm_config_get(saved, k, was, sizeof was) || dm_config_get(run, k, now, sizeof now) ||
            !strcmp(was, now))
            continue;
        if (!listed(DM_RESUME_MUTABLE, k) && !stated(sets, n_sets, k))
            return dm_fail(st, DM_JOB_BAD_INPUT, "%s/config.json has %s=%s, its checkpoint of "
                           "step %ld %s=%s: a resume continues that run exactly only with the "
                           "checkpoint's %s; put it back in config.json, or change it on "
                           "purpose with --set %s=%s", dir, k, now, step, k, was, k, k, now);
    }
    for (int i = 0; dm_config_key_name(i); i++) {
        const char *k = dm_config_key_name(i);
        if (dm_config_key_group(i) == DM_KEY_MODEL) continue;
        if (!dm_config_get(saved, k, was, sizeof was) && !dm_config_get(run, k, now, sizeof now) &&
            strcmp(was, now))
            dm_job_note(io, "changed: %s %s -> %s\n", k, was, now);
    }
    return 0;
}
