/* xent.c — softmax cross-entropy over a byte vocabulary, max-subtracted logsumexp. */
#include <math.h>
#include <stdint.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define XENT_PAR_MIN 16384 /* elements below which a parallel region does not pay */
#define XENT_CHUNK 1024    /* rows per chunk when the caller passes losses == NULL */

/* max of a row with 8 independent partial maxima (fixed order) */
static inline float rowmax(const float *x, int n) {
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (int j = 0; i < n; i++, j++) m[j] = x[i] > m[j] ? x[i] : m[j];
    float a = m[0] > m[4] ? m[0] : m[4], b = m[1] > m[5] ? m[1] : m[5];
    float c = m[2] > m[6] ? m[2] : m[6], d = m[3] > m[7] ? m[3] : m[7];
    a = a > c ? a : c;
    b = b > d ? b : d;
    return a > b ? a : b;
}

/* loss of one row: logsumexp(x) - x[t] */
static inline float row_loss(const float *x, int V, int t) {
    float mx = rowmax(x, V);
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= V; i += 8)
        for (int j = 0; j < 8; j++) s[j] += exp_v(x[i + j] - mx);
    for (int j = 0; i < V; i++, j++) s[j] += exp_v(x[i] - mx);
    float sum = sum8(s);
    return logf(sum) + mx - x[t];
}

/* logits: [N,V]; targets: [N]; losses: [N] or NULL
 * losses[n] = logsumexp(logits[n]) - logits[n,t[n]];  returns mean_n losses[n], summed in
 * double in row order (rows computed in parallel, summed serially). */
double dm_xent_fwd(float *losses, const float *logits, const uint8_t *targets, int N, int V) {
    return dm_xent_fwd_ids(losses, logits, targets, 1, N, V);
}
double dm_xent_fwd_ids(float *losses, const float *logits, const void *targets, int w, int N,
                       int V) {
    if (N <= 0) return 0.0;
    float buf[XENT_CHUNK];
    double total = 0.0;
    for (int n0 = 0; n0 < N; n0 += XENT_CHUNK) {
        int m = N - n0 < XENT_CHUNK ? N - n0 : XENT_CHUNK;
        float *l = losses ? losses + n0 : buf;
#pragma omp parallel for schedule(static) if ((long)m * V >= XENT_PAR_MIN)
        for (int i = 0; i < m; i++)
            l[i] = row_loss(logits + (size_t)(n0 + i) * V, V,
                            (int)dm_id_at(targets, w, (size_t)(n0 + i)));
        for (int i = 0; i < m; i++) total += l[i];
    }
    return total / N;
}

/* dlogits[N,V] = (softmax(logits[n]) - onehot(t[n])) * scale   (dlogits may == logits) */
void dm_xent_bwd(float *dlogits, const float *logits, const uint8_t *targets, int N, int V,
                 float scale) {
    dm_xent_bwd_yb(dlogits, NULL, logits, targets, N, V, scale);
}

void dm_xent_bwd_yb(float *dlogits, uint16_t *db, const float *logits, const uint8_t *targets,
                    int N, int V, float scale) {
    dm_xent_bwd_yb_ids(dlogits, db, logits, targets, 1, N, V, scale);
}
void dm_xent_bwd_yb_ids(float *dlogits, uint16_t *db, const float *logits, const void *targets,
                        int w, int N, int V, float scale) {
#pragma omp parallel for schedule(static) if ((long)N * V >= XENT_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        float mx = rowmax(x, V);
        for (int v = 0; v < V; v++) dx[v] = exp_v(x[v] - mx); /* same index: safe in place */
        float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int i = 0;
        for (; i + 8 <= V; i += 8)
            for (int j = 0; j < 8; j++) s[j] += dx[i + j];
        for (int j = 0; i < V; i++, j++) s[j] += dx[i];
        float k = scale / sum8(s);
        for (int v = 0; v < V; v++) dx[v] *= k;
        dx[dm_id_at(targets, w, (size_t)n)] -= scale;
        if (db) dm_bf16_run(db + (size_t)n * V, dx, (size_t)V);
    }
}
