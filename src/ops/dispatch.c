/* dispatch.c — the dispatch guard (see dispatch.h). */
#include "ops/dispatch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/delta_chunk.h"
#include "kernels/ref/ref.h"
#include "kernels/cpu/kernels.h"

static const char *OPNAME[DM_OPK_COUNT] = {"delta", "rmsnorm", "gatednorm"};

void dm_dispatch_init(dm_dispatch *dp, const dm_config *c) {
    memset(dp, 0, sizeof *dp);
    dp->kda_impl = c->kda_impl;
    dp->norm_impl = c->norm_impl;
    dp->chunk = c->chunk_size;
}

void dm_dispatch_free(dm_dispatch *dp) {
    free(dp->vbuf);
    dp->vbuf = NULL;
    dp->vcap = 0;
}

static void count(dm_dispatch *dp, int op, int bwd, const char *declined) {
    dp->total[op][bwd]++;
    if (!declined) {
        dp->fused[op][bwd]++;
        return;
    }
    for (int i = 0; i < dp->n_declined; i++) {
        dm_declined *d = &dp->declined[i];
        if (d->op == op && d->bwd == bwd && strcmp(d->reason, declined) == 0) {
            d->n++;
            return;
        }
    }
    if (dp->n_declined < 16) dp->declined[dp->n_declined++] = (dm_declined){op, bwd, declined, 1};
}

void dm_dispatch_report(const dm_dispatch *dp, char *buf, size_t n) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, n - at, "fused");
    for (int op = 0; op < DM_OPK_COUNT && at < n; op++)
        at += (size_t)snprintf(buf + at, n - at, " %s=%ld/%ld %s_bwd=%ld/%ld", OPNAME[op],
                               dp->fused[op][0], dp->total[op][0], OPNAME[op], dp->fused[op][1],
                               dp->total[op][1]);
    long nd = 0;
    for (int i = 0; i < dp->n_declined; i++) nd += dp->declined[i].n;
    if (at < n) at += (size_t)snprintf(buf + at, n - at, " declined=%ld", nd);
    for (int i = 0; i < dp->n_declined && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s%s: %ld (%s)", i ? "; " : " [",
                               OPNAME[dp->declined[i].op], dp->declined[i].bwd ? "_bwd" : "",
                               dp->declined[i].n, dp->declined[i].reason);
    if (dp->n_declined && at < n) snprintf(buf + at, n - at, "]");
}

/* verify scratch: n floats, grown on demand and kept (verify steps only) */
static float *vscratch(dm_dispatch *dp, size_t n) {
    if (n > dp->vcap) {
        float *p = realloc(dp->vbuf, n * sizeof(float));
        if (!p) return NULL;
        dp->vbuf = p;
        dp->vcap = n;
    }
    return dp->vbuf;
}

/* relative RMS difference of a (fused) against r (reference), recorded under `what` */
static void record(dm_dispatch *dp, const char *what, const float *a, const float *r, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - r[i];
        num += e * e;
        den += (double)r[i] * r[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num / (double)(n ? n : 1));
    if (isnan(rel)) rel = INFINITY;
    if (rel > dp->verify_max || dp->verify_what[0] == 0) {
        if (rel > dp->verify_max) dp->verify_max = rel;
        snprintf(dp->verify_what, sizeof dp->verify_what, "%s", what);
    }
}

/* ---- delta ---- */

int dm_dispatch_delta_fused(const dm_dispatch *dp, const dm_delta_dims *d, const char **why) {
    const char *w = NULL;
    if (dp->kda_impl == DM_IMPL_REFERENCE) w = "kda_impl=reference";
    else dm_delta_chunk_supports(d, dp->chunk, &w);
    if (why) *why = w;
    return w == NULL;
}

static double delta_flops(const dm_delta_dims *d, int bwd) {
    /* per token and head: decay, S'^T k, rank-1 update, S^T q: about 7 dk dv; the
     * backward about three times that */
    return (bwd ? 3.0 : 1.0) * 7.0 * d->dk * d->dv * (double)d->B * d->T * d->H;
}

