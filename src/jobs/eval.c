/* eval.c — bits per byte on a window. */
#include "jobs/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
