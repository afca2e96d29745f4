/* sample.c — temperature / top-k sampling over recurrent inference; the sample job. */
#include "jobs/sample.h"

#include <math.h>
#include <string.h>

#include "base/rng.h"
#include "jobs/load.h"
#include "model/infer.h"

int dm_sample_byte(const float *logits, float temperature, int top_k, dm_rng *r) {
    int best = 0;
    for (int i = 1; i < DM_VOCAB; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    /* threshold = the k-th largest logit (ties kept) */
    float thr = -INFINITY;
    if (top_k > 0 && top_k < DM_VOCAB) {
        float sorted[DM_VOCAB];
        memcpy(sorted, logits, sizeof sorted);
        for (int i = 0; i < top_k; i++) { /* partial selection sort, descending */
            int mx = i;
            for (int j = i + 1; j < DM_VOCAB; j++)
                if (sorted[j] > sorted[mx]) mx = j;
            float t = sorted[i];
            sorted[i] = sorted[mx];
            sorted[mx] = t;
        }
        thr = sorted[top_k - 1];
    }
    double p[DM_VOCAB], total = 0;
    for (int i = 0; i < DM_VOCAB; i++) {
        p[i] = logits[i] >= thr ? exp(((double)logits[i] - logits[best]) / temperature) : 0;
        total += p[i];
    }
    double u = dm_rng_uniform(r) * total;
    for (int i = 0; i < DM_VOCAB; i++) {
        u -= p[i];
        if (u < 0 && p[i] > 0) return i;
    }
    return best;
}

/* Generate a->len bytes after the prompt as text events. */
static dm_job_code generate(const dm_model *m, const dm_sample_args *a, const dm_job_io *io,
                            dm_status *st) {
    dm_infer *s = dm_infer_create(m);
    if (!s) return dm_fail(st, DM_JOB_FAILED, "sampling failed (out of memory)");
    float logits[DM_VOCAB];
    dm_rng r;
    dm_rng_seed(&r, a->seed, 0x5A3D1E);
    const char *p = a->prompt && a->prompt[0] ? a->prompt : "\n";
    if (a->prompt) dm_job_text(io, a->prompt, strlen(a->prompt));
    for (; *p; p++) dm_infer_step(s, (uint8_t)*p, logits);
    for (int i = 0; i < a->len && !st->code; i++) {
        for (int j = 0; j < DM_VOCAB; j++)
            if (!isfinite(logits[j])) {
                dm_fail(st, DM_JOB_FAILED, "sampling failed (non-finite logits)");
                break;
            }
        if (st->code) break;
        if (dm_job_stopped(io)) {
            dm_fail(st, DM_JOB_INTERRUPTED, "interrupted after %d bytes", i);
            break;
        }
        char b = (char)dm_sample_byte(logits, a->temperature, a->top_k, &r);
        dm_job_text(io, &b, 1);
        dm_infer_step(s, (uint8_t)b, logits);
    }
    dm_infer_free(s);
    return st->code;
}

dm_status dm_sample(const dm_sample_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    dm_config cfg;
    dm_model *m = dm_load_model(a->ckpt, a->sets, a->n_sets, &cfg, NULL, &st);
    if (!m) return st;
    generate(m, a, io, &st);
    dm_job_text(io, "\n", 1);
    dm_model_free(m);
    return st;
}
