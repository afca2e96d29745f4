/* network.c — forward and backward of the whole network (DESIGN.md section 3):
 *   x = embed[token]
 *   repeat n_layer:  x = x + Mixer(RMSNorm(x));  x = x + MLP(RMSNorm(x))
 *   logits = lm_head(RMSNorm(x));  loss = mean cross-entropy
 * MLP: W_down(silu(W_gate x) * W_up x). The mixer is in mixer.c. Every op goes through
 * the op layer (dm_op_*: counted, timed when the atlas is on, checked in verify mode). */
#include <string.h>

#include "model/model.h"

float dm_network_fwd(dm_model *m, int B, int T) {
    const dm_config *c = &m->cfg;
    int N = B * T, D = c->d_model, F = dm_config_mlp_hidden(c);
    const float *P = m->params;
    float *ns = m->s.norm_scratch;
    dm_ops *ops = &m->ops;

    /* x_in of layer 0 (or x_final when there are no layers) holds the embeddings */
    float *x = c->n_layer ? m->act[0].x_in : m->x_final;
    dm_op_embed_fwd(ops, x, m->inp, P + m->embed, N, D);
    for (int l = 0; l < c->n_layer; l++) {
        const dm_layer_off *o = &m->L[l];
        dm_layer_act *a = &m->act[l];
        /* mixer */
        dm_op_rmsnorm_fwd(ops, a->xn1, a->rstd1, a->x_in, P + o->norm1, N, D, DM_NORM_EPS, ns);
        if (a->xn1_b) dm_op_round_bf16(ops, a->xn1_b, a->xn1, (size_t)N * D);
        dm_mixer_fwd(m, l, B, T, a->x_mid);
        dm_op_add(ops, a->x_mid, a->x_in, (size_t)N * D);
        /* MLP */
        float *x_out = l + 1 < c->n_layer ? m->act[l + 1].x_in : m->x_final;
        dm_op_rmsnorm_fwd(ops, a->xn2, a->rstd2, a->x_mid, P + o->norm2, N, D, DM_NORM_EPS, ns);
        if (a->xn2_b) dm_op_round_bf16(ops, a->xn2_b, a->xn2, (size_t)N * D);
        dm_op_matmul_fwd(ops, a->a, a->xn2, P + o->w_gate, NULL, N, D, F);
        dm_op_matmul_fwd(ops, a->b, a->xn2, P + o->w_up, NULL, N, D, F);
        dm_op_swiglu_fwd(ops, a->h, a->a, a->b, (size_t)N * F);
        if (a->h_b) dm_op_round_bf16(ops, a->h_b, a->h, (size_t)N * F);
        dm_op_matmul_fwd(ops, x_out, a->h, P + o->w_down, NULL, N, F, D);
        dm_op_add(ops, x_out, a->x_mid, (size_t)N * D);
    }
    dm_op_rmsnorm_fwd(ops, m->xnf, m->rstdf, m->x_final, P + m->norm_f, N, D, DM_NORM_EPS, ns);
    if (m->xnf_b) dm_op_round_bf16(ops, m->xnf_b, m->xnf, (size_t)N * D);
    dm_op_matmul_fwd(ops, m->logits, m->xnf, P + m->lm_head, NULL, N, D, DM_VOCAB);
    return (float)dm_op_xent_fwd(ops, NULL, m->logits, m->tgt, N, DM_VOCAB);
}

void dm_network_bwd(dm_model *m) {
    const dm_config *c = &m->cfg;
    int B = m->B, T = m->T, N = B * T, D = c->d_model, F = dm_config_mlp_hidden(c);
    const float *P = m->params;
    float *G = m->grads, *ns = m->s.norm_scratch;
    dm_scratch *s = &m->s;
    dm_ops *ops = &m->ops;

    /* head: dlogits in place of the logits, then lm_head and the final norm */
    dm_op_xent_bwd(ops, m->logits, m->logits, m->tgt, N, DM_VOCAB, 1.0f / (float)N);
    dm_op_matmul_bwd(ops, s->dxn, G + m->lm_head, NULL, m->logits, m->xnf, P + m->lm_head, N, D,
                     DM_VOCAB, 0);
    memset(s->dres, 0, (size_t)N * D * sizeof(float));
    dm_op_rmsnorm_bwd(ops, s->dres, G + m->norm_f, s->dxn, m->x_final, P + m->norm_f, m->rstdf,
                      N, D, ns);

    for (int l = c->n_layer - 1; l >= 0; l--) {
        const dm_layer_off *o = &m->L[l];
        dm_layer_act *a = &m->act[l];
        /* MLP: x_out = x_mid + W_down h (dres flows through the residual unchanged) */
        dm_op_matmul_bwd(ops, s->dh, G + o->w_down, NULL, s->dres, a->h, P + o->w_down, N, F, D,
                         0);
        dm_op_swiglu_bwd(ops, s->da, s->db, s->dh, a->a, a->b, (size_t)N * F);
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_gate, NULL, s->da, a->xn2, P + o->w_gate, N, D, F,
                         0);
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_up, NULL, s->db, a->xn2, P + o->w_up, N, D, F, 1);
        dm_op_rmsnorm_bwd(ops, s->dres, G + o->norm2, s->dxn, a->x_mid, P + o->norm2, a->rstd2,
                          N, D, ns);
        /* mixer: x_mid = x_in + Mixer(xn1) */
        dm_mixer_bwd(m, l, B, T, s->dres);
        dm_op_rmsnorm_bwd(ops, s->dres, G + o->norm1, s->dxn, a->x_in, P + o->norm1, a->rstd1,
                          N, D, ns);
    }
    dm_op_embed_bwd(ops, G + m->embed, s->dres, m->inp, N, D);
}
