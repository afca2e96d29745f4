/* network.c — forward and backward of the whole network (docs/architecture.md section 3):
 *   x = embed[token]
 *   repeat n_layer:  x = x + Mixer(RMSNorm(x));  x = x + MLP(RMSNorm(x))
 *   logits = lm_head(RMSNorm(x));  loss = mean cross-entropy
 * (token vocabularies, above 256: the head's product and the cross-entropy fused, R rows
 * of logits at a time, dm_plan_head_rows; the byte vocabulary writes all its logits)
 * MLP: W_down(silu(W_gate x) * W_up x). The mixer is in mixer.c. Each residual branch and
 * the head is a unit of the activation plan (plan.h): the forward runs every unit's steps;
 * the backward runs, before each unit's own backward, the steps whose outputs the plan
 * did not keep (checkpointing). Every op goes through the op layer (dm_op_*: counted,
 * timed when the atlas is on, checked in verify mode). */
#include "model/model.h"

/* One step of the MLP unit of layer l (DM_S_NORM2 .. DM_S_MLP_OUT). */
static void mlp_step(dm_model *m, int l, int step) {
    const dm_config *c = &m->cfg;
    const dm_layer_off *o = &m->L[l];
    dm_layer_act *a = &m->act[l];
    const dm_bf *P = m->params;
    int N = m->B * m->T, D = c->d_model, F = dm_config_mlp_hidden(c);
    dm_ops *ops = &m->ops;
    switch (step) {
    case DM_S_NORM2:
        dm_op_rmsnorm_fwd(ops, a->xn2, a->rstd2, a->x_mid, P + o->norm2, N, D, DM_NORM_EPS,
                          m->s.norm_scratch);
        break;
    case DM_S_UP:
        dm_op_matmul_fwd(ops, a->a, a->xn2, P + o->w_gate, NULL, N, D, F);
        dm_op_matmul_fwd(ops, a->b, a->xn2, P + o->w_up, NULL, N, D, F);
        break;
    case DM_S_SWIGLU:
        dm_op_swiglu_fwd(ops, a->h, a->a, a->b, (size_t)N * F);
        break;
    case DM_S_MLP_OUT: { /* x_out = x_mid + W_down h: the next layer's input */
        dm_bf *x_out = l + 1 < c->n_layer ? m->act[l + 1].x_in : m->x_final;
        dm_op_matmul_fwd(ops, x_out, a->h, P + o->w_down, NULL, N, F, D);
        dm_op_add(ops, x_out, a->x_mid, (size_t)N * D);
        break;
    }
    }
}

/* One step of the head (DM_S_NORMF .. DM_S_LOGITS). */
static void head_step(dm_model *m, int step) {
    const dm_config *c = &m->cfg;
    dm_head_act *h = &m->head;
    const dm_bf *P = m->params;
    int N = m->B * m->T, D = c->d_model;
    dm_ops *ops = &m->ops;
    switch (step) {
    case DM_S_NORMF:
        dm_op_rmsnorm_fwd(ops, h->xnf, h->rstdf, m->x_final, P + m->norm_f, N, D, DM_NORM_EPS,
                          m->s.norm_scratch);
        break;
    case DM_S_LOGITS: /* the fused head makes its logits in the loss's call */
        if (!dm_plan_head_rows(c, (size_t)N))
            dm_op_matmul_fwd(ops, h->logits, h->xnf, P + m->lm_head, NULL, N, D, c->vocab);
        break;
    }
}

/* unit u's side room (plan.h) for its forward steps (bwd 0) or its backward (1) */
static void rooms(dm_model *m, int u, int bwd) {
    dm_plan_give_rooms(&m->cfg, m->act, &m->head, &m->s, u, bwd, (size_t)m->B * m->T, &m->ops);
}

static void unit_step(dm_model *m, int u, int step) {
    switch (dm_unit_kind(u, m->cfg.n_layer)) {
    case DM_UNIT_MIXER: dm_mixer_step(m, u / 2, step); break;
    case DM_UNIT_MLP: mlp_step(m, u / 2, step); break;
    default: head_step(m, step); break;
    }
}

void dm_network_forget_ws(dm_model *m) {
    for (int k = 0; k < DM_UNIT_KINDS; k++) m->ws_holds[k] = -1;
}

/* unit u (of kind k) has just written its part of the workspace */
static void ws_written(dm_model *m, int u, int k) {
    m->ws_holds[k] = u;
    for (int j = 0; j < DM_UNIT_KINDS; j++)
        if (j != k && dm_plan_ws_overlap(&m->sizes, j, k)) m->ws_holds[j] = -1;
}

