/* embed.c — token embedding lookup and its gradient. */
#include <string.h>

#include "backends/cpu/kernels/kernels.h"

#define EMB_PAR_MIN 32768 /* elements below which a parallel region does not pay */
#define EMB_CB 16         /* column block of the gradient (one cache line of floats) */

/* out[N,C] = table[tok[n], :]    table: [V,C] */
void dm_embed_fwd(float *out, const uint8_t *tok, const float *table, int N, int C) {
    dm_embed_fwd_ids(out, tok, 1, table, N, C);
}
void dm_embed_fwd_ids(float *out, const void *tok, int w, const float *table, int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= EMB_PAR_MIN)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, table + (size_t)dm_id_at(tok, w, (size_t)n) * C,
               (size_t)C * sizeof(float));
}

/* dtable[V,C] += sum_n onehot(tok[n]) x dout[n,:]
 * Parallel over column blocks; each column sums its rows in order n = 0..N-1, so the
 * result does not depend on the thread count. */
void dm_embed_bwd(float *dtable, const float *dout, const uint8_t *tok, int N, int C) {
    dm_embed_bwd_ids(dtable, dout, tok, 1, N, C);
}
void dm_embed_bwd_ids(float *dtable, const float *dout, const void *tok, int w, int N, int C) {
    int nb = (C + EMB_CB - 1) / EMB_CB;
#pragma omp parallel for schedule(static) if ((long)N * C >= EMB_PAR_MIN)
    for (int b = 0; b < nb; b++) {
        int c0 = b * EMB_CB, c1 = c0 + EMB_CB < C ? c0 + EMB_CB : C;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)dm_id_at(tok, w, (size_t)n) * C;
            const float *src = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
