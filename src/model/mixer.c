/* mixer.c — the KDA / GDN token mixer (docs/architecture.md section 3), forward and backward.
 *
 *   q~,k~,v~ = W_q x, W_k x, W_v x                    x = RMSNorm(residual) = xn1
 *   q,k,v    = silu(conv(q~)), silu(conv(k~)), silu(conv(v~))
 *   q^,k^    = l2norm per head
 *   KDA: g = gate(W_f2 W_f1 x)  per head and key channel     GDN: g = gate(W_a x) per head
 *   beta     = sigmoid(W_b x)
 *   o        = delta-rule core(q^, k^, v, g, beta), scale dh^-1/2
 *   KDA: o' = RMSNorm_head(o) * w_o * sigmoid(W_g2 W_g1 x + b_g2)
 *   GDN: o' = RMSNorm_head(o) * w_o * silu(W_z x)
 *   y        = W_o o'
 * As a unit of the network (model/plan.h): x_mid = x_in + y, with x = RMSNorm(x_in).
 */
#include <math.h>

#include "model/model.h"

/* One step of the mixer unit's forward (plan.h: DM_S_NORM1 .. DM_S_MIX_OUT); each writes
 * exactly the tensors plan.c lists for it, from tensors of earlier steps. */
void dm_mixer_step(dm_model *m, int l, int step) {
    const dm_config *c = &m->cfg;
    const dm_layer_off *o = &m->L[l];
    dm_layer_act *a = &m->act[l];
    const dm_bf *P = m->params;
    int B = m->B, T = m->T, N = B * T, D = c->d_model, H = c->n_head, dh = c->head_dim;
    int HD = H * dh, R = c->gate_rank, W = c->conv_size, kda = c->mixer == DM_MIXER_KDA;
    int Cg = kda ? dh : 1;
    size_t nhd = (size_t)N * HD;
    dm_ops *ops = &m->ops;

    switch (step) {
    case DM_S_NORM1:
        dm_op_rmsnorm_fwd(ops, a->xn1, a->rstd1, a->x_in, P + o->norm1, N, D, DM_NORM_EPS,
                          m->s.norm_scratch);
        break;
    /* q, k, v: projection, causal conv, SiLU (q, k then L2-normalized per head) */
    case DM_S_QKV:
        dm_op_matmul_fwd(ops, a->qt, a->xn1, P + o->w_q, NULL, N, D, HD);
        dm_op_matmul_fwd(ops, a->kt, a->xn1, P + o->w_k, NULL, N, D, HD);
        dm_op_matmul_fwd(ops, a->vt, a->xn1, P + o->w_v, NULL, N, D, HD);
        break;
    case DM_S_CONV:
        dm_op_conv_fwd(ops, a->qc, a->qt, P + o->conv_q, B, T, HD, W);
        dm_op_conv_fwd(ops, a->kc, a->kt, P + o->conv_k, B, T, HD, W);
        dm_op_conv_fwd(ops, a->vc, a->vt, P + o->conv_v, B, T, HD, W);
        break;
    case DM_S_ACT:
        dm_op_silu_fwd(ops, a->v, a->vc, nhd);
        dm_op_l2norm_fwd(ops, a->qh, a->rq, a->qc, N * H, dh, DM_L2_EPS, 1); /* SiLU first */
        dm_op_l2norm_fwd(ops, a->kh, a->rk, a->kc, N * H, dh, DM_L2_EPS, 1);
        break;
    /* gate and beta */
    case DM_S_F1:
        if (kda) dm_op_matmul_fwd(ops, a->f1, a->xn1, P + o->w_f1, NULL, N, D, R);
        break;
    case DM_S_F:
        if (kda) dm_op_matmul_fwd(ops, a->f, a->f1, P + o->w_f2, NULL, N, R, HD);
        else dm_op_matmul_fwd(ops, a->f, a->xn1, P + o->w_a, NULL, N, D, H);
        break;
    case DM_S_GATE:
        dm_op_gate_fwd(ops, a->g, a->f, P + o->a_log, P + o->dt_bias, N, H, Cg,
                       c->gate_lower_bound);
        break;
    case DM_S_BPROJ:
        dm_op_matmul_fwd(ops, a->bpre, a->xn1, P + o->w_b, NULL, N, D, H);
        break;
    case DM_S_BETA:
        dm_op_sigmoid_fwd(ops, a->beta, a->bpre, (size_t)N * H);
        break;
    /* the delta-rule core */
    case DM_S_CORE: {
        dm_delta_dims dd = dm_core_dims(c, B, T);
        dm_op_delta_fwd(ops, &dd, a->qh, a->kh, a->v, a->g, a->beta, NULL, a->o, NULL, a->saved);
        break;
    }
    /* output gate, per-head norm, output projection */
    case DM_S_Z1:
        if (kda) dm_op_matmul_fwd(ops, a->z1, a->xn1, P + o->w_g1, NULL, N, D, R);
        break;
    case DM_S_Z:
        if (kda) dm_op_matmul_fwd(ops, a->z, a->z1, P + o->w_g2, P + o->b_g2, N, R, HD);
        else dm_op_matmul_fwd(ops, a->z, a->xn1, P + o->w_z, NULL, N, D, HD);
        break;
    case DM_S_ONORM:
        dm_op_gatednorm_fwd(ops, a->op, a->rstd_o, a->o, a->z, P + o->o_norm, N * H, dh,
                            DM_NORM_EPS, kda ? DM_GATE_SIGMOID : DM_GATE_SWISH,
                            m->s.norm_scratch);
        break;
    case DM_S_MIX_OUT: /* x_mid = x_in + W_o o' */
        dm_op_matmul_fwd(ops, a->x_mid, a->op, P + o->w_o, NULL, N, HD, D);
        dm_op_add(ops, a->x_mid, a->x_in, (size_t)N * D);
        break;
    }
}

