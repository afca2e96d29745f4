/* model.c — the parameter table (one flat buffer, grads in a second of the same layout),
 * seeded initialization, the activation arena laid out by the plan (plan.c) for (config,
 * B, T), and the memory figures.
 * Forward/backward of the network: network.c and mixer.c. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "base/rng.h"

enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS, INIT_A_LOG, INIT_DT_BIAS };

/* the parameter table as it is built: tensors and their init kinds grow together */
typedef struct {
    dm_model *m;
    int cap;
    int *kinds;
    int oom;
} table_builder;

static size_t add(table_builder *tb, const char *name, int rows, int cols, unsigned flags,
                  int init) {
    dm_model *m = tb->m;
    if (tb->oom) return 0;
    if (m->n_tensors == tb->cap) {
        int cap = tb->cap ? 2 * tb->cap : 64;
        dm_tensor *t = realloc(m->tensors, (size_t)cap * sizeof *t);
        if (t) m->tensors = t;
        int *k = t ? realloc(tb->kinds, (size_t)cap * sizeof *k) : NULL;
        if (k) tb->kinds = k;
        if (!t || !k) {
            tb->oom = 1;
            return 0;
        }
        tb->cap = cap;
    }
    dm_tensor *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols > 0 ? cols : 0;
    t->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    t->offset = m->n_params;
    t->flags = flags;
    tb->kinds[m->n_tensors] = init;
    m->n_tensors++;
    m->n_params += t->numel;
    return t->offset;
}

/* Build the parameter table of cfg. Order and names are stable: checkpoints use them. */
static int build_table(dm_model *m, table_builder *tb) {
    const dm_config *c = &m->cfg;
    int D = c->d_model, H = c->n_head, dh = c->head_dim, HD = H * dh, R = c->gate_rank;
    int F = dm_config_mlp_hidden(c), W = c->conv_size;
    int kda = c->mixer == DM_MIXER_KDA;
    char n[64];
    const unsigned MAT = DM_P_MATRIX, ND = DM_P_NO_DECAY, HW = DM_P_MATRIX | DM_P_HEADWISE;

    m->embed = add(tb, "embed", c->vocab, D, 0, INIT_NORMAL);
    m->L = calloc((size_t)c->n_layer, sizeof *m->L);
    if (!m->L) return tb->oom = 1;
    for (int l = 0; l < c->n_layer; l++) {
        dm_layer_off *o = &m->L[l];
        memset(o, 0xff, sizeof *o); /* DM_NO_TENSOR everywhere */
#define P(field, suffix, rows, cols, flags, init)                                      \
    do {                                                                               \
        snprintf(n, sizeof n, "layers.%d.%s", l, suffix);                              \
        o->field = add(tb, n, rows, cols, flags, init);                                \
    } while (0)
        P(norm1, "norm1", D, 0, ND, INIT_ONES);
        P(w_q, "mixer.w_q", HD, D, HW, INIT_NORMAL);
        P(w_k, "mixer.w_k", HD, D, HW, INIT_NORMAL);
        P(w_v, "mixer.w_v", HD, D, MAT, INIT_NORMAL);
        P(conv_q, "mixer.conv_q", HD, W, 0, INIT_NORMAL);
        P(conv_k, "mixer.conv_k", HD, W, 0, INIT_NORMAL);
        P(conv_v, "mixer.conv_v", HD, W, 0, INIT_NORMAL);
        if (kda) {
            P(w_f1, "mixer.w_f1", R, D, MAT, INIT_NORMAL);
            P(w_f2, "mixer.w_f2", HD, R, MAT, INIT_NORMAL);
            P(a_log, "mixer.a_log", H, 0, ND, INIT_A_LOG);
            P(dt_bias, "mixer.dt_bias", HD, 0, ND, INIT_DT_BIAS);
        } else {
            P(w_a, "mixer.w_a", H, D, 0, INIT_NORMAL);
            P(a_log, "mixer.a_log", H, 0, ND, INIT_A_LOG);
            P(dt_bias, "mixer.dt_bias", H, 0, ND, INIT_DT_BIAS);
        }
        P(w_b, "mixer.w_b", H, D, 0, INIT_NORMAL);
        if (kda) {
            P(w_g1, "mixer.w_g1", R, D, MAT, INIT_NORMAL);
            P(w_g2, "mixer.w_g2", HD, R, MAT, INIT_NORMAL);
            P(b_g2, "mixer.b_g2", HD, 0, ND, INIT_ZEROS);
        } else {
            P(w_z, "mixer.w_z", HD, D, MAT, INIT_NORMAL);
        }
        P(o_norm, "mixer.o_norm", dh, 0, ND, INIT_ONES);
        P(w_o, "mixer.w_o", D, HD, MAT, INIT_NORMAL);
        P(norm2, "norm2", D, 0, ND, INIT_ONES);
        P(w_gate, "mlp.w_gate", F, D, MAT, INIT_NORMAL);
        P(w_up, "mlp.w_up", F, D, MAT, INIT_NORMAL);
        P(w_down, "mlp.w_down", D, F, MAT, INIT_NORMAL);
#undef P
    }
    m->norm_f = add(tb, "norm_f", D, 0, ND, INIT_ONES);
    m->lm_head = c->tie_embeddings ? m->embed : add(tb, "lm_head", c->vocab, D, 0, INIT_NORMAL);
    return tb->oom;
}

