/* plan.c — the one table of the activation plan (see plan.h): every step of a unit's
 * forward with its class, every tensor a step writes with its size, the keep rule of
 * each checkpointing mode, and the arena layout that follows from it. */
#include "model/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

const dm_step_def dm_step_defs[DM_NSTEPS] = {
    [DM_S_NORM1] = {"norm1", DM_UNIT_MIXER, DM_SC_MEMORY},
    [DM_S_QKV] = {"qkv", DM_UNIT_MIXER, DM_SC_COMPUTE},
    [DM_S_CONV] = {"conv", DM_UNIT_MIXER, DM_SC_MEMORY},
    [DM_S_ACT] = {"act", DM_UNIT_MIXER, DM_SC_MEMORY},
    [DM_S_F1] = {"f1", DM_UNIT_MIXER, DM_SC_LOWRANK},
    [DM_S_F] = {"f", DM_UNIT_MIXER, DM_SC_LOWRANK},
    [DM_S_GATE] = {"gate", DM_UNIT_MIXER, DM_SC_MEMORY},
    [DM_S_BPROJ] = {"bproj", DM_UNIT_MIXER, DM_SC_COMPUTE},
    [DM_S_BETA] = {"beta", DM_UNIT_MIXER, DM_SC_MEMORY},
    [DM_S_CORE] = {"core", DM_UNIT_MIXER, DM_SC_COMPUTE},
    [DM_S_Z1] = {"z1", DM_UNIT_MIXER, DM_SC_LOWRANK},
    [DM_S_Z] = {"z", DM_UNIT_MIXER, DM_SC_LOWRANK},
    [DM_S_ONORM] = {"onorm", DM_UNIT_MIXER, DM_SC_MEMORY},
    [DM_S_MIX_OUT] = {"mix_out", DM_UNIT_MIXER, DM_SC_OUT},
    [DM_S_NORM2] = {"norm2", DM_UNIT_MLP, DM_SC_MEMORY},
    [DM_S_UP] = {"up", DM_UNIT_MLP, DM_SC_COMPUTE},
    [DM_S_SWIGLU] = {"swiglu", DM_UNIT_MLP, DM_SC_MEMORY},
    [DM_S_MLP_OUT] = {"mlp_out", DM_UNIT_MLP, DM_SC_OUT},
    [DM_S_NORMF] = {"normf", DM_UNIT_HEAD, DM_SC_MEMORY},
    [DM_S_LOGITS] = {"logits", DM_UNIT_HEAD, DM_SC_COMPUTE},
};
const int dm_unit_first[DM_UNIT_KINDS + 1] = {DM_S_NORM1, DM_S_NORM2, DM_S_NORMF, DM_NSTEPS};

/* sizes of tensors, per row (N rows) unless noted */
enum {
    SZ_D,     /* d_model */
    SZ_1,     /* one */
    SZ_HD,    /* n_head*head_dim */
    SZ_H,     /* n_head */
    SZ_R_KDA, /* gate_rank for KDA, none for GDN */
    SZ_G,     /* n_head*Cg: the gate (Cg = head_dim for KDA, 1 for GDN) */
    SZ_F,     /* MLP hidden */
    SZ_V,     /* 256 (the logits); token vocabularies: the fused head's chunk */
    SZ_SAVED, /* the chunked core's saved state (per layer, not per row; 0 off that path) */
};

/* Every tensor a step writes. side: the side room of the tensor before it (ops.h; exists
 * when the backend keeps some). field: its pointer in dm_layer_act (mixer, mlp) or
 * dm_head_act (head). */
typedef struct {
    const char *name;
    int step, size, side;
    size_t field;
} tensor_def;

