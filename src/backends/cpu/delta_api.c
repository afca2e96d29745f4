/* delta_api.c — the public delta-rule core: dm_delta_forward / dm_delta_backward
 * (include/dormouse.h). Validates the dims, sizes and allocates the scratch, and calls the
 * op through the dispatch guard (dispatch.c) with the default settings (kda_impl auto,
 * the default chunk size): the chunked kernel where it supports the call, else the
 * reference. Returns 0, or non-zero with a message. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/kernels/delta_chunk.h"
#include "ops/ops.h"
#include "ref/ref.h"

/* delta_ref.c keeps a [dk, <=16384/dk] forward state tile on the stack */
#define DM_DELTA_MAX_DK 4096

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 1;
}

static int check_dims(const char *fn, const dm_delta_dims *d, char *err, size_t errlen) {
    if (!d) return fail(err, errlen, "%s: dims is NULL", fn);
    const struct { const char *name; int v; } f[] = {
        {"B", d->B}, {"T", d->T}, {"H", d->H}, {"dk", d->dk}, {"dv", d->dv}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v <= 0)
            return fail(err, errlen, "%s: %s must be positive (got %d)", fn, f[i].name, f[i].v);
    if (d->scalar_gate != 0 && d->scalar_gate != 1)
        return fail(err, errlen, "%s: scalar_gate must be 0 (KDA) or 1 (GDN) (got %d)", fn,
                    d->scalar_gate);
    if (d->dk > DM_DELTA_MAX_DK)
        return fail(err, errlen, "%s: dk %d too large (at most %d)", fn, d->dk, DM_DELTA_MAX_DK);
    if (!isfinite(d->scale)) return fail(err, errlen, "%s: scale is not finite", fn);
    /* B*H pairs index an int loop; element counts stay in size_t */
    if ((long long)d->B * d->H > 0x7fffffffLL)
        return fail(err, errlen, "%s: B*H too large", fn);
    return 0;
}

/* A guard with the default settings, nt threads and the scratch of the path it picks for d
 * (returned to be freed; NULL with a message when it does not fit in memory). */
static float *guard(dm_ops *dp, const dm_delta_dims *d, int nt, int bwd, char *err,
                    size_t errlen, const char *fn) {
    dm_config c;
    dm_config_default(&c);
    dm_ops_init(dp, &c);
    size_t n;
    if (dm_ops_delta_chunked(dp, d, NULL)) {
        n = bwd ? dm_delta_chunk_bwd_work(d, dp->chunk, nt)
                : dm_delta_chunk_fwd_work(d, dp->chunk, nt);
    } else {
        if (((double)d->T + 3) * d->dk * d->dv * nt * sizeof(float) > 0x1p62) {
            fail(err, errlen, "%s: scratch for T*dk*dv = %d*%d*%d does not fit", fn, d->T, d->dk,
                 d->dv);
            return NULL;
        }
        n = bwd ? dm_delta_ref_bwd_work(d, nt) : 1;
    }
    float *work = malloc((n ? n : 1) * sizeof(float));
    if (!work) fail(err, errlen, "%s: out of memory (%zu bytes of scratch)", fn, n * sizeof(float));
    dp->threads = nt; /* this op layer's owner: no policy */
    dm_ops_set_scratch(dp, dm_bm(work), n ? n : 1);
    return work;
}

int dm_delta_forward(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                     const float *g, const float *beta, const float *h0, float *o, float *hT,
                     char *err, size_t errlen) {
    const char *fn = "dm_delta_forward";
    if (check_dims(fn, d, err, errlen)) return 1;
    if (!q || !k || !v || !g || !beta || !o)
        return fail(err, errlen, "%s: q, k, v, g, beta and o must be non-NULL", fn);
    int nt = omp_get_max_threads();
    if (nt > d->B * d->H) nt = d->B * d->H;
    dm_ops dp;
    float *work = guard(&dp, d, nt, 0, err, errlen, fn);
    if (!work) return 1;
    /* the caller's host memory: the cpu backend's own */
    dm_op_delta_fwd(&dp, d, dm_bm(q), dm_bm(k), dm_bm(v), dm_bm(g), dm_bm(beta), dm_bm(h0),
                    dm_bm(o), dm_bm(hT), NULL);
    free(work);
    dm_ops_free(&dp);
    return 0;
}

int dm_delta_backward(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, const float *h0, const float *dO,
                      const float *dhT, float *dq, float *dk, float *dv, float *dg,
                      float *dbeta, float *dh0, char *err, size_t errlen) {
    const char *fn = "dm_delta_backward";
    if (check_dims(fn, d, err, errlen)) return 1;
    if (!q || !k || !v || !g || !beta || !dO || !dq || !dk || !dv || !dg || !dbeta)
        return fail(err, errlen,
                    "%s: q, k, v, g, beta, dO, dq, dk, dv, dg and dbeta must be non-NULL", fn);
    int nt = omp_get_max_threads();
    if (nt > d->B * d->H) nt = d->B * d->H; /* no scratch for threads without a pair */
    dm_ops dp;
    float *work = guard(&dp, d, nt, 1, err, errlen, fn);
    if (!work) return 1;
    dm_op_delta_bwd(&dp, d, dm_bm(q), dm_bm(k), dm_bm(v), dm_bm(g), dm_bm(beta), dm_bm(h0), NULL,
                    dm_bm(dO), dm_bm(dhT), dm_bm(dq), dm_bm(dk), dm_bm(dv), dm_bm(dg),
                    dm_bm(dbeta), dm_bm(dh0));
    free(work);
    dm_ops_free(&dp);
    return 0;
}
