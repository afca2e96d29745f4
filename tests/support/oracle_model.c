#include "oracle_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "oracle.h"

static const double *P(const dm_model *m, const double *params, int layer, const char *name) {
    char full[80];
    if (layer >= 0) snprintf(full, sizeof full, "layers.%d.%s", layer, name);
    else snprintf(full, sizeof full, "%s", name);
    const dm_tensor *t = dm_model_find(m, full);
    if (!t) { fprintf(stderr, "oracle: no tensor %s\n", full); abort(); }
    return params + t->offset;
}

double o_model_loss(const dm_model *m, const double *params, const uint8_t *tokens, int B,
                    int T, double *logits_out) {
    const dm_config *c = dm_model_config(m);
    int N = B * T, D = c->d_model, H = c->n_head, dh = c->head_dim, HD = H * dh;
    int R = c->gate_rank, F = dm_config_mlp_hidden(c), W = c->conv_size;
    int kda = c->mixer == DM_MIXER_KDA, Cg = kda ? dh : 1;
    const double eps = 1e-6;
    uint8_t *inp = malloc(N), *tgt = malloc(N);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            inp[b * T + t] = tokens[b * (T + 1) + t];
            tgt[b * T + t] = tokens[b * (T + 1) + t + 1];
        }
    double *x = t_allocd((size_t)N * D), *xn = t_allocd((size_t)N * D), *y = t_allocd((size_t)N * D);
    double *t1 = t_allocd((size_t)N * HD), *t2 = t_allocd((size_t)N * HD), *q = t_allocd((size_t)N * HD), *k = t_allocd((size_t)N * HD);
    double *v = t_allocd((size_t)N * HD), *g = t_allocd((size_t)N * HD), *f = t_allocd((size_t)N * HD);
    double *beta = t_allocd((size_t)N * H), *o = t_allocd((size_t)N * HD), *z = t_allocd((size_t)N * HD);
    double *op = t_allocd((size_t)N * HD), *r = t_allocd((size_t)N * R);
    double *ha = t_allocd((size_t)N * F), *hb = t_allocd((size_t)N * F), *hh = t_allocd((size_t)N * F);
    double *logits = t_allocd((size_t)N * DM_VOCAB);

    o_embed(x, inp, P(m, params, -1, "embed"), N, D);
    for (int l = 0; l < c->n_layer; l++) {
        o_rmsnorm(xn, x, P(m, params, l, "norm1"), N, D, eps);
        /* q, k, v */
        const char *wn[3] = {"mixer.w_q", "mixer.w_k", "mixer.w_v"};
        const char *cn[3] = {"mixer.conv_q", "mixer.conv_k", "mixer.conv_v"};
        double *dst[3] = {q, k, v};
        for (int i = 0; i < 3; i++) {
            o_matmul(t1, xn, P(m, params, l, wn[i]), NULL, N, D, HD);
            o_conv(t2, t1, P(m, params, l, cn[i]), B, T, HD, W);
            o_silu(i < 2 ? t1 : dst[i], t2, (size_t)N * HD);
            if (i < 2) o_l2norm(dst[i], t1, N * H, dh, 1e-6);
        }
        /* gate, beta */
        if (kda) {
            o_matmul(r, xn, P(m, params, l, "mixer.w_f1"), NULL, N, D, R);
            o_matmul(f, r, P(m, params, l, "mixer.w_f2"), NULL, N, R, HD);
        } else {
            o_matmul(f, xn, P(m, params, l, "mixer.w_a"), NULL, N, D, H);
        }
        o_gate(g, f, P(m, params, l, "mixer.a_log"), P(m, params, l, "mixer.dt_bias"), N, H, Cg,
               c->gate_lower_bound);
        o_matmul(t2, xn, P(m, params, l, "mixer.w_b"), NULL, N, D, H);
        o_sigmoid(beta, t2, (size_t)N * H);
        dm_delta_dims dd = {B, T, H, dh, dh, !kda, 1.0f / sqrtf((float)dh)};
        o_delta(&dd, q, k, v, g, beta, NULL, o, NULL);
        /* output gate and norm */
        if (kda) {
            o_matmul(r, xn, P(m, params, l, "mixer.w_g1"), NULL, N, D, R);
            o_matmul(z, r, P(m, params, l, "mixer.w_g2"), P(m, params, l, "mixer.b_g2"), N, R, HD);
        } else {
            o_matmul(z, xn, P(m, params, l, "mixer.w_z"), NULL, N, D, HD);
        }
        o_gatednorm(op, o, z, P(m, params, l, "mixer.o_norm"), N * H, dh, eps, kda ? 0 : 1);
        o_matmul(y, op, P(m, params, l, "mixer.w_o"), NULL, N, HD, D);
        for (size_t i = 0; i < (size_t)N * D; i++) x[i] += y[i];
        /* MLP */
        o_rmsnorm(xn, x, P(m, params, l, "norm2"), N, D, eps);
        o_matmul(ha, xn, P(m, params, l, "mlp.w_gate"), NULL, N, D, F);
        o_matmul(hb, xn, P(m, params, l, "mlp.w_up"), NULL, N, D, F);
        o_swiglu(hh, ha, hb, (size_t)N * F);
        o_matmul(y, hh, P(m, params, l, "mlp.w_down"), NULL, N, F, D);
        for (size_t i = 0; i < (size_t)N * D; i++) x[i] += y[i];
    }
    o_rmsnorm(xn, x, P(m, params, -1, "norm_f"), N, D, eps);
    o_matmul(logits, xn, P(m, params, -1, c->tie_embeddings ? "embed" : "lm_head"), NULL, N, D,
             DM_VOCAB);
    double loss = o_xent(logits, tgt, N, DM_VOCAB);
    if (logits_out) memcpy(logits_out, logits, (size_t)N * DM_VOCAB * sizeof(double));
    free(inp); free(tgt); free(x); free(xn); free(y); free(t1); free(t2); free(q); free(k); free(v);
    free(g); free(f); free(beta); free(o); free(z); free(op); free(r); free(ha); free(hb);
    free(hh); free(logits);
    return loss;
}