#define L_(f) offsetof(dm_layer_act, f)
#define H_(f) offsetof(dm_head_act, f)
static const tensor_def TENSORS[] = {
    {"xn1", DM_S_NORM1, SZ_D, 0, L_(xn1)},
    {"rstd1", DM_S_NORM1, SZ_1, 0, L_(rstd1)},
    {"xn1_side", DM_S_NORM1, SZ_D, 1, L_(xn1_side)},
    {"qt", DM_S_QKV, SZ_HD, 0, L_(qt)},
    {"kt", DM_S_QKV, SZ_HD, 0, L_(kt)},
    {"vt", DM_S_QKV, SZ_HD, 0, L_(vt)},
    {"qc", DM_S_CONV, SZ_HD, 0, L_(qc)},
    {"kc", DM_S_CONV, SZ_HD, 0, L_(kc)},
    {"vc", DM_S_CONV, SZ_HD, 0, L_(vc)},
    {"qh", DM_S_ACT, SZ_HD, 0, L_(qh)},
    {"kh", DM_S_ACT, SZ_HD, 0, L_(kh)},
    {"v", DM_S_ACT, SZ_HD, 0, L_(v)},
    {"rq", DM_S_ACT, SZ_H, 0, L_(rq)},
    {"rk", DM_S_ACT, SZ_H, 0, L_(rk)},
    {"f1", DM_S_F1, SZ_R_KDA, 0, L_(f1)},
    {"f1_side", DM_S_F1, SZ_R_KDA, 1, L_(f1_side)},
    {"f", DM_S_F, SZ_G, 0, L_(f)},
    {"g", DM_S_GATE, SZ_G, 0, L_(g)},
    {"bpre", DM_S_BPROJ, SZ_H, 0, L_(bpre)},
    {"beta", DM_S_BETA, SZ_H, 0, L_(beta)},
    {"o", DM_S_CORE, SZ_HD, 0, L_(o)},
    {"saved", DM_S_CORE, SZ_SAVED, 0, L_(saved)},
    {"z1", DM_S_Z1, SZ_R_KDA, 0, L_(z1)},
    {"z1_side", DM_S_Z1, SZ_R_KDA, 1, L_(z1_side)},
    {"z", DM_S_Z, SZ_HD, 0, L_(z)},
    {"op", DM_S_ONORM, SZ_HD, 0, L_(op)},
    {"rstd_o", DM_S_ONORM, SZ_H, 0, L_(rstd_o)},
    {"op_side", DM_S_ONORM, SZ_HD, 1, L_(op_side)},
    {"xn2", DM_S_NORM2, SZ_D, 0, L_(xn2)},
    {"rstd2", DM_S_NORM2, SZ_1, 0, L_(rstd2)},
    {"xn2_side", DM_S_NORM2, SZ_D, 1, L_(xn2_side)},
    {"a", DM_S_UP, SZ_F, 0, L_(a)},
    {"b", DM_S_UP, SZ_F, 0, L_(b)},
    {"h", DM_S_SWIGLU, SZ_F, 0, L_(h)},
    {"h_side", DM_S_SWIGLU, SZ_F, 1, L_(h_side)},
    {"xnf", DM_S_NORMF, SZ_D, 0, H_(xnf)},
    {"rstdf", DM_S_NORMF, SZ_1, 0, H_(rstdf)},
    {"xnf_side", DM_S_NORMF, SZ_D, 1, H_(xnf_side)},
    {"logits", DM_S_LOGITS, SZ_V, 0, H_(logits)},
};
#undef L_
#undef H_
#define NTENSORS ((int)(sizeof TENSORS / sizeof TENSORS[0]))

void dm_plan_make(dm_plan *p, const dm_config *c, int side) {
    memset(p, 0, sizeof *p);
    p->mode = c->checkpointing;
    p->side = side > 0 ? side : 0;
    for (int s = 0; s < DM_NSTEPS; s++) {
        int cls = dm_step_defs[s].cls;
        /* GDN's gate and output gate read the normed input itself (W_a x, W_z x) */
        if (cls == DM_SC_LOWRANK && c->mixer == DM_MIXER_GDN) cls = DM_SC_COMPUTE;
        /* the head runs last in the forward and first in the backward: its part of the
         * workspace still holds its outputs when its backward needs them, so balanced
         * keeps none of them apart (what it writes costs no recompute either way) */
        int head = dm_step_defs[s].unit == DM_UNIT_HEAD;
        p->cls[s] = cls;
        p->keep[s] = cls == DM_SC_OUT || c->checkpointing == DM_CKPT_NONE ||
                     (c->checkpointing == DM_CKPT_BALANCED && cls == DM_SC_COMPUTE && !head);
        p->rerun[s] = !p->keep[s];
    }
}

int dm_plan_ws_overlap(const dm_arena_sizes *sz, int a, int b) {
    return sz->ws_lo[a] < sz->ws_hi[a] && sz->ws_lo[b] < sz->ws_hi[b] &&
           sz->ws_lo[a] < sz->ws_hi[b] && sz->ws_lo[b] < sz->ws_hi[a];
}

int dm_plan_recomputes(const dm_plan *p, int kind) {
    for (int s = dm_unit_first[kind]; s < dm_unit_first[kind + 1]; s++)
        if (p->rerun[s]) return 1;
    return 0;
}

const char *dm_step_outputs(int step, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < NTENSORS && used < n; i++)
        if (TENSORS[i].step == step)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? "," : "",
                                     TENSORS[i].name);
    return buf;
}

