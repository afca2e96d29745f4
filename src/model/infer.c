/* infer.c — recurrent inference: one token in, vocab logits out, O(1) state per token
 * (per layer: the last conv_size-1 projections of q, k, v and the delta-rule state S of
 * every head). The same ops as the training forward (network.c, mixer.c) on one token,
 * through an op layer of its own (the delta core on its token-serial reference, which is
 * the recurrence itself); tests hold the two to the same logits. */
#include "model/infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

struct dm_infer {
    const dm_model *m;
    dm_backend *be; /* the model's: the state and scratch live there too */
    dm_ops ops;
    dm_bf *buf;
    uint32_t *tok;  /* the token in: its dm_id_width(vocab) bytes */
    /* per layer */
    dm_bf **cache; /* [n_layer] [3][W-1][HD] previous q~, k~, v~ */
    dm_bf **S;     /* [n_layer] [H, dh, dh] */
    /* one-token scratch */
    dm_bf *x, *xn, *y, *win, *cout, *qkv, *qc, *q, *k, *v, *rn, *f1, *f, *g, *beta, *o, *z1, *z, *op,
        *ha, *hb, *hh, *S2, *rstd, *ns, *logits;
};

dm_infer *dm_infer_create(const dm_model *m) {
    const dm_config *c = &m->cfg;
    size_t D = c->d_model, H = c->n_head, dh = c->head_dim, HD = H * dh, W = c->conv_size;
    size_t R = c->gate_rank, F = dm_config_mlp_hidden(c), L = c->n_layer;
    size_t per_layer = 3 * (W - 1) * HD + H * dh * dh;
    size_t scratch = 3 * D + 2 * W * HD + 3 * HD + 5 * HD + H + 2 * HD + 2 * R + 3 * HD + HD +
                     3 * F + H * dh * dh + H + 16 + 2 * (D > HD ? D : HD);
    dm_infer *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->be = m->be;
    dm_ops_init(&s->ops, c);
    dm_ops_bind(&s->ops, s->be);
    s->ops.kda_impl = DM_IMPL_REFERENCE; /* one token: the recurrence itself */
    s->buf = dm_backend_alloc(s->be, (L * per_layer + scratch + 64 + (size_t)c->vocab) * sizeof(float));
    s->tok = dm_backend_alloc(s->be, sizeof(uint32_t));
    s->cache = calloc(L, sizeof *s->cache);
    s->S = calloc(L, sizeof *s->S);
    if (!s->buf || !s->tok || !s->cache || !s->S) {
        dm_infer_free(s);
        return NULL;
    }
    dm_bf *p = s->buf;
    for (size_t l = 0; l < L; l++) {
        s->cache[l] = p; p += 3 * (W - 1) * HD;
        s->S[l] = p; p += H * dh * dh;
    }
#define TAKE(name, n) do { s->name = p; p += (n); } while (0)
    TAKE(x, D); TAKE(xn, D); TAKE(y, D); TAKE(win, W * HD); TAKE(cout, W * HD); TAKE(qkv, 3 * HD);
    TAKE(qc, HD); TAKE(q, HD); TAKE(k, HD); TAKE(v, HD); TAKE(rn, H); TAKE(f1, R);
    TAKE(f, HD); TAKE(g, HD); TAKE(beta, H); TAKE(o, HD); TAKE(z1, R); TAKE(z, HD);
    TAKE(op, HD); TAKE(ha, F); TAKE(hb, F); TAKE(hh, F); TAKE(S2, H * dh * dh);
    TAKE(rstd, H + 1); TAKE(ns, 2 * (D > HD ? D : HD)); /* composed-norm scratch */
    TAKE(logits, (size_t)c->vocab);
#undef TAKE
    return s;
}

void dm_infer_free(dm_infer *s) {
    if (!s) return;
    dm_ops_free(&s->ops);
    dm_backend_release(s->be, s->buf);
    dm_backend_release(s->be, s->tok);
    free(s->cache);
    free(s->S);
    free(s);
}

void dm_infer_reset(dm_infer *s) {
    const dm_config *c = &s->m->cfg;
    size_t HD = (size_t)c->n_head * c->head_dim, W = c->conv_size;
    for (int l = 0; l < c->n_layer; l++) {
        dm_backend_zero(s->be, s->cache[l], 3 * (W - 1) * HD * sizeof(float));
        dm_backend_zero(s->be, s->S[l],
                        (size_t)c->n_head * c->head_dim * c->head_dim * sizeof(float));
    }
}

/* causal conv of one token: the conv kernel on the W-token window [cache, cur] (win),
 * whose last output is the current one (cout: [W, C]); then the cache shifts by one */
static void conv_step(dm_ops *ops, dm_bf *y, dm_bf *cache, const dm_bf *cur, const dm_bf *w,
                      dm_bf *win, dm_bf *cout, int C, int W) {
    dm_backend *be = ops->be;
    dm_backend_copy(be, win, cache, (size_t)(W - 1) * C * sizeof(float));
    dm_backend_copy(be, win + (size_t)(W - 1) * C, cur, (size_t)C * sizeof(float));
    dm_op_conv_fwd(ops, cout, win, w, 1, W, C, W);
    dm_backend_copy(be, y, cout + (size_t)(W - 1) * C, (size_t)C * sizeof(float));
    dm_backend_copy(be, cache, win + C, (size_t)(W - 1) * C * sizeof(float));
}

