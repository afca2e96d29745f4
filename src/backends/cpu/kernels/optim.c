/* optim.c — the optimizer's elementwise kernels and the gradient norm (optim.h). */
#include "backends/cpu/kernels/optim.h"

#include <math.h>
#include <string.h>

void dm_adamw(float *po, float *m1o, float *m2o, const float *p, const float *g, const float *m1,
              const float *m2, size_t n, float lr, float decay, float b1, float b2, float eps,
              float c1, float c2, float gscale, int cautious) {
#pragma omp parallel for schedule(static) if (n > 1 << 15)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float a = b1 * m1[i] + (1.0f - b1) * gi;
        float v = b2 * m2[i] + (1.0f - b2) * gi * gi;
        m1o[i] = a;
        m2o[i] = v;
        /* cautious: no decay where the update (a's sign) and p disagree; p * 1 is p */
        float d = cautious && a * p[i] < 0.0f ? 1.0f : decay;
        po[i] = p[i] * d - lr * (a * c1) / (sqrtf(v * c2) + eps);
    }
}

void dm_momentum(float *momo, float *u, const float *mom, const float *g, size_t n, float beta,
                 float gscale) {
    if (u) {
#pragma omp parallel for schedule(static) if (n > 1 << 15)
        for (size_t j = 0; j < n; j++) {
            float gj = g[j] * gscale;
            float m = beta * mom[j] + (1.0f - beta) * gj;
            momo[j] = m;
            u[j] = (1.0f - beta) * gj + beta * m;
        }
    } else {
#pragma omp parallel for schedule(static) if (n > 1 << 15)
        for (size_t j = 0; j < n; j++) momo[j] = beta * mom[j] + (1.0f - beta) * (g[j] * gscale);
    }
}

void dm_muon_apply(float *wo, const float *w, const float *x, size_t n, float decay,
                   float step, int cautious) {
#pragma omp parallel for schedule(static) if (n > 1 << 15)
    for (size_t j = 0; j < n; j++) {
        float d = cautious && x[j] * w[j] < 0.0f ? 1.0f : decay;
        wo[j] = w[j] * d - step * x[j];
    }
}

double dm_grad_norm2(const float *g, size_t n) {
    size_t nb = (n + DM_NORM_BLOCK - 1) / DM_NORM_BLOCK;
    double part[4096], total = 0;
    for (size_t b0 = 0; b0 < nb; b0 += 4096) {
        size_t cnt = nb - b0 < 4096 ? nb - b0 : 4096;
#pragma omp parallel for schedule(static) if (n > 1 << 16)
        for (size_t b = 0; b < cnt; b++) {
            size_t s = (b0 + b) * DM_NORM_BLOCK, e = s + DM_NORM_BLOCK < n ? s + DM_NORM_BLOCK : n;
            double acc = 0;
            for (size_t i = s; i < e; i++) acc += (double)g[i] * g[i];
            part[b] = acc;
        }
        for (size_t b = 0; b < cnt; b++) total += part[b];
    }
    return sqrt(total);
}

void dm_grad_add(float *acco, const float *acc, const float *g, size_t n, int first) {
    if (first) {
        if (acco != g) memcpy(acco, g, n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static) if (n > 1 << 16)
    for (size_t i = 0; i < n; i++) acco[i] = acc[i] + g[i];
}

void dm_grad_mean(float *out, const float *acc, size_t n, int A) {
    float inv = 1.0f / (float)A;
#pragma omp parallel for schedule(static) if (n > 1 << 16)
    for (size_t i = 0; i < n; i++) out[i] = acc[i] * inv;
}