const char *dm_plan_tensor(int i, int *step, size_t *field, int *side) {
    if (i < 0 || i >= NTENSORS) return NULL;
    if (step) *step = TENSORS[i].step;
    if (field) *field = TENSORS[i].field;
    if (side) *side = TENSORS[i].side;
    return TENSORS[i].name;
}

/* ---- the layout ---- */

typedef struct {
    dm_bf *base; /* NULL: only count */
    size_t used; /* floats */
} bump;

static dm_bf *take(bump *b, size_t n) {
    dm_bf *p = b->base && n ? b->base + b->used : NULL;
    b->used += (n + 15) & ~(size_t)15; /* 64-byte aligned slices */
    return p;
}

dm_delta_dims dm_core_dims(const dm_config *c, int B, int T) {
    dm_delta_dims d = {B, T, c->n_head, c->head_dim, c->head_dim,
                       c->mixer == DM_MIXER_GDN, 1.0f / sqrtf((float)c->head_dim)};
    return d;
}

/* floats of the side room of n floats at `side` bytes per float (rounded up) */
static size_t side_floats(size_t n, int side) {
    return (n * (size_t)side + sizeof(float) - 1) / sizeof(float);
}

/* floats of tensor t for N rows (a side room: side_floats of its tensor's); 0 when it
 * does not exist */
static size_t tensor_floats(const tensor_def *t, const dm_config *c, size_t N, size_t saved,
                            int side) {
    size_t H = c->n_head, HD = H * c->head_dim, per = 0;
    int kda = c->mixer == DM_MIXER_KDA;
    if (t->side && !side) return 0;
    switch (t->size) {
    case SZ_D: per = c->d_model; break;
    case SZ_1: per = 1; break;
    case SZ_HD: per = HD; break;
    case SZ_H: per = H; break;
    case SZ_R_KDA: per = kda ? (size_t)c->gate_rank : 0; break;
    case SZ_G: per = kda ? HD : H; break;
    case SZ_F: per = (size_t)dm_config_mlp_hidden(c); break;
    case SZ_V: { /* token vocabularies: one chunk of the fused head */
        int R = dm_plan_head_rows(c, N);
        if (R) return (size_t)R * (size_t)c->vocab;
        per = (size_t)c->vocab;
        break;
    }
    case SZ_SAVED: return saved;
    }
    size_t n = N * per;
    return t->side ? side_floats(n, side) : n;
}

/* the struct that holds unit u's pointers (NULL when counting) */
static char *unit_struct(dm_arena_ptrs *out, int u, int L) {
    if (!out) return NULL;
    return u == 2 * L ? (char *)&out->head : (char *)&out->act[u / 2];
}

/* The backend's bf16 operand scratch for the model's products on N rows: the largest pair
 * of operands a product reads (forward: in and W; data gradient: dout and W; weight
 * gradient: dout and in) and the largest dout, over every matmul of a layer and the head
 * (the fused head's chunk of rows) */
static size_t product_scratch(const dm_config *c, size_t N, const dm_ops *ops) {
    size_t D = c->d_model, H = c->n_head, HD = H * c->head_dim, R = c->gate_rank;
    size_t F = dm_config_mlp_hidden(c), V = c->vocab, rh = (size_t)dm_plan_head_rows(c, N);
    int kda = c->mixer == DM_MIXER_KDA;
    const size_t shape[][3] = { /* rows, K (in), O (out) */
        {N, D, HD}, {N, D, H}, {N, HD, D}, {N, D, F}, {N, F, D},
        {N, D, kda ? R : HD}, {N, kda ? R : 0, kda ? HD : 0}, {rh ? rh : N, D, V}};
    size_t pair = 0, dout = 0;
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        size_t n = shape[i][0], K = shape[i][1], O = shape[i][2];
        size_t p[3] = {n * K + O * K, n * O + O * K, n * O + n * K};
        for (int d = 0; d < 3; d++) pair = p[d] > pair ? p[d] : pair;
        dout = n * O > dout ? n * O : dout;
    }
    return dm_ops_product_scratch(ops, pair, dout);
}