void dm_infer_step(dm_infer *s, uint32_t id, float *logits) {
    const dm_model *m = s->m;
    const dm_config *c = &m->cfg;
    const dm_bf *P = m->params;
    int D = c->d_model, H = c->n_head, dh = c->head_dim, HD = H * dh, W = c->conv_size;
    int R = c->gate_rank, F = dm_config_mlp_hidden(c), kda = c->mixer == DM_MIXER_KDA;
    int Cg = kda ? dh : 1;
    dm_ops *ops = &s->ops;
    /* the id in the model's width (dm_id_width), little-endian, as the batches hold ids */
    int w = dm_id_width(c->vocab);
    uint8_t le[4] = {(uint8_t)id, (uint8_t)(id >> 8), (uint8_t)(id >> 16), (uint8_t)(id >> 24)};
    dm_backend_from_host(s->be, s->tok, le, (size_t)w);
    dm_op_embed_fwd_ids(ops, s->x, s->tok, w, P + m->embed, 1, D, c->vocab);
    for (int l = 0; l < c->n_layer; l++) {
        const dm_layer_off *o = &m->L[l];
        dm_bf *rs = s->rstd;
        dm_op_rmsnorm_fwd(ops, s->xn, rs, s->x, P + o->norm1, 1, D, DM_NORM_EPS, s->ns);
        const size_t wq[3] = {o->w_q, o->w_k, o->w_v}, cw[3] = {o->conv_q, o->conv_k, o->conv_v};
        dm_bf *act[3] = {s->q, s->k, s->v};
        for (int i = 0; i < 3; i++) {
            dm_op_matmul_fwd(ops, s->qkv + i * HD, s->xn, P + wq[i], NULL, 1, D, HD);
            conv_step(ops, s->qc, s->cache[l] + (size_t)i * (W - 1) * HD, s->qkv + i * HD, P + cw[i],
                      s->win, s->cout, HD, W);
            dm_op_silu_fwd(ops, i < 2 ? s->o : act[i], s->qc, HD);
            if (i < 2) dm_op_l2norm_fwd(ops, act[i], s->rn, s->o, H, dh, DM_L2_EPS, 0);
        }
        if (kda) {
            dm_op_matmul_fwd(ops, s->f1, s->xn, P + o->w_f1, NULL, 1, D, R);
            dm_op_matmul_fwd(ops, s->f, s->f1, P + o->w_f2, NULL, 1, R, HD);
        } else {
            dm_op_matmul_fwd(ops, s->f, s->xn, P + o->w_a, NULL, 1, D, H);
        }
        dm_op_gate_fwd(ops, s->g, s->f, P + o->a_log, P + o->dt_bias, 1, H, Cg, c->gate_lower_bound);
        dm_op_matmul_fwd(ops, s->o, s->xn, P + o->w_b, NULL, 1, D, H);
        dm_op_sigmoid_fwd(ops, s->beta, s->o, H);
        dm_delta_dims dd = dm_core_dims(c, 1, 1);
        dm_op_delta_fwd(ops, &dd, s->q, s->k, s->v, s->g, s->beta, s->S[l], s->o, s->S2, NULL);
        dm_backend_copy(s->be, s->S[l], s->S2, (size_t)H * dh * dh * sizeof(float));
        if (kda) {
            dm_op_matmul_fwd(ops, s->z1, s->xn, P + o->w_g1, NULL, 1, D, R);
            dm_op_matmul_fwd(ops, s->z, s->z1, P + o->w_g2, P + o->b_g2, 1, R, HD);
        } else {
            dm_op_matmul_fwd(ops, s->z, s->xn, P + o->w_z, NULL, 1, D, HD);
        }
        dm_op_gatednorm_fwd(ops, s->op, rs, s->o, s->z, P + o->o_norm, H, dh, DM_NORM_EPS,
                            kda ? DM_GATE_SIGMOID : DM_GATE_SWISH, s->ns);
        dm_op_matmul_fwd(ops, s->y, s->op, P + o->w_o, NULL, 1, HD, D);
        dm_op_add(ops, s->x, s->y, D);
        dm_op_rmsnorm_fwd(ops, s->xn, rs, s->x, P + o->norm2, 1, D, DM_NORM_EPS, s->ns);
        dm_op_matmul_fwd(ops, s->ha, s->xn, P + o->w_gate, NULL, 1, D, F);
        dm_op_matmul_fwd(ops, s->hb, s->xn, P + o->w_up, NULL, 1, D, F);
        dm_op_swiglu_fwd(ops, s->hh, s->ha, s->hb, F);
        dm_op_matmul_fwd(ops, s->y, s->hh, P + o->w_down, NULL, 1, F, D);
        dm_op_add(ops, s->x, s->y, D);
    }
    dm_op_rmsnorm_fwd(ops, s->xn, s->rstd, s->x, P + m->norm_f, 1, D, DM_NORM_EPS, s->ns);
    dm_op_matmul_fwd(ops, s->logits, s->xn, P + m->lm_head, NULL, 1, D, c->vocab);
    dm_backend_to_host(s->be, logits, s->logits, (size_t)c->vocab * sizeof(float));
}