/* Each tensor draws from its own stream (seed, hash(name)): its init does not depend on
 * the other tensors, the thread count or the machine. */
static void init_params(dm_model *m, float *params, const int *kinds) {
    for (int i = 0; i < m->n_tensors; i++) {
        const dm_tensor *t = &m->tensors[i];
        float *p = params + t->offset;
        dm_rng r;
        dm_rng_seed(&r, m->cfg.seed, dm_hash_str(t->name));
        for (size_t j = 0; j < t->numel; j++) {
            double v = 0;
            switch (kinds[i]) {
            case INIT_NORMAL: v = 0.02 * dm_rng_normal(&r); break;
            case INIT_ONES: v = 1; break;
            case INIT_ZEROS: v = 0; break;
            case INIT_A_LOG: v = log(1 + 15 * dm_rng_uniform(&r)); break; /* ln U(1,16) */
            case INIT_DT_BIAS: {
                double dt = exp(log(1e-3) + (log(0.1) - log(1e-3)) * dm_rng_uniform(&r));
                if (dt < 1e-4) dt = 1e-4;
                v = dt + log(-expm1(-dt)); /* softplus^-1(dt) */
                break;
            }
            }
            p[j] = (float)v;
        }
    }
}

dm_model *dm_model_create(const dm_config *cfg, char *err, size_t errlen) {
    return dm_model_create_threads(cfg, 0, err, errlen);
}

dm_model *dm_model_create_threads(const dm_config *cfg, int threads, char *err, size_t errlen) {
    if (dm_config_validate(cfg, err, errlen)) return NULL;
    dm_model *m = calloc(1, sizeof *m);
    table_builder tb = {m, 0, NULL, 0};
    if (!m) {
        if (err) snprintf(err, errlen, "out of memory creating the model");
        return NULL;
    }
    m->cfg = *cfg;
    dm_network_forget_ws(m);
    dm_ops_init(&m->ops, cfg);
    if (!(m->be = dm_backend_create(cfg->backend, cfg->device, err, errlen))) goto fail;
    dm_ops_bind(&m->ops, m->be);
    if (build_table(m, &tb)) {
        if (err) snprintf(err, errlen, "out of memory building the parameter table (%d tensors)",
                          m->n_tensors);
        goto fail;
    }
    size_t pbytes = m->n_params * sizeof(float);
    m->params = dm_backend_alloc(m->be, pbytes);
    m->grads = dm_backend_alloc(m->be, pbytes);
    m->loss_mem = dm_backend_alloc(m->be, sizeof(double));
    float *init = m->params ? dm_backend_map(m->be, m->params, pbytes, 0) : NULL;
    if (!m->params || !m->grads || !m->loss_mem || !init) {
        if (err)
            snprintf(err, errlen, "out of memory: %zu parameters and their gradients need %.1f MiB",
                     m->n_params, 2.0 * m->n_params * sizeof(float) / (1 << 20));
        goto fail;
    }
    init_params(m, init, tb.kinds); /* on the host, then to the backend */
    dm_backend_unmap(m->be, m->params, init, pbytes, 1);
    /* the execution policy, decided once by the backend; everything after reads it */
    dm_delta_dims core = dm_core_dims(cfg, 1, 1);
    if (!m->be->vt->policy) {
        if (err) snprintf(err, errlen, "backend %s: it decides no execution policy", m->be->name);
        goto fail;
    }
    dm_config asked = *cfg; /* the job's share of the cores, for the policy's pool */
    if (threads > 0) asked.threads = threads;
    if (m->be->vt->policy(m->be, &asked, &m->ops, &core, &m->policy, err, errlen)) goto fail;
    m->ops.policy = &m->policy;
    if (cfg->kda_impl == DM_IMPL_CHUNKED && m->policy.delta != DM_IMPL_CHUNKED) {
        if (err)
            snprintf(err, errlen, "kda_impl=chunked: the chunked kernel does not support this "
                                  "model (%s); use kda_impl=auto or reference",
                     m->policy.delta_why ? m->policy.delta_why : "the backend has none");
        goto fail;
    }
    dm_plan_make(&m->plan, cfg, (int)dm_ops_side_bytes(&m->ops));
    if (m->policy.prec.matmul_bf16) {
        if (dm_ops_reserve_bf16_weights(&m->ops, m->n_params)) {
            if (err)
                snprintf(err, errlen, "out of memory: the bf16 copy of the weights needs %.1f MiB",
                         m->n_params * 2.0 / (1 << 20));
            goto fail;
        }
    }
    if (cfg->gemm == DM_GEMM_ONEDNN && m->policy.gemm_why) { /* the policy's engine */
        if (err)
            snprintf(err, errlen, "gemm=onednn: %s; use gemm=auto or openblas",
                     m->policy.gemm_why);
        goto fail;
    }
    free(tb.kinds);
    return m;
fail:
    free(tb.kinds);
    dm_model_free(m);
    return NULL;
}

