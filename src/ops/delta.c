/* delta.c — the delta-rule core as an op (arguments: delta.h), with the token-serial
 * reference (ref/delta_ref.c). docs/kda.md, docs/chunked.md. */
#include "ops/delta.h"

#include <stdio.h>
#include <stdlib.h>

#include "ops/op.h"
#include "ref/ref.h"

/* the reference's backward keeps every state of a (b, h) pair per thread: its threads are
 * as many as the op layer's scratch holds, at most the policy's */
static void ref_run(dm_ops *ops, void *args, int dir) {
    dm_delta_args *a = args;
    int nt = dm_ops_threads(ops);
    if (dir == DM_FWD) {
        dm_delta_ref_fwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o, a->hT, nt);
        return;
    }
    while (nt > 1 && dm_delta_ref_bwd_work(a->d, nt) > ops->scratch_n) nt--;
    if (dm_delta_ref_bwd_work(a->d, nt) > ops->scratch_n) {
        fprintf(stderr, "dormouse: op delta.bwd: the reference needs %zu floats of scratch, the "
                        "op layer has %zu\n", dm_delta_ref_bwd_work(a->d, nt), ops->scratch_n);
        fflush(stderr);
        abort();
    }
    dm_delta_ref_bwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->dO, a->dhT, a->dq, a->dk,
                     a->dv, a->dg, a->dbeta, a->dh0, ops->scratch, nt);
}

static int outputs(void *args, int dir, dm_out *o) {
    dm_delta_args *a = args;
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
    const dm_delta_dims *d = ((const dm_delta_args *)args)->d;
    return (dir == DM_FWD ? 1.0 : 3.0) * 7.0 * d->dk * d->dv * (double)d->B * d->T * d->H;
}

/* the dims (positive; dm_delta_forward checks them for its callers) and the buffers */
static const char *check(const void *args, int dir) {
    const dm_delta_args *a = args;
    const dm_delta_dims *d = a->d;
    if (!d) return "no dims";
    if (d->B < 1 || d->T < 1 || d->H < 1 || d->dk < 1 || d->dv < 1) return "a size below 1";
    if (!a->q || !a->k || !a->v || !a->g || !a->beta) return "a NULL input";
    if (dir == DM_FWD) return !a->o ? "a NULL buffer" : NULL;
    return !a->dO || !a->dq || !a->dk || !a->dv || !a->dg || !a->dbeta ? "a NULL buffer" : NULL;
}

/* q, k, v, g, beta (and h0); the backward dO (and dhT) too; the saved state not counted */
static double reads(const void *args, int dir) {
    const dm_delta_args *a = args;
    const dm_delta_dims *d = a->d;
    double nb = (double)d->B * d->T * d->H, nk = nb * d->dk, nv = nb * d->dv;
    double ns = (double)d->B * d->H * d->dk * d->dv, ng = d->scalar_gate ? nb : nk;
    double in = 2 * nk + nv + ng + nb + (a->h0 ? ns : 0);
    return 4.0 * (dir == DM_FWD ? in : in + nv + (a->dhT ? ns : 0));
}

static int asked(const void *args) { return ((const dm_delta_args *)args)->prec; }

static const dm_impl REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, ref_run, DM_MEM_HOST};
const dm_op_def dm_def_delta = {"delta", 1u << DM_FWD | 1u << DM_BWD, &REF,
                                sizeof(dm_delta_args), outputs, flops, check, reads, asked};

void dm_op_delta_fwd(dm_ops *o, const dm_delta_dims *d, const dm_bf *q, const dm_bf *k,
                     const dm_bf *v, const dm_bf *g, const dm_bf *beta, const dm_bf *h0,
                     dm_bf *out, dm_bf *hT, dm_bf *saved) {
    dm_delta_args a = {.d = d, .prec = o->precision, .q = DM_RAW(q), .k = DM_RAW(k),
                       .v = DM_RAW(v), .g = DM_RAW(g), .beta = DM_RAW(beta), .h0 = DM_RAW(h0),
                       .o = DM_RAW(out), .hT = DM_RAW(hT),
                       .saved = DM_RAW(saved)};
    dm_op_run(o, DM_OP_DELTA, DM_FWD, &a);
}

void dm_op_delta_bwd(dm_ops *o, const dm_delta_dims *d, const dm_bf *q, const dm_bf *k,
                     const dm_bf *v, const dm_bf *g, const dm_bf *beta, const dm_bf *h0,
                     const dm_bf *saved, const dm_bf *dO, const dm_bf *dhT, dm_bf *dq,
                     dm_bf *dk, dm_bf *dv, dm_bf *dg, dm_bf *dbeta, dm_bf *dh0) {
    dm_delta_args a = {.d = d, .prec = o->precision, .q = DM_RAW(q), .k = DM_RAW(k),
                       .v = DM_RAW(v), .g = DM_RAW(g), .beta = DM_RAW(beta), .h0 = DM_RAW(h0),
                       .saved_in = DM_RAW(saved),
                       .dO = DM_RAW(dO), .dhT = DM_RAW(dhT), .dq = DM_RAW(dq), .dk = DM_RAW(dk),
                       .dv = DM_RAW(dv), .dg = DM_RAW(dg), .dbeta = DM_RAW(dbeta),
                       .dh0 = DM_RAW(dh0)};
    dm_op_run(o, DM_OP_DELTA, DM_BWD, &a);
}
