/* seq_ref.c — reference embed, causal depthwise conv, per-head L2 norm and softmax
 * cross-entropy: the defining formulas, serial, sums in double (backends/cpu/kernels embed.c,
 * conv.c, l2norm.c, xent.c are the fast versions). */
#include <math.h>
#include <string.h>

#include "ref/ref.h"

/* out[n,:] = table[tok[n],:];  dtable[tok[n],:] += dout[n,:] */
void dm_embed_ref_fwd_ids(float *out, const void *tok, int w, const float *table, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = table[(size_t)dm_id_at(tok, w, (size_t)n) * C + c];
}
void dm_embed_ref_bwd_ids(float *dtable, const float *dout, const void *tok, int w, int N,
                          int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            dtable[(size_t)dm_id_at(tok, w, (size_t)n) * C + c] += dout[(size_t)n * C + c];
}
void dm_embed_ref_fwd(float *out, const uint8_t *tok, const float *table, int N, int C) {
    dm_embed_ref_fwd_ids(out, tok, 1, table, N, C);
}
void dm_embed_ref_bwd(float *dtable, const float *dout, const uint8_t *tok, int N, int C) {
    dm_embed_ref_bwd_ids(dtable, dout, tok, 1, N, C);
}

/* x, y: [B,T,C]; w: [C,W];  y[b,t,c] = sum_i w[c,i] x[b, t-W+1+i, c]  (x = 0 before t = 0) */
void dm_conv_ref_fwd(float *y, const float *x, const float *w, int B, int T, int C, int W) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int i = 0; i < W; i++) {
                    int src = t - W + 1 + i;
                    if (src >= 0) s += (double)w[(size_t)c * W + i] * x[((size_t)b * T + src) * C + c];
                }
                y[((size_t)b * T + t) * C + c] = (float)s;
            }
}

/* dx[b,s,c] = sum over outputs t that read x[b,s,c] of w[c,i] dy[b,t,c]  (overwrites)
 * dw[c,i]  += sum_{b,t} dy[b,t,c] x[b,t-W+1+i,c] */
void dm_conv_ref_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     int B, int T, int C, int W) {
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T; s++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int i = 0; i < W; i++) {
                    int t = s + W - 1 - i; /* the output whose tap i reads x[b,s] */
                    if (t < T) acc += (double)w[(size_t)c * W + i] * dy[((size_t)b * T + t) * C + c];
                }
                dx[((size_t)b * T + s) * C + c] = (float)acc;
            }
    for (int c = 0; c < C; c++)
        for (int i = 0; i < W; i++) {
            double acc = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    int src = t - W + 1 + i;
                    if (src >= 0)
                        acc += (double)dy[((size_t)b * T + t) * C + c] *
                               x[((size_t)b * T + src) * C + c];
                }
            dw[(size_t)c * W + i] = (float)(dw[(size_t)c * W + i] + acc);
        }
}

/* x, y: [R,D];  y = x rn[r],  rn[r] = 1/sqrt(sum_d x^2 + eps) */
void dm_l2norm_ref_fwd(float *y, float *rn, const float *x, int R, int D, float eps) {
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * D;
        double ss = 0;
        for (int d = 0; d < D; d++) ss += (double)xr[d] * xr[d];
        double k = 1.0 / sqrt(ss + eps);
        rn[r] = (float)k;
        for (int d = 0; d < D; d++) y[(size_t)r * D + d] = (float)(xr[d] * k);
    }
}

/* dx = rn (dy - (dy . y) y)   (overwrites; dx may == dy: the row's dot is taken first) */
void dm_l2norm_ref_bwd(float *dx, const float *dy, const float *y, const float *rn, int R, int D) {
    for (int r = 0; r < R; r++) {
        const float *dyr = dy + (size_t)r * D, *yr = y + (size_t)r * D;
        double p = 0;
        for (int d = 0; d < D; d++) p += (double)dyr[d] * yr[d];
        for (int d = 0; d < D; d++) dx[(size_t)r * D + d] = (float)(rn[r] * (dyr[d] - p * yr[d]));
    }
}

/* logsumexp of a row in double, max-subtracted */
static double row_lse(const float *x, int V) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    if (!isfinite(mx)) return mx + 0.0 * s; /* NaN or inf row: its loss is not finite */
    for (int v = 0; v < V; v++) s += exp((double)x[v] - mx);
    return mx + log(s);
}

/* losses[n] = logsumexp(logits[n]) - logits[n,t[n]]; returns the mean (losses may be NULL) */
double dm_xent_ref_fwd(float *losses, const float *logits, const uint8_t *targets, int N, int V) {
    return dm_xent_ref_fwd_ids(losses, logits, targets, 1, N, V);
}
double dm_xent_ref_fwd_ids(float *losses, const float *logits, const void *targets, int w,
                           int N, int V) {
    if (N <= 0) return 0.0;
    double total = 0;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        double l = row_lse(x, V) - x[dm_id_at(targets, w, (size_t)n)];
        if (losses) losses[n] = (float)l;
        total += l;
    }
    return total / N;
}

/* dlogits[n,v] = (softmax(logits[n])_v - [v == t[n]]) * scale   (dlogits may == logits) */
void dm_xent_ref_bwd(float *dlogits, const float *logits, const uint8_t *targets, int N, int V,
                     float scale) {
    dm_xent_ref_bwd_ids(dlogits, logits, targets, 1, N, V, scale);
}
void dm_xent_ref_bwd_ids(float *dlogits, const float *logits, const void *targets, int w,
                         int N, int V, float scale) {
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        uint32_t t = dm_id_at(targets, w, (size_t)n);
        double lse = row_lse(x, V);
        for (int v = 0; v < V; v++) { /* element v is read before it is written */
            double p = exp((double)x[v] - lse);
            dlogits[(size_t)n * V + v] = (float)((p - ((uint32_t)v == t)) * scale);
        }
    }
}