void dm_model_free(dm_model *m) {
    if (!m) return;
    dm_ops_free(&m->ops);
    free(m->tensors);
    free(m->L);
    if (m->be) {
        dm_backend_release(m->be, m->params);
        dm_backend_release(m->be, m->grads);
        dm_backend_release(m->be, m->loss_mem);
        dm_backend_release(m->be, m->arena);
        dm_backend_release(m->be, m->vroom);
        dm_backend_release(m->be, m->inp);
        dm_backend_release(m->be, m->tgt);
        dm_backend_free(m->be);
    }
    free(m->act);
    free(m->tok_model);
    free(m);
}

int dm_model_set_tokenizer(dm_model *m, const void *bytes, size_t n, const char *checksum) {
    free(m->tok_model);
    m->tok_model = NULL;
    m->tok_model_n = 0;
    m->tok_checksum[0] = 0;
    if (!n) return 0;
    if (!(m->tok_model = malloc(n))) return 1;
    memcpy(m->tok_model, bytes, n);
    m->tok_model_n = n;
    snprintf(m->tok_checksum, sizeof m->tok_checksum, "%s", checksum);
    return 0;
}

const void *dm_model_tokenizer(const dm_model *m, size_t *n, const char **checksum) {
    if (n) *n = m->tok_model_n;
    if (checksum) *checksum = m->tok_checksum;
    return m->tok_model;
}

const dm_config *dm_model_config(const dm_model *m) { return &m->cfg; }
size_t dm_model_num_params(const dm_model *m) { return m->n_params; }
int dm_model_num_tensors(const dm_model *m) { return m->n_tensors; }
const dm_tensor *dm_model_tensor(const dm_model *m, int i) {
    return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}
const dm_tensor *dm_model_find(const dm_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}
dm_backend *dm_model_backend(const dm_model *m) { return m->be; }
dm_bf *dm_model_param_mem(dm_model *m) { return m->params; }
dm_bf *dm_model_grad_mem(dm_model *m) { return m->grads; }
const double *dm_model_loss_mem(const dm_model *m) { return m->loss_mem; }
const char *dm_model_backend_name(const dm_model *m) { return m->be->name; }
float *dm_model_params(dm_model *m) { return dm_backend_host_view(m->be, m->params); }
float *dm_model_grads(dm_model *m) { return dm_backend_host_view(m->be, m->grads); }
void dm_model_zero_grad(dm_model *m) { dm_backend_zero(m->be, m->grads, m->n_params * sizeof(float)); }

