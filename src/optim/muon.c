/* muon.c — Muon for the hidden matrices (docs/muon.md sections 2, 6-8), sharded over the
 * ranks of a run (docs/scaling.md):
 *   m <- beta m + (1 - beta) g;   u = (1 - beta) g + beta m          (Nesterov)
 *   O = NS(u), per unit (a head slice of W_q / W_k under ns_headwise=qk, else a matrix)
 *   muon_norm=neuron (NorMuon): v <- b2 v + (1 - b2) mean_c O^2 per row of the unit,
 *   O <- O / (sqrt(v) + eps) rescaled to O's Frobenius norm before
 *   W <- (1 - lr wd) W - lr sqrt(max(1, rows/cols)) O                 ([out, in] layout)
 *   (cautious_wd: the decay only where O and W agree in sign)
 *   then, on steps where step % retract_every == 0, retraction per unit:
 *   sphere W <- R W/||W||_F, or stiefel W <- s polar(W), with R, s fixed at init.
 *
 * Units and ranks. Every rank keeps the whole momentum (it is elementwise and cheap, and a
 * checkpoint then needs nothing gathered) and updates it; Newton-Schulz, NorMuon's
 * moments, the update of W and the retraction of a unit run on the rank that owns it, and
 * the updated units (with their moments) are then all-gathered. The rule: units sorted by NS FLOPs (largest first, ties by their
 * order in the parameter table), each to the rank with the least FLOPs so far (ties: the
 * lowest rank). A unit's result does not depend on which rank runs it or beside which
 * others: small matrices and head slices always take NS's stack path (single-threaded
 * GEMMs; ns.h: bitwise the same in any batch), so a rank batches its share of them by
 * shape into one parallel call; a big whole matrix runs alone with its GEMMs tiled over
 * the threads, exactly as in one process.
 *
 * What this file computes runs through the op layer (ops/optim_ops.h: momentum, ns or
 * ns_bf16, muon_update, retract); it decides the units, their order and their owners. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/muon.h"

static void slice_shape(const dm_tensor *t, const dm_group *g, int *rows, int *cols) {
    *rows = t->shape[0] / g->slices;
    *cols = t->shape[1];
}

/* tensor i when Muon updates it (its group in *g, its slices' shape in *r, *c), else NULL */
static const dm_tensor *muon_tensor(const dm_muon *o, dm_model *m, int i, const dm_group **g,
                                    int *r, int *c) {
    *g = &o->groups[i];
    if ((*g)->kind != DM_GROUP_MUON) return NULL;
    const dm_tensor *t = dm_model_tensor(m, i);
    slice_shape(t, *g, r, c);
    return t;
}

/* NS in bf16 when the model's precision record says so (ops/precision.h: decided at its
 * creation from ns_precision, the CPU and oneDNN): o->ns_bf16 = 1 and the op layer's
 * oneDNN context made (0), or 1 with the error when oneDNN, which the record found able,
 * cannot make one now */
static int ns_bf16(dm_muon *o, dm_model *m, char *err, size_t errlen) {
    if (!dm_model_precision(m)->ns_bf16) return 0;
    const char *why = dm_ops_ns_bf16_context(dm_optim_ops(m));
    o->ns_bf16 = !why;
    if (!why) return 0;
    snprintf(err, errlen, "ns_precision: oneDNN cannot make a context (%s)", why);
    return 1;
}

/* Per-iteration NS FLOPs (4 m^2 k + 2 m^3) below which a whole matrix with a twin of its
 * shape takes the stack path: d2's [768, 256] (2.3e8) does; the ~100M config's [2048, 768]
 * (5.7e9) and [768, 768] (2.7e9) tile. */
#define MUON_TWIN_MAX_FLOPS 1e9