void dm_mixer_bwd(dm_model *m, int l) {
    const dm_config *c = &m->cfg;
    const dm_layer_off *o = &m->L[l];
    dm_layer_act *a = &m->act[l];
    dm_scratch *s = &m->s;
    const dm_bf *P = m->params, *dy = s->dres;
    dm_bf *G = m->grads;
    int B = m->B, T = m->T, N = B * T, D = c->d_model, H = c->n_head, dh = c->head_dim, HD = H * dh;
    int R = c->gate_rank, W = c->conv_size, kda = c->mixer == DM_MIXER_KDA;
    int Cg = kda ? dh : 1;
    size_t nhd = (size_t)N * HD;
    dm_ops *ops = &m->ops;

    /* y = W_o o';  o' = gatednorm(o, z). The gradients the products read next have side
     * room (plan.h): dres, and dz, which carries them all in turn (dz, df, each conv's
     * dx); the backend may keep one copy of each for both its products. */
    dm_op_matmul_bwd(ops, s->dop, G + o->w_o, NULL, dy, a->op, P + o->w_o, N, HD, D, 0);
    dm_op_gatednorm_bwd(ops, s->do_, s->dz, G + o->o_norm, s->dop, a->o, a->z, P + o->o_norm,
                        a->rstd_o, N * H, dh, kda ? DM_GATE_SIGMOID : DM_GATE_SWISH,
                        s->norm_scratch);
    /* dxn starts here (overwritten), every other branch accumulates into it */
    if (kda) {
        dm_op_matmul_bwd(ops, s->dr, G + o->w_g2, G + o->b_g2, s->dz, a->z1, P + o->w_g2, N, R,
                         HD, 0);
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_g1, NULL, s->dr, a->xn1, P + o->w_g1, N, D, R, 0);
    } else {
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_z, NULL, s->dz, a->xn1, P + o->w_z, N, D, HD, 0);
    }

    /* the delta-rule core */
    dm_delta_dims dd = dm_core_dims(c, B, T);
    dm_op_delta_bwd(ops, &dd, a->qh, a->kh, a->v, a->g, a->beta, NULL, a->saved, s->do_, NULL,
                    s->dq, s->dk, s->dv, s->dg, s->dbeta, NULL);

    /* beta = sigmoid(W_b x) */
    dm_op_sigmoid_bwd(ops, s->dbeta, s->dbeta, a->beta, (size_t)N * H);
    dm_op_matmul_bwd(ops, s->dxn, G + o->w_b, NULL, s->dbeta, a->xn1, P + o->w_b, N, D, H, 1);
    /* g = gate(f); df goes to dz (free since the output gate's backward) */
    dm_bf *df = s->dz;
    dm_op_gate_bwd(ops, df, G + o->a_log, G + o->dt_bias, s->dg, a->f, P + o->a_log,
                   P + o->dt_bias, N, H, Cg, c->gate_lower_bound);
    if (kda) {
        dm_op_matmul_bwd(ops, s->dr, G + o->w_f2, NULL, df, a->f1, P + o->w_f2, N, R, HD, 0);
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_f1, NULL, s->dr, a->xn1, P + o->w_f1, N, D, R, 1);
    } else {
        dm_op_matmul_bwd(ops, s->dxn, G + o->w_a, NULL, df, a->xn1, P + o->w_a, N, D, H, 1);
    }

    /* q, k: L2 norm, SiLU, conv, projection; v: SiLU, conv, projection. do_ (free since
     * the core's backward) carries the conv-output gradients of q and k, dz (free since
     * the gate's products) each conv's dx */
    dm_op_l2norm_bwd(ops, s->do_, s->dq, a->qh, a->rq, a->qc, N * H, dh); /* and the SiLU */
    dm_op_conv_bwd(ops, s->dz, G + o->conv_q, s->do_, a->qt, P + o->conv_q, B, T, HD, W);
    dm_op_matmul_bwd(ops, s->dxn, G + o->w_q, NULL, s->dz, a->xn1, P + o->w_q, N, D, HD, 1);
    dm_op_l2norm_bwd(ops, s->do_, s->dk, a->kh, a->rk, a->kc, N * H, dh);
    dm_op_conv_bwd(ops, s->dz, G + o->conv_k, s->do_, a->kt, P + o->conv_k, B, T, HD, W);
    dm_op_matmul_bwd(ops, s->dxn, G + o->w_k, NULL, s->dz, a->xn1, P + o->w_k, N, D, HD, 1);
    dm_op_silu_bwd(ops, s->dv, s->dv, a->vc, nhd);
    dm_op_conv_bwd(ops, s->dz, G + o->conv_v, s->dv, a->vt, P + o->conv_v, B, T, HD, W);
    dm_op_matmul_bwd(ops, s->dxn, G + o->w_v, NULL, s->dz, a->xn1, P + o->w_v, N, D, HD, 1);

    /* xn1 = RMSNorm(x_in): its gradient joins the residual stream's (its copy for the
     * layer below's W_down) */
    dm_op_rmsnorm_bwd(ops, s->dres, G + o->norm1, s->dxn, a->x_in, P + o->norm1, a->rstd1, N, D,
                      s->norm_scratch);
}
