/* train_ctx.c — the helpers every room of the training job uses (jobs/train_ctx.h). */
#include "jobs/train_ctx.h"

#include <stdio.h>
#include <stdlib.h>

#include "io/files.h"

double train_clock(const train_ctx *t) {
    return t->a->clock ? t->a->clock(t->a->clock_ctx) : dm_now();
}

const char *train_kept(const train_ctx *t, char *buf, size_t n) {
    if (t->run.last_ckpt >= 0)
        snprintf(buf, n, "the checkpoint of step %ld in %s is kept", t->run.last_ckpt,
                 t->a->out);
    else
        snprintf(buf, n, "no checkpoint was saved, so %s is left as it was", t->a->out);
    return buf;
}

int train_write_file(const char *dir, const char *name, const char *text, char *err,
                     size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return dm_write_file_atomic(path, text, err, errlen);
}

int train_write_config(train_ctx *t) {
    char err[8192];
    if (t->ranks.rank != 0) return 0;
    char *cj = dm_config_to_json(&t->cfg);
    int wr = train_write_file(t->a->out, "config.json", cj, err, sizeof err);
    free(cj);
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
}