/* The units of every Muon tensor, in order. */
static int make_units(dm_muon *o, dm_model *m) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        o->nv_n = 0;
        for (int i = 0; i < o->n_tensors; i++) {
            const dm_group *g;
            int r, c;
            const dm_tensor *t = muon_tensor(o, m, i, &g, &r, &c);
            if (!t) continue;
            for (int s = 0; s < g->slices; s++, n++) {
                if (!pass) continue;
                dm_muon_unit *u = &o->units[n];
                u->tensor = i;
                u->slice = g->slices > 1 ? s : -1;
                u->rows = r;
                u->cols = c;
                u->len = (size_t)r * c;
                u->off = t->offset + (size_t)s * u->len;
                u->voff = o->nv_n;
                o->nv_n += (size_t)r;
                u->cost = dm_op_ns_flops(1, r, c, o->cfg->ns);
            }
        }
        /* A head slice runs in its tensor's stack, and so does a whole matrix that is small,
         * or mid-sized (below MUON_TWIN_MAX_FLOPS) with a twin of its shape (d2's four
         * [256,256], four [768,256], two [256,768]): the stack runs them side by side on
         * single-threaded GEMMs, no fork-join per product, no small tiles (measured
         * faster: docs/kernels.md). A big matrix tiles its GEMMs over the threads: many
         * threads share it, and the update buffer holds one at a time, not all of its
         * shape. The model's shapes decide, never the thread count or the rank. */
        for (int a = 0; pass && a < n; a++) {
            dm_muon_unit *u = &o->units[a];
            int twins = 0;
            for (int b = 0; b < n; b++)
                twins += b != a && o->units[b].rows == u->rows && o->units[b].cols == u->cols;
            double it = dm_op_ns_flops(1, u->rows, u->cols, o->cfg->ns) /
                        dm_op_ns_steps(o->cfg->ns);
            u->stacked = u->slice >= 0 || !dm_op_ns_threaded(dm_optim_ops(m), u->rows, u->cols) ||
                         (twins > 0 && it < MUON_TWIN_MAX_FLOPS);
        }
        if (!pass) {
            o->units = calloc((size_t)(n ? n : 1), sizeof *o->units);
            o->consts = dm_backend_alloc(o->be, (size_t)(n ? n : 1) * sizeof *o->consts);
            if (!o->units || !o->consts) return 1;
        }
    }
    o->n_units = n;
    return 0;
}

/* Scratch for the largest batch one rank may run: all stacked units of one shape. */
static size_t work_floats(const dm_muon *o, dm_ops *ops) {
    size_t work = 0;
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        int k = 1;
        if (u->stacked)
            for (int b = 0; b < o->n_units; b++)
                k += b != a && o->units[b].stacked && o->units[b].rows == u->rows &&
                     o->units[b].cols == u->cols;
        size_t w = dm_op_ns_work(ops, k, u->rows, u->cols, o->ns_bf16);
        size_t ws = dm_op_retract_work(ops, k, u->rows, u->cols);
        if (w > work) work = w;
        if (ws > work) work = ws;
        if (o->cfg->muon_norm == DM_MUON_NORM_NEURON && 2 * (size_t)u->rows > work)
            work = 2 * (size_t)u->rows; /* normuon's rows doubles */
    }
    return work;
}

/* 1 when NorMuon normalizes the updates (muon_norm=neuron) */
static int c_norm(const dm_muon *o) { return o->cfg->muon_norm == DM_MUON_NORM_NEURON; }

static int muon_init(dm_muon *o, dm_model *m, char *err, size_t errlen) {
    size_t work = 0;
    if (ns_bf16(o, m, err, errlen)) return 1;
    o->slice_off = calloc((size_t)o->n_tensors, sizeof *o->slice_off);
    if (!o->slice_off || make_units(o, m)) goto oom;
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_group *g;
        int r, c;
        if (!muon_tensor(o, m, i, &g, &r, &c)) continue;
        o->slice_off[i] = o->n_slices;
        o->n_slices += g->slices;
    }
    work = work_floats(o, dm_optim_ops(m));
    o->mom = dm_backend_alloc(o->be, o->n * sizeof(float));
    o->ns_work = dm_backend_alloc(o->be, work * sizeof(float));
    o->ns_work_n = work;
    /* the retraction constants, one pair per slice, in the backend's memory like the rest
     * of the state (a batch's scales are gathered into consts by backend copies) */
    size_t cbytes = (size_t)(o->n_slices ? o->n_slices : 1) * sizeof(float);
    o->radius = dm_backend_alloc(o->be, cbytes);
    o->scale = dm_backend_alloc(o->be, cbytes);
    if (!o->mom || !o->ns_work || !o->radius || !o->scale) goto oom;
    if (c_norm(o)) { /* NorMuon's moments start at zero */
        if (!(o->nv = dm_backend_alloc(o->be, (o->nv_n ? o->nv_n : 1) * sizeof(float)))) goto oom;
        dm_backend_zero(o->be, o->nv, (o->nv_n ? o->nv_n : 1) * sizeof(float));
    }
    /* retraction constants from the weights as they are now (init; a resumed run then
     * loads the saved ones over these): computed on the host from the weights read
     * through a host view or copy, then copied in */
    size_t pbytes = dm_model_num_params(m) * sizeof(float);
    float *P = dm_backend_map(o->be, dm_model_param_mem(m), pbytes, 1);
    float *R = calloc(1, cbytes), *S = calloc(1, cbytes);
    if (!P || !R || !S) {
        if (P) dm_backend_unmap(o->be, dm_model_param_mem(m), P, pbytes, 0);
        free(R);
        free(S);
        goto oom;
    }
    for (int i = 0; i < o->n_tensors; i++) {
        const dm_group *g;
        int r, c;
        const dm_tensor *t = muon_tensor(o, m, i, &g, &r, &c);
        if (!t) continue;
        dm_op_retract_init(dm_optim_ops(m), R + o->slice_off[i], S + o->slice_off[i],
                           P + t->offset, g->slices,
                           r, c);
    }
    dm_backend_unmap(o->be, dm_model_param_mem(m), P, pbytes, 0);
    dm_backend_from_host(o->be, o->radius, R, cbytes);
    dm_backend_from_host(o->be, o->scale, S, cbytes);
    free(R);
    free(S);
    return dm_muon_shard(o, NULL, err, errlen);