size_t dm_plan_layout(const dm_config *c, const dm_plan *p, const dm_ops *ops, int B, int T,
                      dm_bf *base, dm_arena_ptrs *out, dm_arena_sizes *sz) {
    int L = c->n_layer, side = p->side, kda = c->mixer == DM_MIXER_KDA;
    size_t N = (size_t)B * T, D = c->d_model, H = c->n_head, HD = H * c->head_dim;
    size_t R = c->gate_rank, F = dm_config_mlp_hidden(c), G = kda ? HD : H;
    if (!base) out = NULL;
    if (out) {
        memset(out->act, 0, (size_t)L * sizeof *out->act);
        memset(&out->head, 0, sizeof out->head);
        memset(&out->s, 0, sizeof out->s);
    }
    bump b = {base, 0};
    dm_delta_dims dd = dm_core_dims(c, B, T);
    size_t saved, work = dm_ops_delta_work(ops, &dd, dm_ops_threads(ops), 0, &saved);

    /* the residual stream: every unit's input */
    for (int l = 0; l < L; l++) {
        dm_bf *xi = take(&b, N * D), *xm = take(&b, N * D);
        if (out) out->act[l].x_in = xi, out->act[l].x_mid = xm;
    }
    dm_bf *xf = take(&b, N * D);
    if (out) out->x_final = xf;

    /* kept tensors, unit by unit; the others at the same workspace offsets for all units
     * of a kind (offsets counted from 0 here, moved to the workspace below) */
    size_t ws_size[DM_UNIT_KINDS] = {0}, ws_off[NTENSORS];
    for (int k = 0; k < DM_UNIT_KINDS; k++) {
        bump w = {NULL, 0};
        for (int i = 0; i < NTENSORS; i++) {
            const tensor_def *t = &TENSORS[i];
            if (dm_step_defs[t->step].unit != k || p->keep[t->step]) continue;
            ws_off[i] = w.used;
            take(&w, tensor_floats(t, c, N, saved, side));
        }
        ws_size[k] = w.used;
    }
    for (int u = 0; u <= 2 * L; u++) {
        int k = dm_unit_kind(u, L);
        char *st = unit_struct(out, u, L);
        for (int i = 0; i < NTENSORS; i++) {
            const tensor_def *t = &TENSORS[i];
            if (dm_step_defs[t->step].unit != k || !p->keep[t->step]) continue;
            dm_bf *q = take(&b, tensor_floats(t, c, N, saved, side));
            if (st) *(void **)(st + t->field) = q;
        }
    }
    /* each kind's region of the workspace starts at 0, but the head's goes after the MLP's
     * when both fit in the largest: then the last MLP's activations survive the head's
     * forward, and its backward needs no recompute */
    size_t kept = b.used, ws = 0, lo[DM_UNIT_KINDS] = {0};
    for (int k = 0; k < DM_UNIT_KINDS; k++) ws = ws > ws_size[k] ? ws : ws_size[k];
    if (ws_size[DM_UNIT_MLP] + ws_size[DM_UNIT_HEAD] <= ws) lo[DM_UNIT_HEAD] = ws_size[DM_UNIT_MLP];
    for (int i = 0; i < NTENSORS; i++)
        if (!p->keep[TENSORS[i].step]) ws_off[i] += lo[dm_step_defs[TENSORS[i].step].unit];
    dm_bf *wbase = take(&b, ws);
    for (int u = 0; wbase && u <= 2 * L; u++) {
        int k = dm_unit_kind(u, L);
        char *st = unit_struct(out, u, L);
        for (int i = 0; i < NTENSORS; i++) {
            const tensor_def *t = &TENSORS[i];
            if (dm_step_defs[t->step].unit != k || p->keep[t->step]) continue;
            *(void **)(st + t->field) =
                tensor_floats(t, c, N, saved, side) ? wbase + ws_off[i] : NULL;
        }
    }

    /* backward scratch: dres, dxn (and the composed norms' scratch) for all; then the MLP's
     * gradients and the mixer's (with the delta core's work) over the same floats */
    size_t s0 = b.used;
    dm_scratch s = {0};
    s.dres = take(&b, N * D);
    s.dxn = take(&b, N * D);
    if (c->norm_impl == DM_IMPL_REFERENCE) s.norm_scratch = take(&b, 2 * N * (D > HD ? D : HD));
    /* the logits' gradient's room (none for the fused head), then dres's */
    size_t V = dm_plan_head_rows(c, N) ? 0 : (size_t)c->vocab;
    s.side_res = take(&b, side_floats(N * (D > V ? D : V), side));
    size_t arms = b.used;
    s.da = take(&b, N * F);
    s.db = take(&b, N * F);
    s.dh = take(&b, N * F);
    s.side_da = take(&b, side_floats(N * F, side));
    s.side_db = take(&b, side_floats(N * F, side));
    size_t mlp_end = b.used;
    b.used = arms;
    s.dq = take(&b, N * HD);
    s.dk = take(&b, N * HD);
    s.dv = take(&b, N * HD);
    s.dg = take(&b, N * G);
    s.dbeta = take(&b, N * H);
    s.do_ = take(&b, N * HD);
    s.dz = take(&b, N * HD);
    s.dop = take(&b, N * HD);
    s.dr = take(&b, kda ? N * R : 0);
    s.side_mix = take(&b, side_floats(N * HD, side));
    s.delta_work = take(&b, work);
    s.delta_work_n = work;
    if (b.used < mlp_end) b.used = mlp_end;
    if (out) out->s = s;
    if (sz) {
        sz->saved = kept;
        sz->recompute = ws;
        for (int k = 0; k < DM_UNIT_KINDS; k++)
            sz->ws_lo[k] = lo[k], sz->ws_hi[k] = lo[k] + ws_size[k];
        sz->scratch = b.used - s0;
        sz->verify = c->verify_fused > 0 ? dm_plan_verify_room(c, ops, B, T, NULL, NULL) : 0;
        sz->products = product_scratch(c, N, ops);
    }
    return b.used;
}

