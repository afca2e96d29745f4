/* matmul_ref.c — the reference dense layer ([out, in] weights): every output element is
 * one sum of products in index order, accumulated in double, written by one thread. The
 * loops run over blocks of REF_B outputs so that the independent sums of a block
 * vectorize; the order within each sum stays the index order. */
#include "ref/ref.h"

#include "base/minmax.h"

#define REF_B 64 /* outputs summed side by side */

/* acc[j] += sum_r a[r*sa] B[r*ldb + j] for j < nb, r in order: the sums of a block of
 * outputs side by side */
static void sum_rows(double *acc, int nb, const float *a, size_t sa, const float *B,
                     size_t ldb, int R) {
    for (int r = 0; r < R; r++) {
        double d = a[(size_t)r * sa];
        for (int j = 0; j < nb; j++) acc[j] += d * B[(size_t)r * ldb + j];
    }
}

/* in: [N,K]; W: [O,K]; bias: [O] or NULL
 * out[n,o] = sum_k in[n,k] W[o,k] (+ bias[o]) */
void dm_matmul_ref_fwd(float *out, const float *in, const float *W, const float *bias, int N,
                       int K, int O) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o0 = 0; o0 < O; o0 += REF_B) {
            int nb = imin(REF_B, O - o0);
            double acc[REF_B];
            for (int j = 0; j < nb; j++) acc[j] = bias ? bias[o0 + j] : 0.0;
            for (int k = 0; k < K; k++) {
                double a = in[(size_t)n * K + k];
                for (int j = 0; j < nb; j++) acc[j] += a * W[(size_t)(o0 + j) * K + k];
            }
            for (int j = 0; j < nb; j++) out[(size_t)n * O + o0 + j] = (float)acc[j];
        }
}

/* dout: [N,O];  din[n,k] = sum_o dout[n,o] W[o,k]  (+= when din_acc) */
void dm_matmul_ref_bwd_data(float *din, const float *dout, const float *W, int N, int K, int O,
                            int din_acc) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int k0 = 0; k0 < K; k0 += REF_B) {
            int nb = imin(REF_B, K - k0);
            double acc[REF_B] = {0};
            sum_rows(acc, nb, dout + (size_t)n * O, 1, W + k0, (size_t)K, O);
            float *r = din + (size_t)n * K + k0;
            for (int j = 0; j < nb; j++) r[j] = (float)(din_acc ? r[j] + acc[j] : acc[j]);
        }
}

/* dW[o,k] += sum_n dout[n,o] in[n,k];  dbias[o] += sum_n dout[n,o] */
void dm_matmul_ref_bwd_weight(float *dW, float *dbias, const float *dout, const float *in,
                              int N, int K, int O) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < O; o++) {
        for (int k0 = 0; k0 < K; k0 += REF_B) {
            int nb = imin(REF_B, K - k0);
            double acc[REF_B] = {0};
            sum_rows(acc, nb, dout + o, (size_t)O, in + k0, (size_t)K, N);
            float *r = dW + (size_t)o * K + k0;
            for (int j = 0; j < nb; j++) r[j] = (float)(r[j] + acc[j]);
        }
        if (dbias) {
            double s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * O + o];
            dbias[o] = (float)(dbias[o] + s);
        }
    }
}
