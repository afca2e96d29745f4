/* delta.c — the delta-rule core as an op: the chunked kernel (backends/cpu/kernels/delta_chunk.c)
 * where it supports the call and kda_impl allows it, else the token-serial reference
 * (ref/delta_ref.c). docs/kda.md, docs/chunked.md. */
#include "backends/cpu/kernels/delta_chunk.h"
#include "ref/ref.h"
#include "ops/op.h"

typedef struct {
    const dm_delta_dims *d;
    const float *q, *k, *v, *g, *beta, *h0;
    float *o, *hT, *saved;    /* fwd (saved: the chunked path's state for the backward) */
    const float *saved_in;    /* bwd: the forward's saved state, or NULL */
    const float *dO, *dhT;    /* bwd */
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;
    float *work;
    int nthreads;
} delta_args;

static const char *chunked_selected(const dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    return ops->kda_impl == DM_IMPL_REFERENCE ? "kda_impl=reference" : NULL;
}

static const char *chunked_supports(dm_ops *ops, const void *args, int dir) {
    (void)dir;
    const char *why = NULL;
    dm_delta_chunk_supports(((const delta_args *)args)->d, ops->chunk, &why);
    return why;
}

int dm_ops_delta_chunked(const dm_ops *ops, const dm_delta_dims *d, const char **why) {
    delta_args a = {.d = d};
    const char *w = chunked_selected(ops, &a, DM_FWD);
    if (!w) dm_delta_chunk_supports(d, ops->chunk, &w);
    if (why) *why = w;
    return w == NULL;
}

size_t dm_ops_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
                         size_t *saved) {
    int chunked = dm_ops_delta_chunked(ops, d, NULL);
    size_t w = 0;
    *saved = 0;
    if (both || !chunked) w = dm_delta_ref_bwd_work(d, nthreads);
    if ((both || chunked) && dm_delta_chunk_supports(d, ops->chunk, NULL)) {
        size_t wf = dm_delta_chunk_fwd_work(d, ops->chunk, nthreads);
        size_t wb = dm_delta_chunk_bwd_work(d, ops->chunk, nthreads);
        w = w > wf ? w : wf;
        w = w > wb ? w : wb;
    }
    if (chunked) *saved = dm_delta_chunk_saved(d, ops->chunk);
    return w;
}

static void chunked_run(dm_ops *ops, void *args, int dir) {
    delta_args *a = args;
    if (dir == DM_FWD)
        dm_delta_chunk_fwd(a->d, ops->chunk, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o,
                           a->hT, a->saved, a->work, a->nthreads);
    else
        dm_delta_chunk_bwd(a->d, ops->chunk, a->q, a->k, a->v, a->g, a->beta, a->h0, a->saved_in,
                           a->dO, a->dhT, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0, a->work,
                           a->nthreads);
}

static void ref_run(dm_ops *ops, void *args, int dir) {
    (void)ops;
    delta_args *a = args;
    if (dir == DM_FWD)
        dm_delta_ref_fwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o, a->hT, a->nthreads);
    else
        dm_delta_ref_bwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->dO, a->dhT, a->dq,
                         a->dk, a->dv, a->dg, a->dbeta, a->dh0, a->work, a->nthreads);
}

static int outputs(void *args, int dir, dm_out *o) {
    delta_args *a = args;
    const dm_delta_dims *d = a->d;
    size_t nb = (size_t)d->B * d->T * d->H, nk = nb * d->dk, nv = nb * d->dv;
    size_t ns = (size_t)d->B * d->H * d->dk * d->dv, ng = d->scalar_gate ? nb : nk;
    int n = 0;
    if (dir == DM_FWD) {
        o[n++] = (dm_out){"o", (void **)&a->o, nv, DM_OUT_SET};
        if (a->hT) o[n++] = (dm_out){"hT", (void **)&a->hT, ns, DM_OUT_SET};
        if (a->saved) o[n++] = (dm_out){"saved", (void **)&a->saved, 0, DM_OUT_PRIVATE};
        return n;
    }
    o[n++] = (dm_out){"dq", (void **)&a->dq, nk, DM_OUT_SET};
    o[n++] = (dm_out){"dk", (void **)&a->dk, nk, DM_OUT_SET};
    o[n++] = (dm_out){"dv", (void **)&a->dv, nv, DM_OUT_SET};
    o[n++] = (dm_out){"dg", (void **)&a->dg, ng, DM_OUT_SET};
    o[n++] = (dm_out){"dbeta", (void **)&a->dbeta, nb, DM_OUT_SET};
    if (a->dh0) o[n++] = (dm_out){"dh0", (void **)&a->dh0, ns, DM_OUT_SET};
    return n;
}

/* per token and head: decay, S'^T k, rank-1 update, S^T q: about 7 dk dv; the backward
 * about three times that */
static double flops(const void *args, int dir) {
    const dm_delta_dims *d = ((const delta_args *)args)->d;
    return (dir == DM_FWD ? 1.0 : 3.0) * 7.0 * d->dk * d->dv * (double)d->B * d->T * d->H;
}

static const dm_impl IMPL[] = {
    {"chunked", 0, DM_PREC_FP32, chunked_selected, chunked_supports, chunked_run, DM_MEM_HOST},
    {"reference", 1, DM_PREC_FP32, NULL, NULL, ref_run, DM_MEM_HOST},
};
const dm_op_def dm_def_delta = {"delta", 1u << DM_FWD | 1u << DM_BWD, IMPL, 2,
                                sizeof(delta_args), outputs, flops};

void dm_op_delta_fwd(dm_ops *o, const dm_delta_dims *d, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     float *out, float *hT, float *saved, float *work, int nthreads) {
    delta_args a = {.d = d, .q = q, .k = k, .v = v, .g = g, .beta = beta, .h0 = h0, .o = out,
                    .hT = hT, .saved = saved, .work = work, .nthreads = nthreads};
    dm_op_run(o, DM_OP_DELTA, DM_FWD, &a);
}

void dm_op_delta_bwd(dm_ops *o, const dm_delta_dims *d, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     const float *saved, const float *dO, const float *dhT, float *dq,
                     float *dk, float *dv, float *dg, float *dbeta, float *dh0, float *work,
                     int nthreads) {
    delta_args a = {.d = d, .q = q, .k = k, .v = v, .g = g, .beta = beta, .h0 = h0,
                    .saved_in = saved, .dO = dO, .dhT = dhT, .dq = dq, .dk = dk, .dv = dv,
                    .dg = dg, .dbeta = dbeta, .dh0 = dh0, .work = work, .nthreads = nthreads};
    dm_op_run(o, DM_OP_DELTA, DM_BWD, &a);
}
