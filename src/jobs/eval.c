/* eval.c — bits per byte on a window; the eval job. */
#include "jobs/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/data.h"
#include "io/files.h"
#include "jobs/load.h"

double dm_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, int B, int T) {
    if (n < 2 || B < 1 || T < 1) return NAN;
    size_t preds = n - 1, full = preds / (size_t)T, rest = preds % (size_t)T;
    uint8_t *buf = malloc((size_t)B * (T + 1));
    if (!buf) return NAN;
    double nats = 0;
    /* consecutive windows share a byte (the last target of one is the first input of the
     * next), so gather b windows of T+1 bytes at stride T */
    for (size_t s = 0; s < full; s += (size_t)B) {
        int b = full - s < (size_t)B ? (int)(full - s) : B;
        for (int i = 0; i < b; i++)
            memcpy(buf + (size_t)i * (T + 1), bytes + (s + i) * (size_t)T, (size_t)T + 1);
        nats += (double)dm_model_forward(m, buf, b, T, NULL) * b * T;
    }
    if (rest) nats += (double)dm_model_forward(m, bytes + full * (size_t)T, 1, (int)rest, NULL) * rest;
    free(buf);
    return nats / (double)preds / log(2.0);
}

dm_status dm_eval(const dm_eval_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    if (a->data && a->val) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "eval scores one window: give --data or --val, not both");
        return st;
    }
    dm_config cfg;
    long step = 0;
    char model[4096], run[4096], path[4200], data[4096], from[4400];
    dm_model *m = dm_load_model(a->ckpt, a->sets, a->n_sets, "eval", DM_EVAL_KEYS, &cfg, &step,
                                model, &st);
    if (!m) return st;
    /* the corpus: the flags, else the run's own, else the bundled one */
    if (a->val || a->data) {
        snprintf(data, sizeof data, "%s", a->val ? a->val : a->data);
        snprintf(from, sizeof from, "%s", a->val ? "--val" : "--data");
    } else if (dm_load_run_dir(model, run, sizeof run) == 0) {
        const char *names[2] = {"val_path", "data_path"};
        int found = 0;
        for (int i = 0; i < 2 && !found; i++) {
            snprintf(path, sizeof path, "%s/%s", run, names[i]);
            found = dm_read_line(path, data, sizeof data) == 0;
            snprintf(from, sizeof from, "the run's %s, %s", i ? "corpus" : "validation corpus",
                     path);
        }
        if (!found) { /* a run of an older dormouse, without data_path */
            found = dm_data_path(NULL, data, sizeof data, &st) != NULL;
            snprintf(from, sizeof from, "the bundled corpus: %s has no data_path", run);
        } else if (access(data, F_OK) != 0) {
            dm_fail(&st, DM_JOB_BAD_INPUT, "the corpus this run trained on, %s (%s), is not "
                    "there; pass --data PATH", data, path);
            dm_model_free(m);
            return st;
        }
    } else {
        dm_data_path(NULL, data, sizeof data, &st);
        snprintf(from, sizeof from, "the bundled corpus: the checkpoint is not in a run "
                 "directory");
    }
    if (st.code) {
        dm_model_free(m);
        return st;
    }
    dm_corpus c;
    char err[8192];
    if (dm_corpus_load(&c, data, err, sizeof err)) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s", err);
        dm_model_free(m);
        return st;
    }
    size_t w = (size_t)cfg.eval_window;
    if (c.n < w) { /* as train does: never a smaller window than asked for */
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s has %zu bytes, fewer than eval_window=%zu; pass "
                "--set eval_window=%zu (or less) to score all of it", data, c.n, w, c.n);
    } else {
        double bpb = dm_eval_bpb(m, c.bytes + (c.n - w), w, cfg.batch_size, cfg.seq_len);
        if (isnan(bpb)) dm_fail(&st, DM_JOB_FAILED, "evaluation gave NaN");
        else dm_job_note(io, "val_bpb %.6f on the last %zu bytes of %s (%s; checkpoint step "
                         "%ld)\n", bpb, w, data, from, step);
    }
    dm_corpus_free(&c);
    dm_model_free(m);
    return st;
}
