/* sample.c — temperature / top-k sampling over recurrent inference. */
#include "jobs/sample.h"

#include <math.h>
#include <string.h>

#include "model/infer.h"
#include "base/rng.h"

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

int dm_sample(const dm_model *m, const dm_sample_args *a, FILE *out) {
    dm_infer *s = dm_infer_create(m);
    if (!s) return 1;
    float logits[DM_VOCAB];
    dm_rng r;
    dm_rng_seed(&r, a->seed, 0x5A3D1E);
    const char *p = a->prompt && a->prompt[0] ? a->prompt : "\n";
    if (a->prompt) fputs(a->prompt, out);
    for (; *p; p++) dm_infer_step(s, (uint8_t)*p, logits);
    int rc = 0;
    for (int i = 0; i < a->len; i++) {
        for (int j = 0; j < DM_VOCAB; j++)
            if (!isfinite(logits[j])) { rc = 1; break; }
        if (rc) break;
        int b = dm_sample_byte(logits, a->temperature, a->top_k, &r);
        fputc(b, out);
        fflush(out);
        dm_infer_step(s, (uint8_t)b, logits);
    }
    dm_infer_free(s);
    return rc;
}