void dm_network_fwd(dm_model *m) {
    const dm_config *c = &m->cfg;
    int L = c->n_layer, N = m->B * m->T, D = c->d_model;
    /* x_in of layer 0 (or x_final when there are no layers) holds the embeddings */
    int V = c->vocab, w = dm_id_width(V);
    dm_op_embed_fwd_ids(&m->ops, L ? m->act[0].x_in : m->x_final, m->inp, w,
                        m->params + m->embed, N, D, V);
    for (int u = 0; u <= 2 * L; u++) {
        int k = dm_unit_kind(u, L);
        rooms(m, u, 0);
        for (int s = dm_unit_first[k]; s < dm_unit_first[k + 1]; s++) unit_step(m, u, s);
        ws_written(m, u, k); /* the workspace holds what u did not keep */
    }
    int R = dm_plan_head_rows(c, (size_t)N);
    if (R)
        dm_op_head_xent_fwd(&m->ops, m->loss_mem, NULL, m->head.xnf, m->params + m->lm_head,
                            m->tgt, w, m->head.logits, N, D, V, R);
    else dm_op_xent_fwd_ids(&m->ops, m->loss_mem, NULL, m->head.logits, m->tgt, w, N, V);
}

void dm_network_logits(dm_model *m, float *logits) {
    const dm_config *c = &m->cfg;
    int N = m->B * m->T, D = c->d_model, V = c->vocab;
    int R = dm_plan_head_rows(c, (size_t)N);
    if (!R) {
        dm_backend_to_host(m->be, logits, m->head.logits, (size_t)N * V * sizeof(float));
        return;
    }
    for (int r0 = 0; r0 < N; r0 += R) {
        int n = N - r0 < R ? N - r0 : R;
        dm_op_matmul_fwd(&m->ops, m->head.logits, m->head.xnf + (size_t)r0 * D,
                         m->params + m->lm_head, NULL, n, D, V);
        dm_backend_to_host(m->be, logits + (size_t)r0 * V, m->head.logits,
                           (size_t)n * V * sizeof(float));
    }
}

void dm_network_recompute(dm_model *m, int u) {
    int k = dm_unit_kind(u, m->cfg.n_layer);
    if (m->ws_holds[k] == u || !dm_plan_recomputes(&m->plan, k)) return;
    rooms(m, u, 0); /* its tensors' copies are made again as its steps rerun */
    for (int s = dm_unit_first[k]; s < dm_unit_first[k + 1]; s++)
        if (m->plan.rerun[s]) unit_step(m, u, s);
    ws_written(m, u, k);
}

void dm_network_bwd(dm_model *m) {
    const dm_config *c = &m->cfg;
    int L = c->n_layer, N = m->B * m->T, D = c->d_model, F = dm_config_mlp_hidden(c);
    const dm_bf *P = m->params;
    dm_bf *G = m->grads;
    dm_scratch *s = &m->s;
    dm_head_act *h = &m->head;
    dm_ops *ops = &m->ops;

    /* head: dlogits in place of the logits, then lm_head and the final norm (the fused
     * head: both, chunk by chunk, its logits made again) */
    dm_network_recompute(m, 2 * L);
    rooms(m, 2 * L, 1);
    int V = c->vocab, w = dm_id_width(V), R = dm_plan_head_rows(c, (size_t)N);
    if (R) {
        dm_op_head_xent_bwd(ops, s->dxn, G + m->lm_head, h->xnf, P + m->lm_head, m->tgt, w,
                            h->logits, N, D, V, R, 1.0f / (float)N);
    } else {
        dm_op_xent_bwd_ids(ops, h->logits, h->logits, m->tgt, w, N, V, 1.0f / (float)N);
        dm_op_matmul_bwd(ops, s->dxn, G + m->lm_head, NULL, h->logits, h->xnf, P + m->lm_head,
                         N, D, V, 0);
    }
    dm_backend_zero(m->be, s->dres, (size_t)N * D * sizeof(float));
    dm_op_rmsnorm_bwd(ops, s->dres, G + m->norm_f, s->dxn, m->x_final, P + m->norm_f, h->rstdf,
                      N, D, s->norm_scratch);

    for (int l = L - 1; l >= 0; l--) {
        const dm_layer_off *o = &m->L[l];
        dm_layer_act *a = &m->act[l];
        /* MLP: x_out = x_mid + W_down h (dres flows through the residual unchanged) */
        dm_network_recompute(m, 2 * l + 1);
        rooms(m, 2 * l + 1, 1);
        dm_op_matmul_bwd(ops, s->dh, G + o->w_down, NULL, s->dres, a->h, P + o->w_down, N, F, D,
                         0);
        dm_op_swiglu_bwd(ops, s->da, s->db, s->dh, a->a, a->b, (size_t)N * F);
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_gate, NULL, s->da, a->xn2, P + o->w_gate, N, D, F,
                         0);
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_up, NULL, s->db, a->xn2, P + o->w_up, N, D, F, 1);
        dm_op_rmsnorm_bwd(ops, s->dres, G + o->norm2, s->dxn, a->x_mid, P + o->norm2, a->rstd2,
                          N, D, s->norm_scratch);
        /* mixer: x_mid = x_in + Mixer(RMSNorm(x_in)) */
        dm_network_recompute(m, 2 * l);
        rooms(m, 2 * l, 1);
        dm_mixer_bwd(m, l);
    }
    dm_op_embed_bwd_ids(ops, G + m->embed, s->dres, m->inp, w, N, D, V);
}