void dm_model_params_to_host(const dm_model *m, float *dst) {
    dm_backend_to_host(m->be, dst, m->params, m->n_params * sizeof(float));
}
void dm_model_params_from_host(dm_model *m, const float *src) {
    dm_backend_from_host(m->be, m->params, src, m->n_params * sizeof(float));
    m->have_forward = 0; /* the last forward's activations are of other weights */
}
void dm_model_grads_to_host(const dm_model *m, float *dst) {
    dm_backend_to_host(m->be, dst, m->grads, m->n_params * sizeof(float));
}

/* the tensor `name` of numel n, or NULL with err */
static const dm_tensor *named(const dm_model *m, const char *name, size_t n, char *err,
                              size_t errlen) {
    const dm_tensor *t = name ? dm_model_find(m, name) : NULL;
    if (!t) {
        if (err) snprintf(err, errlen, "no tensor '%s' in the model", name ? name : "(null)");
        return NULL;
    }
    if (n != t->numel) {
        if (err)
            snprintf(err, errlen, "tensor '%s' has %zu values, not %zu", name, t->numel, n);
        return NULL;
    }
    return t;
}

int dm_model_get(const dm_model *m, const char *name, float *dst, size_t n, char *err,
                 size_t errlen) {
    const dm_tensor *t = named(m, name, n, err, errlen);
    if (!t) return 1;
    dm_backend_to_host(m->be, dst, m->params + t->offset, n * sizeof(float));
    return 0;
}

int dm_model_set(dm_model *m, const char *name, const float *src, size_t n, char *err,
                 size_t errlen) {
    const dm_tensor *t = named(m, name, n, err, errlen);
    if (!t) return 1;
    dm_backend_from_host(m->be, m->params + t->offset, src, n * sizeof(float));
    m->have_forward = 0; /* the last forward's activations are of other weights */
    return 0;
}

/* ---- the arena ---- */

/* Point the norms' and the delta core's scratch at verify mode's room while verify is on
 * (made, or grown, for the current layout), else at the arena's own. 0, or 1 when the
 * room cannot be made (verify then stays off). */
static int verify_room(dm_model *m) {
    m->s.norm_scratch = m->arena_norm_scratch;
    m->s.delta_work = m->arena_delta_work;
    m->s.delta_work_n = m->arena_delta_work_n;
    dm_ops_set_scratch(&m->ops, m->s.delta_work, m->s.delta_work_n);
    if (!m->ops.verify || !m->arena) return 0;
    size_t norm_off, delta_off;
    size_t n = dm_plan_verify_room(&m->cfg, &m->ops, m->lay_B, m->lay_T, &norm_off, &delta_off);
    if (n > m->vroom_floats) {
        dm_backend_release(m->be, m->vroom);
        m->vroom = dm_backend_alloc(m->be, n * sizeof(float));
        m->vroom_floats = m->vroom ? n : 0;
        if (!m->vroom) {
            m->ops.verify = 0;
            return 1;
        }
    }
    m->s.norm_scratch = m->vroom + norm_off;
    m->s.delta_work = m->vroom + delta_off; /* the room's last region */
    m->s.delta_work_n = n - delta_off;
    dm_ops_set_scratch(&m->ops, m->s.delta_work, m->s.delta_work_n);
    return 0;
}

/* The plan of config c with no model, for B x T on nthreads threads, as a cpu model of c
 * would make it: the host backend's policy decides its precision and sizes the delta
 * core's scratch and the side room. Into p and sz (may be NULL), and whether the model
 * would keep a bf16 copy of its weights into *bf16 (may be NULL); returns the arena's
 * floats. */
static size_t host_layout(const dm_config *c, int B, int T, int nthreads, dm_plan *p,
                          dm_arena_sizes *sz, int *bf16) {
    char err[256];
    dm_ops ops;
    dm_ops_init(&ops, c);
    dm_delta_dims core = dm_core_dims(c, 1, 1);
    const dm_backend_reg *host = dm_backend_reg_of(DM_BACKEND_AUTO);
    dm_policy pol = {0};
    if (host && host->vt && host->vt->policy)
        host->vt->policy(NULL, c, &ops, &core, &pol, err, sizeof err); /* a refusal: the
                                                                           record stands */
    pol.threads = nthreads < 1 ? 1 : nthreads;
    ops.policy = &pol;
    dm_plan_make(p, c, (int)dm_ops_side_bytes(&ops));
    if (bf16) *bf16 = pol.prec.matmul_bf16;
    size_t n = dm_plan_layout(c, p, &ops, B, T, NULL, NULL, sz);
    dm_ops_free(&ops);
    return n;
}

