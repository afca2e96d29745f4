/* matmul.h — the dense layer's arguments (matmul.c): forward out = in W^T + b, the data
 * gradient (bwd: din = dout W) and the weight gradient (bwd_w: dW += dout^T in, dbias +=
 * column sums of dout). */
#ifndef DM_OPS_MATMUL_H
#define DM_OPS_MATMUL_H

typedef struct {
    float *out;              /* fwd:   [N,O] */
    const float *in, *W, *bias;
    float *din;              /* bwd:   [N,K] */
    const float *dout;       /* bwd, bwd_w: [N,O] */
    int din_acc;
    float *dW, *dbias;       /* bwd_w: [O,K], [O] */
    int N, K, O;
    int prec;                /* the precision asked for the products: DM_PRECISION_* */
} dm_matmul_args;

#endif