oom:
    snprintf(err, errlen, "out of memory: Muon's momentum and scratch need %.1f MiB",
             ((double)o->n + work) * sizeof(float) / (double)(1 << 20));
    return 1;
}

dm_muon *dm_muon_create(const dm_config *cfg, const dm_group *groups, dm_model *m, char *err,
                        size_t errlen) {
    dm_muon *o = calloc(1, sizeof *o);
    if (!o) {
        snprintf(err, errlen, "out of memory: Muon's state");
        return NULL;
    }
    o->cfg = cfg;
    o->groups = groups;
    o->be = dm_model_backend(m);
    o->n = dm_model_num_params(m);
    o->n_tensors = dm_model_num_tensors(m);
    if (muon_init(o, m, err, errlen)) {
        dm_muon_free(o);
        return NULL;
    }
    size_t nh = (size_t)DM_MUON_HYPER * (o->n_units ? o->n_units : 1);
    o->hyper = dm_backend_alloc(o->be, nh * sizeof(float));
    o->hyper_h = calloc(nh, sizeof(float));
    if (!o->hyper || !o->hyper_h) {
        snprintf(err, errlen, "out of memory: Muon's state");
        dm_muon_free(o);
        return NULL;
    }
    return o;
}

void dm_muon_free(dm_muon *o) {
    if (!o) return;
    dm_backend_release(o->be, o->mom);
    dm_backend_release(o->be, o->upd);
    dm_backend_release(o->be, o->ns_work);
    free(o->slice_off);
    dm_backend_release(o->be, o->radius);
    dm_backend_release(o->be, o->scale);
    dm_backend_release(o->be, o->nv);
    free(o->units);
    dm_backend_release(o->be, o->consts);
    free(o->pack_off);
    free(o->pack_cur);
    dm_backend_release(o->be, o->pack);
    dm_backend_release(o->be, o->hyper);
    free(o->hyper_h);
    free(o);
}