/* the tensor whose side room t is: the one named as t without its "_side" */
static const tensor_def *side_of(const tensor_def *t) {
    size_t n = strlen(t->name) - strlen("_side");
    for (int i = 0; i < NTENSORS; i++)
        if (strlen(TENSORS[i].name) == n && !strncmp(TENSORS[i].name, t->name, n))
            return &TENSORS[i];
    abort(); /* the table names every room after its tensor */
}

void dm_plan_give_rooms(const dm_config *c, const dm_layer_act *act, const dm_head_act *head,
                        const dm_scratch *s, int u, int bwd, size_t N, dm_ops *ops) {
    int L = c->n_layer, k = dm_unit_kind(u, L), kda = c->mixer == DM_MIXER_KDA;
    size_t D = c->d_model, HD = (size_t)c->n_head * c->head_dim, F = dm_config_mlp_hidden(c);
    dm_ops_side_clear(ops);
    if (!dm_ops_side_bytes(ops)) return;
    /* the activations': each side room is its tensor's ("xn1_side": xn1's) */
    const char *st = k == DM_UNIT_HEAD ? (const char *)head : (const char *)&act[u / 2];
    for (int i = 0; i < NTENSORS; i++) {
        const tensor_def *t = &TENSORS[i];
        if (!t->side || dm_step_defs[t->step].unit != k) continue;
        const tensor_def *x = side_of(t);
        dm_ops_side_room(ops, *(dm_bf *const *)(st + x->field), tensor_floats(x, c, N, 0, 0),
                         *(dm_bf *const *)(st + t->field));
    }
    /* the output gradients' the backward's products read; dres's where a product reads
     * it next (none into layer 0: the embedding reads it in f32) */
    if (k == DM_UNIT_MLP) {
        dm_ops_side_room(ops, s->da, N * F, s->side_da);
        dm_ops_side_room(ops, s->db, N * F, s->side_db);
    } else if (k == DM_UNIT_MIXER) {
        dm_ops_side_room(ops, s->dz, N * HD, s->side_mix); /* dz, then each conv's dx */
        dm_ops_side_room(ops, s->dz, N * (kda ? HD : (size_t)c->n_head), s->side_mix); /* df */
    }
    /* the logits' gradient (in the logits: their room in the backward only) */
    if (k == DM_UNIT_HEAD && bwd && !dm_plan_head_rows(c, N))
        dm_ops_side_room(ops, head->logits, N * (size_t)c->vocab, s->side_res);
    if (u > 0) dm_ops_side_room(ops, s->dres, N * D, s->side_res);
}

int dm_plan_head_rows(const dm_config *c, size_t N) {
    if (c->vocab <= DM_VOCAB) return 0;
    size_t R = ((size_t)1 << 21) / (size_t)c->vocab;
    if (R > 256) R = 256;
    if (R > N) R = N;
    return R ? (int)R : 1;
}

size_t dm_plan_verify_room(const dm_config *c, const dm_ops *ops, int B, int T,
                           size_t *norm_off, size_t *delta_off) {
    size_t N = (size_t)B * T, D = c->d_model, HD = (size_t)c->n_head * c->head_dim;
    dm_delta_dims dd = dm_core_dims(c, B, T);
    size_t saved, work = dm_ops_delta_work(ops, &dd, dm_ops_threads(ops), 1, &saved);
    bump b = {NULL, 0};
    if (norm_off) *norm_off = b.used;
    take(&b, 2 * N * (D > HD ? D : HD));
    if (delta_off) *delta_off = b.used;
    take(&b, work);
    return b.used;
}