size_t dm_model_arena_bytes(const dm_config *cfg, int B, int T, int nthreads) {
    dm_plan p;
    return host_layout(cfg, B, T, nthreads, &p, NULL, NULL) * sizeof(float);
}

int dm_model_reserve(dm_model *m, int B, int T, char *err, size_t errlen) {
    if (B < 1 || T < 1) {
        if (err) snprintf(err, errlen, "batch of %d x %d: both must be >= 1", B, T);
        return 1;
    }
    size_t BT = (size_t)B * T;
    if (BT * (size_t)m->cfg.n_head > INT_MAX) {
        if (err)
            snprintf(err, errlen, "batch of %d x %d: %zu rows of %d heads exceed the %d rows an "
                     "op takes", B, T, BT, m->cfg.n_head, INT_MAX);
        return 1;
    }
    int nthreads = dm_ops_threads(&m->ops); /* the policy's */
    if (!(m->arena && B == m->lay_B && T == m->lay_T && nthreads == m->nthreads)) {
        /* the regions depend on B and T separately (the chunked core keeps state per
         * chunk), so every new shape is laid out anew; the memory only grows */
        m->have_forward = 0;
        dm_network_forget_ws(m);
        size_t n = dm_plan_layout(&m->cfg, &m->plan, &m->ops, B, T, NULL, NULL, NULL);
        if (!m->act) m->act = calloc((size_t)m->cfg.n_layer, sizeof *m->act);
        if (n > m->arena_floats) {
            dm_backend_release(m->be, m->arena);
            m->arena = dm_backend_alloc(m->be, n * sizeof(float));
            m->arena_floats = m->arena ? n : 0;
        }
        if (BT > m->io_cap) {
            dm_backend_release(m->be, m->inp);
            dm_backend_release(m->be, m->tgt);
            size_t w = (size_t)dm_id_width(m->cfg.vocab);
            m->inp = dm_backend_alloc(m->be, BT * w);
            m->tgt = dm_backend_alloc(m->be, BT * w);
            m->io_cap = m->inp && m->tgt ? BT : 0;
        }
        if (!m->arena || !m->act || !m->io_cap) {
            if (err)
                snprintf(err, errlen, "out of memory: the activation arena for %d x %d needs "
                         "%.1f MiB", B, T, n * 4.0 / (1 << 20));
            m->lay_B = m->lay_T = 0;
            return 1;
        }
        dm_arena_ptrs ptrs = {.act = m->act};
        dm_plan_layout(&m->cfg, &m->plan, &m->ops, B, T, m->arena, &ptrs, &m->sizes);
        m->x_final = ptrs.x_final;
        m->head = ptrs.head;
        m->s = ptrs.s;
        m->arena_norm_scratch = m->s.norm_scratch;
        m->arena_delta_work = m->s.delta_work;
        m->arena_delta_work_n = m->s.delta_work_n;
        m->lay_B = B;
        m->lay_T = T;
        m->nthreads = nthreads;
        m->layout_gen++;
    }
    if (verify_room(m)) {
        if (err) snprintf(err, errlen, "out of memory: verify mode's scratch for %d x %d", B, T);
        return 1;
    }
    return 0;
}

int dm_model_put_batch(dm_model *m, const void *tokens, int B, int T) {
    dm_backend_apply(m->be, &m->policy); /* its thread pool, if another model changed it */
    if (dm_model_reserve(m, B, T, NULL, 0)) return 1;
    size_t w = (size_t)dm_id_width(m->cfg.vocab);
    const uint8_t *ids = tokens;
    for (int b = 0; b < B; b++) { /* the batch to the backend, queued (no wait) */
        dm_backend_put(m->be, m->inp + (size_t)b * T * w, ids + (size_t)b * (T + 1) * w,
                       (size_t)T * w);
        dm_backend_put(m->be, m->tgt + (size_t)b * T * w, ids + ((size_t)b * (T + 1) + 1) * w,
                       (size_t)T * w);
    }
    m->B = B;
    m->T = T;
    return 0;
}