int dm_muon_shard(dm_muon *o, dm_comm *comm, char *err, size_t errlen) {
    int N = dm_comm_size(comm), nu = o->n_units;
    o->comm = comm;
    o->rank = dm_comm_rank(comm);
    o->nranks = N;
    free(o->pack_off);
    free(o->pack_cur);
    dm_backend_release(o->be, o->pack);
    o->pack = NULL;
    o->pack_off = calloc((size_t)N + 1, sizeof *o->pack_off);
    o->pack_cur = calloc((size_t)N, sizeof *o->pack_cur);
    double *load = calloc((size_t)N, sizeof *load);
    int *order = malloc(sizeof(int) * (size_t)(nu ? nu : 1));
    if (!o->pack_off || !o->pack_cur || !load || !order) goto oom;
    /* the fixed rule: largest first (ties in table order), to the least-loaded rank */
    for (int a = 0; a < nu; a++) order[a] = a;
    for (int a = 1; a < nu; a++) {
        int x = order[a], b = a;
        for (; b > 0 && o->units[order[b - 1]].cost < o->units[x].cost; b--)
            order[b] = order[b - 1];
        order[b] = x;
    }
    for (int a = 0; a < nu; a++) {
        int best = 0;
        for (int r = 1; r < N; r++)
            if (load[r] < load[best]) best = r;
        o->units[order[a]].owner = best;
        load[best] += o->units[order[a]].cost;
    }
    for (int a = 0; a < nu; a++)
        o->pack_off[o->units[a].owner + 1] += o->units[a].len +
                                              (c_norm(o) ? (size_t)o->units[a].rows : 0);
    for (int r = 0; r < N; r++) o->pack_off[r + 1] += o->pack_off[r];
    /* upd: this rank's stacked units side by side, each batch of one shape contiguous in
     * the order next_batch takes them (a batch is orthogonalized together as one stack),
     * then one slot its lone units take in turn */
    size_t at = 0, alone = 0;
    for (int a = 0; a < nu; a++) {
        dm_muon_unit *u = &o->units[a];
        if (u->owner == o->rank && !u->stacked && u->len > alone) alone = u->len;
        if (u->owner != o->rank || !u->stacked) continue;
        int first = 1; /* the first of its shape: place its whole batch here */
        for (int b = 0; b < a && first; b++)
            first = !(o->units[b].owner == o->rank && o->units[b].stacked &&
                      o->units[b].rows == u->rows && o->units[b].cols == u->cols);
        for (int b = a; first && b < nu; b++) {
            dm_muon_unit *v = &o->units[b];
            if (v->owner == o->rank && v->stacked && v->rows == u->rows && v->cols == u->cols)
                v->uoff = at, at += v->len;
        }
    }
    dm_backend_release(o->be, o->upd);
    o->upd_alone = at;
    o->upd_n = at + alone ? at + alone : 1;
    if (!(o->upd = dm_backend_alloc(o->be, o->upd_n * sizeof(float)))) goto oom;
    if (N > 1 && !(o->pack = dm_backend_alloc(o->be, (o->pack_off[N] ? o->pack_off[N] : 1) *
                                                         sizeof(float))))
        goto oom;
    free(load);
    free(order);
    return 0;
oom:
    free(load);
    free(order);
    snprintf(err, errlen, "out of memory: sharding Muon over %d ranks", N);
    return 1;
}

void dm_muon_memory(const dm_muon *o, size_t *scratch, size_t *gather) {
    *scratch = (o->upd ? o->upd_n : 0) * sizeof(float) + o->ns_work_n * sizeof(float);
    *gather = o->pack ? (o->pack_off[o->nranks] ? o->pack_off[o->nranks] : 1) * sizeof(float) : 0;
}

void dm_muon_shard_text(const dm_muon *o, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "muon: %d units on %d rank%s:", o->n_units,
                                   o->nranks, o->nranks == 1 ? "" : "s");
    for (int r = 0; r < o->nranks && used < n; r++) {
        int k = 0;
        double f = 0;
        for (int a = 0; a < o->n_units; a++)
            if (o->units[a].owner == r) k++, f += o->units[a].cost;
        used += (size_t)snprintf(buf + used, n - used, "%s rank %d %d units %.3f GFLOP NS",
                                 r ? "," : "", r, k, 1e-9 * f);
    }
}

/* The next batch of this rank's stacked units not yet done, from *a on: those of unit
 * *a's shape (contiguous in upd from unit *a's uoff), with `scales` their Stiefel scales
 * copied into o->consts.
 * Marks them done; returns how many (0: none left). */
static int next_batch(dm_muon *o, int *a, char *done, int scales) {
    for (; *a < o->n_units; ++*a)
        if (!done[*a] && o->units[*a].stacked && o->units[*a].owner == o->rank) break;
    if (*a == o->n_units) return 0;
    const dm_muon_unit *u = &o->units[*a];
    int k = 0;
    for (int b = *a; b < o->n_units; b++) {
        const dm_muon_unit *v = &o->units[b];
        if (done[b] || !v->stacked || v->owner != o->rank || v->rows != u->rows ||
            v->cols != u->cols)
            continue;
        done[b] = 1;
        if (scales)
            dm_backend_copy(o->be, o->consts + k,
                            o->scale + o->slice_off[v->tensor] + (v->slice < 0 ? 0 : v->slice),
                            sizeof(float));
        k++;
    }
    return k;
}

/* Newton-Schulz of a lone unit's update x (its GEMMs tiled over the threads) */
static void orthogonalize_alone(dm_muon *o, dm_ops *ops, const dm_muon_unit *u, dm_bf *x) {
    dm_op_ns(ops, x, 1, u->rows, u->cols, o->cfg->ns, o->ns_work, o->ns_bf16, 0);
}

