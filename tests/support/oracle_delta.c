/* oracle_delta.c — the gated delta rule in plain double loops (test oracle).
 * Written independently of src/ref/delta_ref.c: the state is kept transposed,
 * M[j][i] = S[i][j] ([dv][dk], one value column per row), and every step is spelled out
 * as in docs/kda.md section 4:
 *   S' = Diag(exp(g_t)) S_{t-1};  e = v_t - S'^T k_t;  S_t = S' + beta_t k_t e^T;
 *   o_t = scale * S_t^T q_t.
 * Layout: dm_delta_dims (q,k [B,T,H,dk]; v,o [B,T,H,dv]; g [B,T,H,dk] or [B,T,H];
 * beta [B,T,H]; h0,hT [B,H,dk,dv]). */
#include <math.h>
#include <stdlib.h>

#include "oracle.h"

void o_delta(const dm_delta_dims *d, const double *q, const double *k, const double *v,
             const double *g, const double *beta, const double *h0, double *o, double *hT) {
    const int B = d->B, T = d->T, H = d->H, K = d->dk, V = d->dv;
    double *M = malloc(sizeof(double) * (size_t)K * V);  /* M[j*K + i] = S[i][j] */
    double *alpha = malloc(sizeof(double) * (size_t)K);
    if (!M || !alpha) abort();
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < K; i++)
                for (int j = 0; j < V; j++)
                    M[(size_t)j * K + i] = h0 ? h0[(((size_t)b * H + h) * K + i) * V + j] : 0.0;
            for (int t = 0; t < T; t++) {
                size_t row = ((size_t)b * T + t) * H + h;
                const double *qt = q + row * K, *kt = k + row * K, *vt = v + row * V;
                double bt = beta[row];
                for (int i = 0; i < K; i++)
                    alpha[i] = exp(d->scalar_gate ? g[row] : g[row * K + i]);
                double *ot = o + row * V;
                for (int j = 0; j < V; j++) {
                    double *col = M + (size_t)j * K;
                    double pred = 0.0; /* (S'^T k)_j */
                    for (int i = 0; i < K; i++) {
                        col[i] = alpha[i] * col[i];
                        pred += col[i] * kt[i];
                    }
                    double err = vt[j] - pred;
                    double out = 0.0;
                    for (int i = 0; i < K; i++) {
                        col[i] += bt * kt[i] * err;
                        out += col[i] * qt[i];
                    }
                    ot[j] = d->scale * out;
                }
            }
            if (hT)
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++)
                        hT[(((size_t)b * H + h) * K + i) * V + j] = M[(size_t)j * K + i];
        }
    }
    free(alpha);
    free(M);
}