void dm_op_delta_fwd(dm_dispatch *dp, const dm_delta_dims *d, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     float *o, float *hT, float *saved, float *work, int nthreads) {
    const char *why;
    int fused = dm_dispatch_delta_fused(dp, d, &why);
    count(dp, DM_OPK_DELTA, 0, why);
    if (fused)
        DM_TIMED(dp->atlas, "delta.fwd (chunked)", delta_flops(d, 0),
                 dm_delta_chunk_fwd(d, dp->chunk, q, k, v, g, beta, h0, o, hT, saved, work,
                                    nthreads));
    else
        DM_TIMED(dp->atlas, "delta.fwd (reference)", delta_flops(d, 0),
                 dm_delta_ref_fwd(d, q, k, v, g, beta, h0, o, hT, nthreads));
    if (!dp->verify || !dm_delta_chunk_supports(d, dp->chunk, NULL)) return;
    /* the other path into scratch, compared with this one */
    size_t no = (size_t)d->B * d->T * d->H * d->dv, ns = (size_t)d->B * d->H * d->dk * d->dv;
    float *alt = vscratch(dp, no + ns);
    if (!alt) return;
    float *altT = hT ? alt + no : NULL;
    if (fused) dm_delta_ref_fwd(d, q, k, v, g, beta, h0, alt, altT, nthreads);
    else dm_delta_chunk_fwd(d, dp->chunk, q, k, v, g, beta, h0, alt, altT, NULL, work, nthreads);
    record(dp, "delta o", fused ? o : alt, fused ? alt : o, no);
    if (hT) record(dp, "delta hT", fused ? hT : altT, fused ? altT : hT, ns);
    dp->verify_calls++;
}

void dm_op_delta_bwd(dm_dispatch *dp, const dm_delta_dims *d, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     const float *saved, const float *dO, const float *dhT, float *dq,
                     float *dk, float *dv, float *dg, float *dbeta, float *dh0, float *work,
                     int nthreads) {
    const char *why;
    int fused = dm_dispatch_delta_fused(dp, d, &why);
    count(dp, DM_OPK_DELTA, 1, why);
    if (fused)
        DM_TIMED(dp->atlas, "delta.bwd (chunked)", delta_flops(d, 1),
                 dm_delta_chunk_bwd(d, dp->chunk, q, k, v, g, beta, h0, saved, dO, dhT, dq, dk,
                                    dv, dg, dbeta, dh0, work, nthreads));
    else
        DM_TIMED(dp->atlas, "delta.bwd (reference)", delta_flops(d, 1),
                 dm_delta_ref_bwd(d, q, k, v, g, beta, h0, dO, dhT, dq, dk, dv, dg, dbeta, dh0,
                                  work, nthreads));
    if (!dp->verify || !dm_delta_chunk_supports(d, dp->chunk, NULL)) return;
    size_t nk = (size_t)d->B * d->T * d->H * d->dk, nv = (size_t)d->B * d->T * d->H * d->dv;
    size_t nb = (size_t)d->B * d->T * d->H, ngt = d->scalar_gate ? nb : nk;
    size_t ns = (size_t)d->B * d->H * d->dk * d->dv;
    float *a = vscratch(dp, 2 * nk + nv + ngt + nb + ns);
    if (!a) return;
    float *aq = a, *ak = aq + nk, *av = ak + nk, *ag = av + nv, *ab = ag + ngt;
    float *ah = dh0 ? ab + nb : NULL;
    if (fused)
        dm_delta_ref_bwd(d, q, k, v, g, beta, h0, dO, dhT, aq, ak, av, ag, ab, ah, work, nthreads);
    else
        dm_delta_chunk_bwd(d, dp->chunk, q, k, v, g, beta, h0, NULL, dO, dhT, aq, ak, av, ag, ab,
                           ah, work, nthreads);
#define CMP(name, x, y, n) record(dp, name, fused ? x : y, fused ? y : x, n)
    CMP("delta dq", dq, aq, nk);
    CMP("delta dk", dk, ak, nk);
    CMP("delta dv", dv, av, nv);
    CMP("delta dg", dg, ag, ngt);
    CMP("delta dbeta", dbeta, ab, nb);
    if (dh0) CMP("delta dh0", dh0, ah, ns);
#undef CMP
    dp->verify_calls++;
}

/* ---- the norms: fused unless norm_impl=reference (the fused kernels take any shape) ---- */

static int norm_fused(const dm_dispatch *dp, const char **why) {
    *why = dp->norm_impl == DM_IMPL_REFERENCE ? "norm_impl=reference" : NULL;
    return *why == NULL;
}

void dm_op_rmsnorm_fwd(dm_dispatch *dp, float *y, float *rstd, const float *x, const float *w,
                       int N, int C, float eps, float *scratch) {
    const char *why;
    int fused = norm_fused(dp, &why);
    count(dp, DM_OPK_RMSNORM, 0, why);
    if (fused) DM_TIMED(dp->atlas, "rmsnorm.fwd", 0, dm_rmsnorm_fwd(y, rstd, x, w, N, C, eps));
    else DM_TIMED(dp->atlas, "rmsnorm.fwd (reference)", 0,
                  dm_rmsnorm_ref_fwd(y, rstd, x, w, N, C, eps, scratch));
    if (!dp->verify) return;
    size_t n = (size_t)N * C;
    float *alt = vscratch(dp, n + (size_t)N);
    if (!alt) return;
    if (fused) dm_rmsnorm_ref_fwd(alt, alt + n, x, w, N, C, eps, scratch);
    else dm_rmsnorm_fwd(alt, alt + n, x, w, N, C, eps);
    record(dp, "rmsnorm y", fused ? y : alt, fused ? alt : y, n);
    dp->verify_calls++;
}

