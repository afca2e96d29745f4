/* delta.c — the cpu backend's delta-rule core (ops/delta.c defines the op): the chunked
 * kernel (kernels/delta_chunk.c) where it supports the call and kda_impl allows it, before
 * the op's token-serial reference; and the scratch the two paths need. docs/kda.md,
 * docs/chunked.md. */
#include "backends/cpu/kernels/delta_chunk.h"
#include "backends/cpu/cpu.h"
#include "ops/delta.h"
#include "ops/op.h"
#include "ref/ref.h"

static const char *chunked_selected(const dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    return ops->kda_impl == DM_IMPL_REFERENCE ? "kda_impl=reference" : NULL;
}

/* the chunked kernel's threads: the policy's, as many as the op layer's scratch holds */
static int chunked_threads(const dm_ops *ops, const dm_delta_dims *d, int dir) {
    int nt = dm_ops_threads(ops);
    size_t (*need)(const dm_delta_dims *, int, int) =
        dir == DM_FWD ? dm_delta_chunk_fwd_work : dm_delta_chunk_bwd_work;
    while (nt > 1 && need(d, ops->chunk, nt) > ops->scratch_n) nt--;
    return need(d, ops->chunk, nt) > ops->scratch_n ? 0 : nt;
}

static const char *chunked_supports(dm_ops *ops, const void *args, int dir) {
    const dm_delta_dims *d = ((const dm_delta_args *)args)->d;
    const char *why = NULL;
    if (!dm_delta_chunk_supports(d, ops->chunk, &why)) return why;
    return chunked_threads(ops, d, dir) ? NULL : "the op layer's scratch is too small";
}

int dm_ops_delta_chunked(const dm_ops *ops, const dm_delta_dims *d, const char **why) {
    dm_delta_args a = {.d = d};
    const char *w = chunked_selected(ops, &a, DM_FWD);
    if (!w) dm_delta_chunk_supports(d, ops->chunk, &w);
    if (why) *why = w;
    return w == NULL;
}

size_t dm_cpu_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
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
    dm_delta_args *a = args;
    int nt = chunked_threads(ops, a->d, dir);
    if (dir == DM_FWD)
        dm_delta_chunk_fwd(a->d, ops->chunk, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o,
                           a->hT, a->saved, ops->scratch, nt);
    else
        dm_delta_chunk_bwd(a->d, ops->chunk, a->q, a->k, a->v, a->g, a->beta, a->h0, a->saved_in,
                           a->dO, a->dhT, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0,
                           ops->scratch, nt);
}

static const dm_impl IMPL[] = {
    {"chunked", 0, DM_PREC_FP32, chunked_selected, chunked_supports, chunked_run, DM_MEM_HOST},
};
const dm_impl_list dm_cpu_delta = DM_IMPL_LIST(IMPL);