/* Newton-Schulz of this rank's stacked units, in place in upd, batched by shape */
static void orthogonalize_stacked(dm_muon *o, dm_ops *ops, char *done) {
    int a = 0, k;
    memset(done, 0, (size_t)o->n_units);
    while ((k = next_batch(o, &a, done, 0))) {
        const dm_muon_unit *u = &o->units[a];
        dm_op_ns(ops, o->upd + u->uoff, k, u->rows, u->cols, o->cfg->ns, o->ns_work, o->ns_bf16,
                 1);
    }
}

/* NorMuon on unit u's orthogonalized update x (muon_norm=neuron), its moments at voff;
 * the NS scratch, free again, holds the kernel's row sums */
static void normalize(dm_muon *o, dm_ops *ops, const dm_muon_unit *u, dm_bf *x) {
    if (c_norm(o))
        dm_op_normuon(ops, x, o->nv + u->voff, 1, u->rows, u->cols, o->cfg->normuon_beta2,
                      DM_NORMUON_EPS, o->ns_work);
}

/* W <- (1 - lr wd) W - lr sqrt(max(1, rows/cols)) O for unit u, O its orthogonalized update
 * (cautious_wd: the decay where O and W agree in sign) */
void dm_muon_prepare(dm_muon *o, float f) {
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        const dm_group *g = &o->groups[u->tensor];
        float lr = g->lr * f, *h = o->hyper_h + (size_t)DM_MUON_HYPER * a;
        h[0] = 1.0f - lr * g->wd;
        h[1] = lr * sqrtf(fmaxf(1.0f, (float)u->rows / (float)u->cols));
    }
    if (o->n_units)
        dm_backend_put(o->be, o->hyper, o->hyper_h,
                       (size_t)DM_MUON_HYPER * o->n_units * sizeof(float));
}

static void update_w(dm_muon *o, dm_ops *ops, const dm_muon_unit *u, dm_bf *W, const dm_bf *x) {
    const dm_bf *ds = o->hyper + (size_t)DM_MUON_HYPER * (size_t)(u - o->units);
    dm_op_muon_update(ops, W + u->off, x, u->len, ds, o->cfg->cautious_wd);
}

/* The retraction of a lone unit (stiefel: its GEMMs tiled over the threads), or sphere of
 * any unit */
static void retract_one(dm_muon *o, dm_ops *ops, const dm_muon_unit *u, dm_bf *W) {
    const dm_bf *R = o->radius + o->slice_off[u->tensor] + (u->slice < 0 ? 0 : u->slice);
    const dm_bf *S = o->scale + o->slice_off[u->tensor] + (u->slice < 0 ? 0 : u->slice);
    if (o->cfg->retract == DM_RETRACT_SPHERE)
        dm_op_retract_sphere(ops, W + u->off, R, 1, u->rows, u->cols);
    else dm_op_retract_stiefel(ops, W + u->off, S, 1, u->rows, u->cols, o->ns_work, 0);
}

/* Stiefel retraction of this rank's stacked units, batched by shape: each batch's weights
 * staged in upd (free once the updates are applied) as one contiguous stack, retracted
 * there, and copied back */
static void retract_stacked(dm_muon *o, dm_ops *ops, dm_bf *W, char *done) {
    int a = 0, k;
    memset(done, 0, (size_t)o->n_units);
    while ((k = next_batch(o, &a, done, 1))) {
        const dm_muon_unit *u = &o->units[a];
        dm_bf *stage = o->upd + u->uoff;
        for (int pass = 0; pass < 2; pass++) {
            for (int b = a, i = 0; i < k; b++) {
                const dm_muon_unit *v = &o->units[b];
                if (v->owner != o->rank || !v->stacked || v->rows != u->rows || v->cols != u->cols)
                    continue;
                size_t bytes = v->len * sizeof(float);
                if (pass) dm_backend_copy(o->be, W + v->off, stage + (size_t)i * v->len, bytes);
                else dm_backend_copy(o->be, stage + (size_t)i * v->len, W + v->off, bytes);
                i++;
            }
            if (!pass)
                dm_op_retract_stiefel(ops, stage, o->consts, k, u->rows, u->cols, o->ns_work, 1);
        }
    }
}