void dm_op_rmsnorm_bwd(dm_dispatch *dp, float *dx, float *dw, const float *dy, const float *x,
                       const float *w, const float *rstd, int N, int C, float *scratch) {
    const char *why;
    int fused = norm_fused(dp, &why);
    count(dp, DM_OPK_RMSNORM, 1, why);
    if (!dp->verify) {
        if (fused) DM_TIMED(dp->atlas, "rmsnorm.bwd", 0,
                            dm_rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, C));
        else DM_TIMED(dp->atlas, "rmsnorm.bwd (reference)", 0,
                      dm_rmsnorm_ref_bwd(dx, dw, dy, x, w, rstd, N, C, scratch));
        return;
    }
    /* both accumulate: run each into zeroed buffers, compare, add the chosen one */
    size_t n = (size_t)N * C;
    float *b = vscratch(dp, 2 * n + 2 * (size_t)C);
    if (!b) return;
    float *fx = b, *rx = b + n, *fw = b + 2 * n, *rw = fw + C;
    memset(b, 0, (2 * n + 2 * (size_t)C) * sizeof(float));
    dm_rmsnorm_bwd(fx, fw, dy, x, w, rstd, N, C);
    dm_rmsnorm_ref_bwd(rx, rw, dy, x, w, rstd, N, C, scratch);
    record(dp, "rmsnorm dx", fx, rx, n);
    record(dp, "rmsnorm dw", fw, rw, (size_t)C);
    dm_add_inplace(dx, fused ? fx : rx, n);
    dm_add_inplace(dw, fused ? fw : rw, (size_t)C);
    dp->verify_calls++;
}

void dm_op_gatednorm_fwd(dm_dispatch *dp, float *y, float *rstd, const float *o, const float *z,
                         const float *w, int R, int D, float eps, int act, float *scratch) {
    const char *why;
    int fused = norm_fused(dp, &why);
    count(dp, DM_OPK_GATEDNORM, 0, why);
    if (fused) DM_TIMED(dp->atlas, "gatednorm.fwd", 0,
                        dm_gatednorm_fwd(y, rstd, o, z, w, R, D, eps, act));
    else DM_TIMED(dp->atlas, "gatednorm.fwd (reference)", 0,
                  dm_gatednorm_ref_fwd(y, rstd, o, z, w, R, D, eps, act, scratch));
    if (!dp->verify) return;
    size_t n = (size_t)R * D;
    float *alt = vscratch(dp, n + (size_t)R);
    if (!alt) return;
    if (fused) dm_gatednorm_ref_fwd(alt, alt + n, o, z, w, R, D, eps, act, scratch);
    else dm_gatednorm_fwd(alt, alt + n, o, z, w, R, D, eps, act);
    record(dp, "gatednorm y", fused ? y : alt, fused ? alt : y, n);
    dp->verify_calls++;
}

void dm_op_gatednorm_bwd(dm_dispatch *dp, float *do_, float *dz, float *dw, const float *dy,
                         const float *o, const float *z, const float *w, const float *rstd,
                         int R, int D, int act, float *scratch) {
    const char *why;
    int fused = norm_fused(dp, &why);
    count(dp, DM_OPK_GATEDNORM, 1, why);
    if (!dp->verify) {
        if (fused) DM_TIMED(dp->atlas, "gatednorm.bwd", 0,
                            dm_gatednorm_bwd(do_, dz, dw, dy, o, z, w, rstd, R, D, act));
        else DM_TIMED(dp->atlas, "gatednorm.bwd (reference)", 0,
                      dm_gatednorm_ref_bwd(do_, dz, dw, dy, o, z, w, rstd, R, D, act, scratch));
        return;
    }
    size_t n = (size_t)R * D;
    float *b = vscratch(dp, 2 * n + 2 * (size_t)D);
    if (!b) return;
    float *ro = b, *rz = b + n, *fw = b + 2 * n, *rw = fw + D;
    memset(fw, 0, 2 * (size_t)D * sizeof(float));
    dm_gatednorm_bwd(do_, dz, fw, dy, o, z, w, rstd, R, D, act);
    dm_gatednorm_ref_bwd(ro, rz, rw, dy, o, z, w, rstd, R, D, act, scratch);
    record(dp, "gatednorm do", do_, ro, n);
    record(dp, "gatednorm dz", dz, rz, n);
    record(dp, "gatednorm dw", fw, rw, (size_t)D);
    if (!fused) {
        memcpy(do_, ro, n * sizeof(float));
        memcpy(dz, rz, n * sizeof(float));
    }
    dm_add_inplace(dw, fused ? fw : rw, (size_t)D);
    dp->verify_calls++;
}
