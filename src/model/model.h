/* model.h — internals of dm_model shared by model.c (parameters, arena), mixer.c (the
 * KDA/GDN layer), network.c (the whole network forward/backward) and infer.c. Every op
 * they run goes through the op layer (ops/ops.h). */
#ifndef DM_MODEL_H
#define DM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"
#include "ops/ops.h"

#define DM_NORM_EPS 1e-6f /* RMSNorm and the per-head output norm */
#define DM_L2_EPS 1e-6f   /* per-head L2 norm of q and k */
#define DM_NO_TENSOR ((size_t)-1)

/* Offsets (in floats) of one layer's tensors in the flat parameter buffer.
 * KDA uses w_f1, w_f2, w_g1, w_g2, b_g2; GDN uses w_a, w_z; the others both. */
typedef struct {
    size_t norm1, w_q, w_k, w_v, conv_q, conv_k, conv_v;
    size_t w_f1, w_f2, w_a, a_log, dt_bias, w_b;
    size_t w_g1, w_g2, b_g2, w_z, o_norm, w_o;
    size_t norm2, w_gate, w_up, w_down;
} dm_layer_off;

/* Saved activations of one layer for one forward (pointers into the arena).
 * N = B*T rows; D = d_model; HD = n_head*head_dim; F = MLP hidden; R = gate_rank;
 * Cg = head_dim (KDA) or 1 (GDN). */
typedef struct {
    float *x_in;            /* [N,D]  residual entering the mixer          */
    float *xn1, *rstd1;     /* [N,D], [N]  RMSNorm before the mixer         */
    float *qt, *kt, *vt;    /* [N,HD] projections (conv inputs)             */
    float *qc, *kc, *vc;    /* [N,HD] conv outputs (before SiLU)            */
    float *qh, *kh, *v;     /* [N,HD] L2-normalized q, k; silu(vc)          */
    float *rq, *rk;         /* [N*H]  inverse norms of q, k                 */
    float *f1;              /* [N,R]  KDA gate low-rank hidden              */
    float *f;               /* [N,H*Cg] gate pre-activation                 */
    float *g;               /* [N,H*Cg] log decay                           */
    float *beta;            /* [N,H]                                        */
    float *o;               /* [N,HD] delta-rule core output                */
    float *saved;           /* chunked core's forward state for its backward (or NULL) */
    float *z1;              /* [N,R]  KDA output-gate low-rank hidden        */
    float *z;               /* [N,HD] output gate pre-activation            */
    float *rstd_o;          /* [N*H]                                        */
    float *op;              /* [N,HD] gated-normed output (W_o input)       */
    float *x_mid;           /* [N,D]  residual entering the MLP             */
    float *xn2, *rstd2;     /* [N,D], [N]                                   */
    float *a, *b, *h;       /* [N,F]  gate, up, silu(gate)*up               */
    /* bf16 copies of the inputs of several products (bf16 precision only, else NULL):
     * rounded once in the forward, read again by the weight gradients */
    uint16_t *xn1_b, *f1_b, *z1_b, *op_b, *xn2_b, *h_b;
} dm_layer_act;

/* Backward scratch, shared by all layers. */
typedef struct {
    float *dres;                /* [N,D] gradient of the residual stream */
    float *dxn;                 /* [N,D] */
    float *dq, *dk, *dv, *dg;   /* [N,HD] (dg: [N,H*Cg]) */
    float *dbeta;               /* [N,H] */
    float *do_, *dz, *dop;      /* [N,HD] */
    float *dr;                  /* [N,R] */
    float *da, *db, *dh;        /* [N,F] */
    float *delta_work;          /* delta-rule core scratch */
    float *norm_scratch;        /* [2*N*max(D,HD)] composed-norm reference intermediates */
} dm_scratch;

struct dm_model {
    dm_config cfg;
    int n_tensors;
    dm_tensor *tensors;
    size_t n_params;
    float *params, *grads;
    uint16_t *params_bf16;     /* the weights rounded to bf16 for the bf16 products (made at
                                  each forward: once per step, after the optimizer), or NULL */
    size_t embed, norm_f, lm_head; /* offsets; lm_head == embed when tied */
    dm_layer_off *L;

    /* arena: activations + scratch, laid out for lay_B x lay_T (model.c: dm_model_reserve) */
    int nthreads;
    int lay_B, lay_T;
    size_t arena_floats, io_cap;
    float *arena;
    uint8_t *inp, *tgt;        /* [N] input and target bytes */
    dm_layer_act *act;         /* [n_layer] */
    float *x_final, *xnf, *rstdf, *logits; /* [N,D] [N,D] [N] [N,256] */
    uint16_t *xnf_b;           /* bf16 copy of xnf, or NULL */
    dm_scratch s;

    dm_ops ops;                /* the op layer: settings, counters, verify, atlas */

    /* last forward */
    int B, T;
    int have_forward;
};

/* mixer.c: the KDA/GDN layer, y[N,D] = Mixer(xn1) (saving its activations), and its
 * backward from dy[N,D] to s.dxn (overwritten), accumulating its parameter gradients. */
void dm_mixer_fwd(dm_model *m, int layer, int B, int T, float *y);
void dm_mixer_bwd(dm_model *m, int layer, int B, int T, const float *dy);

/* network.c */
float dm_network_fwd(dm_model *m, int B, int T);
void dm_network_bwd(dm_model *m);

#endif
