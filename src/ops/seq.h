/* seq.h — the arguments of the ops at the ends of the network and along the sequence
 * (seq.c): the byte embedding, the causal depthwise conv, the softmax cross-entropy. */
#ifndef DM_OPS_SEQ_H
#define DM_OPS_SEQ_H

#include <stdint.h>

/* embed: out[N,C] = table[tok]; backward dtable[V,C] += (tok: ids of w bytes each,
 * dm_id_width; w 0 is 1, the bytes, and V 0 is 256) */
typedef struct {
    float *out;
    const void *tok;
    const float *table;
    float *dtable;
    const float *dout;
    int N, C;
    int w, V;
} dm_embed_args;

/* conv: y[B,T,C] = causal depthwise conv of x with w[C,W]; backward dx =, dw += */
typedef struct {
    float *y;
    const float *x, *w;
    float *dx, *dw;
    const float *dy;
    int B, T, C, W;
} dm_conv_args;

/* xent: the mean loss (and per-row losses[N] when non-NULL) of logits[N,V]; backward
 * dlogits[N,V] = */
typedef struct {
    float *losses;
    double *mean;
    const float *logits;
    const void *targets; /* ids of w bytes each (0: 1, the bytes) */
    int w;
    float *dlogits;
    int N, V;
    float scale;
} dm_xent_args;

/* head_xent: the head's product and the cross-entropy fused, over rows in chunks of R:
 * each chunk's logits[R,V] = x[rows,D] W[V,D]^T are made in work[R,V], the only logits
 * ever held. Forward: the mean loss (and per-row losses[N] when non-NULL); backward (the
 * chunk's logits made again): dx[N,D] = dlogits W, dW[V,D] += dlogits^T x, with dlogits
 * xent's gradient times scale. */
typedef struct {
    float *losses;
    double *mean;
    const float *x, *W;
    const void *targets; /* ids of w bytes each (0: 1, the bytes) */
    int w;
    float *dx, *dW;
    float *work; /* [R,V] */
    int N, D, V, R;
    float scale;
    int prec;    /* the precision asked for the products: DM_PRECISION_* */
} dm_head_xent_args;

#endif
