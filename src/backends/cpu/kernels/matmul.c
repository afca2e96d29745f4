/* matmul.c — dense layer; weights in [out, in] layout. Every product goes through a GEMM
 * backend (be; NULL = dm_gemm, OpenBLAS), whose shape-fixed tiles keep the results
 * independent of the thread count. */
#include "backends/cpu/kernels/kernels.h"

#define MM_PAR_MIN 32768 /* elements below which a parallel region does not pay */
#define MM_CB 16         /* column block of the bias gradient */

static void gemm(const dm_gemm_be *be, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    (be ? be->fn : dm_gemm_openblas)(be ? be->ctx : NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                     beta, C, ldc);
}

/* out[N,O] (=0 first when K <= 0: no product wrote it) += bias[O] (when non-NULL) */
void dm_matmul_bias(float *out, const float *bias, int N, int K, int O) {
    if (K > 0 && !bias) return;
#pragma omp parallel for schedule(static) if ((long)N * O >= MM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *r = out + (size_t)n * O;
        if (K <= 0)
            for (int o = 0; o < O; o++) r[o] = 0.0f;
        if (bias)
            for (int o = 0; o < O; o++) r[o] += bias[o];
    }
}

/* in: [N,K]; W: [O,K]; bias: [O] or NULL; out: [N,O]
 * out = in W^T (+ bias) */
void dm_matmul_fwd(const dm_gemm_be *be, float *out, const float *in, const float *W,
                   const float *bias, int N, int K, int O) {
    if (N <= 0 || O <= 0) return;
    if (K > 0) gemm(be, 0, 1, N, O, K, 1.0f, in, K, W, K, 0.0f, out, O);
    dm_matmul_bias(out, bias, N, K, O);
}

/* dout: [N,O];  din[N,K] = dout W  (+= when din_acc) */
void dm_matmul_bwd_data(const dm_gemm_be *be, float *din, const float *dout, const float *W,
                        int N, int K, int O, int din_acc) {
    if (N <= 0 || K <= 0) return;
    if (O > 0) gemm(be, 0, 0, N, K, O, 1.0f, dout, O, W, K, din_acc ? 1.0f : 0.0f, din, K);
    else if (!din_acc)
        for (long i = 0; i < (long)N * K; i++) din[i] = 0.0f;
}

/* dW[O,K]  += dout^T in;  dbias[O] += sum_n dout[n,:] (when dbias != NULL) */
/* dbias[O] += sum_n dout[n,:]  (columns in parallel, rows in order) */
void dm_matmul_bias_grad(float *dbias, const float *dout, int N, int O) {
    int nb = (O + MM_CB - 1) / MM_CB;
#pragma omp parallel for schedule(static) if ((long)N * O >= MM_PAR_MIN)
    for (int b = 0; b < nb; b++) {
        int o0 = b * MM_CB, o1 = o0 + MM_CB < O ? o0 + MM_CB : O;
        float acc[MM_CB] = {0};
        for (int n = 0; n < N; n++) {
            const float *r = dout + (size_t)n * O;
            for (int o = o0; o < o1; o++) acc[o - o0] += r[o];
        }
        for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
    }
}

void dm_matmul_bwd_weight(const dm_gemm_be *be, float *dW, float *dbias, const float *dout,
                          const float *in, int N, int K, int O) {
    if (N <= 0 || O <= 0) return;
    if (K > 0) gemm(be, 1, 0, O, K, N, 1.0f, dout, O, in, K, 1.0f, dW, K);
    if (dbias) dm_matmul_bias_grad(dbias, dout, N, O);
}

void dm_matmul_bwd(const dm_gemm_be *be, float *din, float *dW, float *dbias, const float *dout,
                   const float *in, const float *W, int N, int K, int O, int din_acc) {
    if (din) dm_matmul_bwd_data(be, din, dout, W, N, K, O, din_acc);
    dm_matmul_bwd_weight(be, dW, dbias, dout, in, N, K, O);
}
