/* eval.c — bits per byte on a window; the eval job. */
#include "jobs/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/data.h"
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
    const char *data = a->data ? a->data : DM_DEFAULT_DATA;
    dm_config cfg;
    long step = 0;
    dm_model *m = dm_load_model(a->ckpt, a->sets, a->n_sets, &cfg, &step, &st);
    if (!m) return st;
    dm_corpus c;
    char err[8192];
    if (dm_corpus_load(&c, data, err, sizeof err)) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s", err);
        dm_model_free(m);
        return st;
    }
    size_t w = (size_t)cfg.eval_window < c.n ? (size_t)cfg.eval_window : c.n;
    if (w < 2) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "corpus %s is too small to evaluate (%zu bytes)", data, c.n);
    } else {
        double bpb = dm_eval_bpb(m, c.bytes + (c.n - w), w, cfg.batch_size, cfg.seq_len);
        if (isnan(bpb)) dm_fail(&st, DM_JOB_FAILED, "evaluation gave NaN");
        else dm_job_note(io, "val_bpb %.6f on the last %zu bytes of %s (checkpoint step %ld)\n",
                         bpb, w, data, step);
    }
    dm_corpus_free(&c);
    dm_model_free(m);
    return st;
}