/* Every rank's updated units to every rank (N > 1): packed rank by rank, in unit order */
static int gather_units(dm_muon *o, dm_bf *W) {
    size_t *at = o->pack_cur;
    for (int r = 0; r < o->nranks; r++) at[r] = o->pack_off[r];
    size_t vr = c_norm(o); /* each unit's moments after its weights */
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        if (u->owner != o->rank) continue;
        dm_backend_copy(o->be, o->pack + at[o->rank], W + u->off, u->len * sizeof(float));
        at[o->rank] += u->len;
        if (vr) dm_backend_copy(o->be, o->pack + at[o->rank], o->nv + u->voff,
                                (size_t)u->rows * sizeof(float));
        at[o->rank] += vr * (size_t)u->rows;
    }
    /* the exchange through host memory (the pack mapped: a view on the CPU) */
    size_t pb = o->pack_off[o->nranks] * sizeof(float);
    float *hp = dm_backend_map(o->be, o->pack, pb, 1);
    int rc = !hp || dm_comm_allgather(o->comm, hp, o->pack_off, sizeof(float));
    dm_backend_unmap(o->be, o->pack, hp, pb, !rc);
    if (rc) return 1;
    for (int r = 0; r < o->nranks; r++) at[r] = o->pack_off[r];
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        if (u->owner != o->rank) {
            dm_backend_copy(o->be, W + u->off, o->pack + at[u->owner], u->len * sizeof(float));
            if (vr) dm_backend_copy(o->be, o->nv + u->voff, o->pack + at[u->owner] + u->len,
                                    (size_t)u->rows * sizeof(float));
        }
        at[u->owner] += u->len + vr * (size_t)u->rows;
    }
    return 0;
}

int dm_muon_step(dm_muon *o, dm_model *m, const dm_bf *gscale, long step) {
    const dm_config *c = o->cfg;
    dm_bf *W = dm_model_param_mem(m);
    const dm_bf *G = dm_model_grad_mem(m);
    float beta = c->muon_momentum;
    dm_ops *ops = dm_optim_ops(m);
    int retract = c->retract != DM_RETRACT_OFF && step % c->retract_every == 0;
    char done_small[256], *done = o->n_units <= 256 ? done_small : malloc((size_t)o->n_units);
    if (!done) return 1;
    /* the momentum of every unit; the Nesterov update of this rank's stacked ones */
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        int mine = u->owner == o->rank;
        if (mine && !u->stacked) continue; /* below, one at a time */
        dm_op_momentum(ops, o->mom + u->off, mine ? o->upd + u->uoff : NULL, G + u->off, u->len,
                       beta, gscale);
    }
    /* the stacked units: orthogonalized together, then normalized, updated and retracted */
    orthogonalize_stacked(o, ops, done);
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        if (u->owner != o->rank || !u->stacked) continue;
        normalize(o, ops, u, o->upd + u->uoff);
        update_w(o, ops, u, W, o->upd + u->uoff);
        if (retract && c->retract == DM_RETRACT_SPHERE) retract_one(o, ops, u, W);
    }
    if (retract && c->retract == DM_RETRACT_STIEFEL) retract_stacked(o, ops, W, done);
    /* the lone units, each in the one slot */
    dm_bf *x = o->upd + o->upd_alone;
    for (int a = 0; a < o->n_units; a++) {
        const dm_muon_unit *u = &o->units[a];
        if (u->owner != o->rank || u->stacked) continue;
        dm_op_momentum(ops, o->mom + u->off, x, G + u->off, u->len, beta, gscale);
        orthogonalize_alone(o, ops, u, x);
        normalize(o, ops, u, x);
        update_w(o, ops, u, W, x);
        if (retract) retract_one(o, ops, u, W);
    }
    int rc = 0;
    if (o->nranks > 1) DM_TIMED(o->atlas, "muon all-gather", 0, rc = gather_units(o, W));
    if (done != done_small) free(done);
    return rc;
}

int dm_muon_state(const dm_muon *o, dm_optim_buf *out, int max) {
    if (max < 3 + !!o->nv) return 0;
    out[0] = (dm_optim_buf){"muon_momentum", o->mom, o->n, 0};
    out[1] = (dm_optim_buf){"retract_radius", o->radius, (size_t)o->n_slices, 0};
    out[2] = (dm_optim_buf){"retract_scale", o->scale, (size_t)o->n_slices, 0};
    if (!o->nv) return 3;
    /* optional: a checkpoint of a run without NorMuon resumes with the moments at zero */
    out[3] = (dm_optim_buf){"normuon_v", o->nv, o->nv_n, 1};
    return 4;
}
