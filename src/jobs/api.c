/* api.c — the public API's training, checkpoints and evaluation (include/dormouse.h): the
 * same step, checkpoint files and bits per byte as the `dormouse` command, for a C user
 * who does not know the parameter layout or where the model's memory lives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dormouse.h"
#include "io/ckpt.h"
#include "io/data.h"
#include "io/files.h"
#include "jobs/eval.h"
#include "jobs/step.h"
#include "optim/optim.h"

struct dm_trainer {
    dm_config cfg;
    dm_model *m;
    dm_optim *opt;
    dm_stepper st;
    long step; /* the optimizer's next 0-based step */
};

void dm_trainer_free(dm_trainer *t) {
    if (!t) return;
    dm_stepper_free(&t->st);
    dm_optim_free(t->opt);
    dm_model_free(t->m);
    free(t);
}

dm_trainer *dm_trainer_create(const dm_config *cfg, char *err, size_t errlen) {
    dm_trainer *t = calloc(1, sizeof *t);
    if (!t) {
        if (err) snprintf(err, errlen, "out of memory creating the trainer");
        return NULL;
    }
    t->cfg = *cfg;
    char e[1024] = "";
    if (!(t->m = dm_model_create(cfg, e, sizeof e)) ||
        !(t->opt = dm_optim_create(t->m, cfg, e, sizeof e)) ||
        dm_stepper_init(&t->st, t->m, t->opt, cfg, NULL, e, sizeof e) ||
        dm_model_reserve(t->m, cfg->batch_size, cfg->seq_len, e, sizeof e)) {
        if (err) snprintf(err, errlen, "%s", e);
        dm_trainer_free(t);
        return NULL;
    }
    return t;
}

dm_model *dm_trainer_model(dm_trainer *t) { return t->m; }
long dm_trainer_next_step(const dm_trainer *t) { return t->step; }

/* the model file of a user path (its newest checkpoint), into out */
static int resolve(const char *path, char *out, size_t n, char *err, size_t errlen) {
    if (path) return dm_ckpt_resolve(path, out, n, err, errlen);
    if (err) snprintf(err, errlen, "no checkpoint path");
    return 1;
}

int dm_checkpoint_config(const char *path, dm_config *cfg, long *step, char *err,
                         size_t errlen) {
    char mp[4400];
    return resolve(path, mp, sizeof mp, err, errlen) ||
           dm_ckpt_read_config(mp, cfg, step, err, errlen);
}

int dm_trainer_load(dm_trainer *t, const char *path, char *err, size_t errlen) {
    char mp[4400];
    if (resolve(path, mp, sizeof mp, err, errlen)) return 1;
    dm_ckpt *c = dm_ckpt_open(mp, 1, err, errlen);
    if (!c) return 1;
    int rc = dm_ckpt_into(c, t->m, t->opt, err, errlen);
    if (rc == DM_CKPT_OK) t->step = dm_ckpt_step(c);
    dm_ckpt_close(c);
    return rc != DM_CKPT_OK;
}

/* dir/ckpt-<step>/ of m (and opt), dir made when it is not there */
static int save(const char *dir, dm_model *m, const dm_optim *opt, long step, char *err,
                size_t errlen) {
    if (!dir || dm_mkdir_p(dir)) {
        if (err) snprintf(err, errlen, "cannot create the directory %s", dir ? dir : "(null)");
        return 1;
    }
    return dm_ckpt_save(dir, m, opt, step, err, errlen);
}

int dm_trainer_save(dm_trainer *t, const char *dir, char *err, size_t errlen) {
    return save(dir, t->m, t->opt, t->step, err, errlen);
}

int dm_trainer_step(dm_trainer *t, const void *tokens, float *loss, double *grad_norm,
                    char *err, size_t errlen) {
    dm_step_out so;
    if (!tokens) {
        if (err) snprintf(err, errlen, "dm_trainer_step: tokens is NULL");
        return 1;
    }
    if (dm_stepper_step(&t->st, tokens, t->step, &so) || !isfinite(so.loss) ||
        !isfinite(so.gnorm)) {
        if (err)
            snprintf(err, errlen, "step %ld: loss %g, gradient norm %g", t->step + 1,
                     (double)so.loss, so.gnorm);
        return 1;
    }
    t->step++;
    if (loss) *loss = so.loss;
    if (grad_norm) *grad_norm = so.gnorm;
    return 0;
}

int dm_model_load(dm_model *m, const char *path, char *err, size_t errlen) {
    char mp[4400];
    return resolve(path, mp, sizeof mp, err, errlen) ||
           dm_ckpt_load(mp, m, NULL, err, errlen) != DM_CKPT_OK;
}

int dm_model_save(dm_model *m, const char *dir, long step, char *err, size_t errlen) {
    return save(dir, m, NULL, step, err, errlen);
}

int dm_model_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, double *bpb, char *err,
                      size_t errlen) {
    const dm_config *c = dm_model_config(m);
    if (!bytes || n < 2) {
        if (err) snprintf(err, errlen, "dm_model_eval_bpb: %zu bytes (at least 2)", n);
        return 1;
    }
    if (c->vocab != DM_VOCAB) {
        if (err) snprintf(err, errlen, "dm_model_eval_bpb: a model of vocab %d reads tokens, "
                          "not bytes (`dormouse eval` scores it)", c->vocab);
        return 1;
    }
    double b = dm_eval_bpb(m, bytes, n, c->batch_size, c->seq_len, NULL);
    if (!isfinite(b)) {
        if (err) snprintf(err, errlen, "dm_model_eval_bpb: the forward gave %g", b);
        return 1;
    }
    *bpb = b;
    return 0;
}

int dm_train_batch(const dm_config *cfg, const uint8_t *bytes, size_t n, long step,
                   uint8_t *tokens, char *err, size_t errlen) {
    if (cfg->vocab != DM_VOCAB) {
        if (err) snprintf(err, errlen, "dm_train_batch: draws bytes; vocab=%d reads tokens",
                          cfg->vocab);
        return 1;
    }
    /* read only: batches copy */
    dm_corpus c = {.bytes = (uint8_t *)bytes, .n = n, .n_files = 1, .train = bytes};
    if (dm_corpus_split(&c, cfg->eval_window, cfg->seq_len, err, errlen)) return 1;
    dm_corpus_batch(&c, cfg->seed, step, cfg->grad_accum * cfg->batch_size, cfg->seq_len, tokens);
    return 0;
}