void dm_model_forward_put(dm_model *m) {
    dm_ops_forget_bf16(&m->ops); /* the last forward's activation copies */
    if (m->policy.prec.matmul_bf16) /* the weights as the bf16 products read them, once per forward */
        dm_ops_set_weights(&m->ops, m->params, m->n_params);
    dm_network_fwd(m);
    m->have_forward = 1;
}

void dm_model_forward_replayed(dm_model *m) { m->have_forward = 1; }
void dm_model_backward_replayed(dm_model *m) { m->have_forward = 0; }

int dm_model_forward_queued(dm_model *m, const void *tokens, int B, int T) {
    if (dm_model_put_batch(m, tokens, B, T)) return 1;
    dm_model_forward_put(m);
    return 0;
}

long dm_model_layout_gen(const dm_model *m) { return m->layout_gen; }
void dm_model_op_counts(const dm_model *m, long *out) { dm_ops_counts(&m->ops, out); }
void dm_model_op_counts_add(dm_model *m, const long *d) { dm_ops_counts_add(&m->ops, d); }

float dm_model_forward(dm_model *m, const void *tokens, int B, int T, float *logits) {
    if (dm_model_forward_queued(m, tokens, B, T)) return NAN;
    if (logits) dm_network_logits(m, logits);
    double loss;
    dm_backend_to_host(m->be, &loss, m->loss_mem, sizeof loss); /* waits for the backend */
    return (float)loss;
}

void dm_model_backward(dm_model *m) {
    if (!m->have_forward) return;
    dm_network_bwd(m);
    m->have_forward = 0; /* backward consumes the logits (turned into their gradient) */
}

/* ---- memory ---- */

/* the figures of a layout into mem */
static void memory_of(int bf16_weights, size_t n_params, const dm_arena_sizes *sz, int B,
                      int T, dm_memory *mem) {
    memset(mem, 0, sizeof *mem);
    mem->params = n_params * sizeof(float);
    mem->params_bf16 = bf16_weights ? n_params * 2 : 0;
    mem->grads = n_params * sizeof(float);
    mem->saved = sz->saved * sizeof(float);
    mem->recompute = sz->recompute * sizeof(float);
    mem->scratch = sz->scratch * sizeof(float);
    mem->verify = sz->verify * sizeof(float);
    mem->products = sz->products;
    mem->batch = B;
    mem->seq_len = T;
}

int dm_memory_plan(const dm_config *c, int B, int T, int nthreads, dm_memory *mem, char *err,
                   size_t errlen) {
    if (dm_config_validate(c, err, errlen)) return 1;
    dm_model *m = calloc(1, sizeof *m);
    table_builder tb = {m, 0, NULL, 0};
    int bad = !m;
    if (m) {
        m->cfg = *c;
        bad = build_table(m, &tb);
    }
    if (bad) {
        if (err) snprintf(err, errlen, "out of memory planning the model");
    } else {
        dm_plan p;
        dm_arena_sizes sz;
        int bf16 = 0;
        host_layout(c, B, T, nthreads, &p, &sz, &bf16);
        memory_of(bf16, m->n_params, &sz, B, T, mem);
    }
    free(tb.kinds);
    dm_model_free(m);
    return bad;
}

int dm_model_memory(const dm_model *m, dm_memory *mem) {
    if (!m->arena) return 1;
    memory_of(m->policy.prec.matmul_bf16, m->n_params, &m->sizes, m->lay_B, m->lay_T, mem);
    if (m->vroom_floats * sizeof(float) > mem->verify) mem->verify = m->vroom_floats * sizeof(float);
    return 0;
}

void dm_model_dispatch_report(const dm_model *m, char *buf, size_t n) {
    dm_ops_report(&m->ops, buf, n);
}

void dm_model_dispatch_table(const dm_model *m, char *buf, size_t n) {
    dm_ops_table(&m->ops, buf, n);
}

void dm_model_set_verify(dm_model *m, int on) {
    m->ops.verify = on;
    verify_room(m);
}

double dm_model_verify_take(dm_model *m, char *what, size_t n) {
    return dm_ops_verify_take(&m->ops, what, n);
}

void dm_model_set_atlas(dm_model *m, dm_atlas *atlas) {
    m->ops.atlas = atlas;
    if (atlas) atlas->measure = m->be->vt->roofline; /* the roofline on the step's kernels */
}
