/* test_delta_ref.c — the reference delta-rule core (src/kernels/delta_ref.c) and the
 * public dm_delta_forward / dm_delta_backward (src/delta_api.c).
 *   - float forward (o, hT) vs the double oracle o_delta;
 *   - every gradient (q, k, v, g, beta, h0) vs central finite differences of the double
 *     oracle loss L = sum(dO*o) + sum(dhT*hT), KDA and GDN, over T, odd dims, gates, h0;
 *   - the decay axis (a bug there is invisible at t = 0);
 *   - bitwise determinism across thread counts; argument checking of the public API. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backends/cpu/kernels/delta_chunk.h"
#include "ref/ref.h"
#include "oracle.h"
#include "base/rng.h"

enum { GATE_ZERO = 0, GATE_MILD = 1, GATE_STRONG = 2 };
static const char *gate_name[] = {"zero", "mild", "strong"};

/* One problem: inputs in float, their double copies, and upstream gradients. */
typedef struct {
    dm_delta_dims d;
    size_t nq, nv, ng, nb, ns; /* element counts: q/k, v/o, g, beta, state */
    float *q, *k, *v, *g, *beta, *h0, *dO, *dhT;
    double *qd, *kd, *vd, *gd, *bd, *h0d, *dOd, *dhTd;
    double *od, *hTd; /* oracle outputs (scratch for the loss) */
} prob;

/* q,k L2-normalized per head vector; v ~ N(0,1); beta in (0.05,0.95); g by mode;
 * h0 ~ N(0,0.5) when use_h0; dO ~ N(0,1); dhT ~ N(0,1) when use_dhT. */
static void prob_init(prob *p, int B, int T, int H, int dk, int dv, int scalar, int gate,
                      int use_h0, int use_dhT, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->d = (dm_delta_dims){B, T, H, dk, dv, scalar, (float)(1.0 / sqrt((double)dk))};
    p->nq = (size_t)B * T * H * dk;
    p->nv = (size_t)B * T * H * dv;
    p->nb = (size_t)B * T * H;
    p->ng = scalar ? p->nb : p->nq;
    p->ns = (size_t)B * H * dk * dv;
    p->q = t_alloc(p->nq); p->k = t_alloc(p->nq); p->v = t_alloc(p->nv);
    p->g = t_alloc(p->ng); p->beta = t_alloc(p->nb); p->dO = t_alloc(p->nv);
    t_fill_normal(p->q, p->nq, seed + 1, 1.f);
    t_fill_normal(p->k, p->nq, seed + 2, 1.f);
    t_l2norm_rows(p->q, p->nb, dk);
    t_l2norm_rows(p->k, p->nb, dk);
    t_fill_normal(p->v, p->nv, seed + 3, 1.f);
    t_fill_uniform(p->beta, p->nb, seed + 4, 0.05f, 0.95f);
    if (gate == GATE_MILD) t_fill_uniform(p->g, p->ng, seed + 5, -0.1f, -0.01f);
    else if (gate == GATE_STRONG) t_fill_uniform(p->g, p->ng, seed + 5, -20.f, 0.f);
    t_fill_normal(p->dO, p->nv, seed + 6, 1.f);
    if (use_h0) { p->h0 = t_alloc(p->ns); t_fill_normal(p->h0, p->ns, seed + 7, 0.5f); }
    if (use_dhT) { p->dhT = t_alloc(p->ns); t_fill_normal(p->dhT, p->ns, seed + 8, 1.f); }
    p->qd = t_allocd(p->nq); t_to_double(p->qd, p->q, p->nq);
    p->kd = t_allocd(p->nq); t_to_double(p->kd, p->k, p->nq);
    p->vd = t_allocd(p->nv); t_to_double(p->vd, p->v, p->nv);
    p->gd = t_allocd(p->ng); t_to_double(p->gd, p->g, p->ng);
    p->bd = t_allocd(p->nb); t_to_double(p->bd, p->beta, p->nb);
    p->dOd = t_allocd(p->nv); t_to_double(p->dOd, p->dO, p->nv);
    if (p->h0) { p->h0d = t_allocd(p->ns); t_to_double(p->h0d, p->h0, p->ns); }
    if (p->dhT) { p->dhTd = t_allocd(p->ns); t_to_double(p->dhTd, p->dhT, p->ns); }
    p->od = t_allocd(p->nv);
    p->hTd = t_allocd(p->ns);
}

static void prob_free(prob *p) {
    float *f[] = {p->q, p->k, p->v, p->g, p->beta, p->h0, p->dO, p->dhT};
    double *dd[] = {p->qd, p->kd, p->vd, p->gd, p->bd, p->h0d, p->dOd, p->dhTd, p->od, p->hTd};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++) free(dd[i]);
}

/* L = sum(dO*o) + sum(dhT*hT) of the double oracle on the current double inputs. */
static double prob_loss(void *ctx) {
    prob *p = ctx;
    o_delta(&p->d, p->qd, p->kd, p->vd, p->gd, p->bd, p->h0d, p->od, p->hTd);
    double L = 0;
    for (size_t i = 0; i < p->nv; i++) L += p->dOd[i] * p->od[i];
    if (p->dhTd)
        for (size_t i = 0; i < p->ns; i++) L += p->dhTd[i] * p->hTd[i];
    return L;
}

/* ---------------------------------------------------------------------------------- */

/* Forward vs oracle: o and hT, rel RMS <= 1e-5. */
static void check_fwd(prob *p, const char *tag, double *worst) {
    float *o = t_alloc(p->nv), *hT = t_alloc(p->ns);
    dm_delta_ref_fwd(&p->d, p->q, p->k, p->v, p->g, p->beta, p->h0, o, hT, 2);
    o_delta(&p->d, p->qd, p->kd, p->vd, p->gd, p->bd, p->h0d, p->od, p->hTd);
    double eo = t_rel_rms(o, p->od, p->nv), eh = t_rel_rms(hT, p->hTd, p->ns);
    CHECKF(eo <= 1e-5 && eh <= 1e-5, "%s: fwd rel rms o %.3g hT %.3g", tag, eo, eh);
    CHECKF(t_all_finite(o, p->nv) && t_all_finite(hT, p->ns), "%s: non-finite output", tag);
    if (eo > *worst) *worst = eo;
    if (eh > *worst) *worst = eh;
    free(o);
    free(hT);
}

TEST(delta_ref_fwd_matches_oracle) {
    static const int Ts[] = {1, 2, 37, 130};
    static const int dims[][4] = {{1, 1, 5, 3}, {2, 3, 5, 3}, {2, 2, 8, 6}, {1, 2, 16, 16}};
    double worst = 0;
    int n = 0;
    for (int scalar = 0; scalar < 2; scalar++)
        for (size_t it = 0; it < 4; it++)
            for (int gate = 0; gate < 3; gate++)
                for (size_t id = 0; id < 4; id++) {
                    prob p;
                    int h0 = (int)((it + id + gate) & 1);
                    prob_init(&p, dims[id][0], Ts[it], dims[id][1], dims[id][2], dims[id][3],
                              scalar, gate, h0, 0, 1000 + 17 * n);
                    char tag[128];
                    snprintf(tag, sizeof tag, "%s T=%d B=%d H=%d dk=%d dv=%d gate=%s h0=%d",
                             scalar ? "GDN" : "KDA", Ts[it], dims[id][0], dims[id][1],
                             dims[id][2], dims[id][3], gate_name[gate], h0);
                    check_fwd(&p, tag, &worst);
                    prob_free(&p);
                    n++;
                }
    printf("  %d cases, worst fwd rel rms %.3g\n", n, worst);
}

/* A state wider than the forward's stack tile (dk*dv > 16384) is processed in column
 * tiles; the result must still match, and o must not depend on whether hT is wanted. */
TEST(delta_ref_fwd_wide_state_tiles) {
    double worst = 0;
    for (int scalar = 0; scalar < 2; scalar++) {
        prob p;
        prob_init(&p, 1, 5, 1, 130, 140, scalar, GATE_MILD, 1, 0, 77 + scalar);
        check_fwd(&p, scalar ? "GDN wide" : "KDA wide", &worst);
        float *o1 = t_alloc(p.nv), *o2 = t_alloc(p.nv), *hT = t_alloc(p.ns);
        dm_delta_ref_fwd(&p.d, p.q, p.k, p.v, p.g, p.beta, p.h0, o1, hT, 1);
        dm_delta_ref_fwd(&p.d, p.q, p.k, p.v, p.g, p.beta, p.h0, o2, NULL, 1);
        CHECK(memcmp(o1, o2, p.nv * sizeof(float)) == 0);
        free(o1); free(o2); free(hT);
        prob_free(&p);
    }
    printf("  worst fwd rel rms %.3g\n", worst);
}

/* The decay acts on the KEY axis (rows of S). With dk != dv and a per-channel gate that
 * differs across channels, decaying the value axis instead gives the same o at t = 0
 * (zero initial state) but a different one from t = 1 on. Shows the oracle tells the two
 * apart, then checks the kernel against the oracle at t >= 2. */
static void wrong_axis_oracle(const dm_delta_dims *d, const double *q, const double *k,
                              const double *v, const double *g, const double *beta,
                              double *o) {
    /* B = H = 1; S [dk][dv]; decays column j by exp(g[j]) (needs dv <= dk) */
    int K = d->dk, V = d->dv;
    double S[8][8] = {{0}};
    for (int t = 0; t < d->T; t++) {
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) S[i][j] *= exp(g[t * K + j]);
        for (int j = 0; j < V; j++) {
            double pred = 0;
            for (int i = 0; i < K; i++) pred += S[i][j] * k[t * K + i];
            double e = v[t * V + j] - pred;
            for (int i = 0; i < K; i++) S[i][j] += beta[t] * k[t * K + i] * e;
        }
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int i = 0; i < K; i++) s += S[i][j] * q[t * K + i];
            o[t * V + j] = d->scale * s;
        }
    }
}

TEST(delta_ref_decay_axis_multi_token) {
    prob p;
    const int T = 6, dk = 5, dv = 3;
    prob_init(&p, 1, T, 1, dk, dv, 0, GATE_ZERO, 0, 0, 4242);
    /* strongly non-uniform per-channel gates: channel i decays by -0.05 - 0.6 i */
    for (int t = 0; t < T; t++)
        for (int i = 0; i < dk; i++) p.g[t * dk + i] = -0.05f - 0.6f * (float)i - 0.01f * t;
    t_to_double(p.gd, p.g, p.ng);
    float *o = t_alloc(p.nv);
    double *ow = t_allocd(p.nv);
    dm_delta_ref_fwd(&p.d, p.q, p.k, p.v, p.g, p.beta, NULL, o, NULL, 1);
    o_delta(&p.d, p.qd, p.kd, p.vd, p.gd, p.bd, NULL, p.od, NULL);
    wrong_axis_oracle(&p.d, p.qd, p.kd, p.vd, p.gd, p.bd, ow);
    /* t = 0: the axis does not matter (zero state) */
    double d0 = 0;
    for (int j = 0; j < dv; j++) d0 = fmax(d0, fabs(ow[j] - p.od[j]));
    CHECKF(d0 < 1e-12, "t=0 should not see the decay axis (diff %.3g)", d0);
    for (int t = 2; t < T; t++) {
        double ew = 0, den = 0;
        for (int j = 0; j < dv; j++) {
            ew += (ow[t * dv + j] - p.od[t * dv + j]) * (ow[t * dv + j] - p.od[t * dv + j]);
            den += p.od[t * dv + j] * p.od[t * dv + j];
        }
        double rw = sqrt(ew / den);
        double rk = t_rel_rms(o + t * dv, p.od + t * dv, (size_t)dv);
        CHECKF(rw > 1e-2, "t=%d: wrong-axis decay indistinguishable (rel %.3g)", t, rw);
        CHECKF(rk <= 1e-5, "t=%d: kernel vs oracle rel rms %.3g", t, rk);
        printf("  t=%d kernel rel %.2g, wrong-axis rel %.2g\n", t, rk, rw);
    }
    free(o);
    free(ow);
    prob_free(&p);
}

/* ---------------------------------------------------------------------------------- */
/* Gradients vs finite differences of the double oracle                                */

enum { GQ, GK, GV, GG, GB, GH0, NGRAD };
static const char *grad_name[NGRAD] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};

/* Compares float gradient grad[0..n) with central differences of the oracle loss with
 * respect to x[0..n) (double inputs of p): all entries when n <= 512, else 64 random
 * ones plus the first and last. Returns the rel RMS over the compared entries.
 * step: 1e-5 for k, g, beta. L is linear in q, v and h0 (the state is linear in (v, h0);
 * o is linear in q and the state), so a step of 1 is exact there and avoids cancellation
 * noise when a whole gradient is tiny (e.g. dh0 behind a -20 scalar gate). */
static double fd_compare(prob *p, double *x, const float *grad, size_t n, uint64_t seed,
                         double step) {
    size_t m = n <= 512 ? n : 66;
    float *gs = t_alloc(m);
    double *fs = t_allocd(m);
    dm_rng r;
    dm_rng_seed(&r, seed, 99);
    for (size_t s = 0; s < m; s++) {
        size_t i = n <= 512 ? s : s == 0 ? 0 : s == 1 ? n - 1 : (size_t)dm_rng_below(&r, n);
        gs[s] = grad[i];
        fs[s] = t_fd(prob_loss, p, x, i, step);
    }
    double e = t_rel_rms(gs, fs, m);
    free(gs);
    free(fs);
    return e;
}

static void check_grads(prob *p, const char *tag, double worst[NGRAD], char wtag[NGRAD][128]) {
    const dm_delta_dims *d = &p->d;
    float *dq = t_alloc(p->nq), *dk = t_alloc(p->nq), *dv = t_alloc(p->nv);
    float *dg = t_alloc(p->ng), *db = t_alloc(p->nb), *dh0 = t_alloc(p->ns);
    float *work = t_alloc(dm_delta_ref_bwd_work(d, 2));
    dm_delta_ref_bwd(d, p->q, p->k, p->v, p->g, p->beta, p->h0, p->dO, p->dhT, dq, dk, dv, dg,
                     db, dh0, work, 2);
    const float *gr[NGRAD] = {dq, dk, dv, dg, db, dh0};
    double *xs[NGRAD] = {p->qd, p->kd, p->vd, p->gd, p->bd, p->h0d};
    size_t ns[NGRAD] = {p->nq, p->nq, p->nv, p->ng, p->nb, p->ns};
    for (int a = 0; a < NGRAD; a++) {
        CHECKF(t_all_finite(gr[a], ns[a]), "%s: %s not finite", tag, grad_name[a]);
        double *x = xs[a];
        double *tmp = NULL;
        if (a == GH0 && !x) {
            /* no h0 given: dh0 is still the gradient w.r.t. a zero initial state */
            tmp = t_allocd(p->ns);
            p->h0d = tmp;
            x = tmp;
        }
        double step = (a == GQ || a == GV || a == GH0) ? 1.0 : 1e-5;
        double e = fd_compare(p, x, gr[a], ns[a], 31 + a, step);
        if (tmp) { p->h0d = NULL; free(tmp); }
        CHECKF(e <= 1e-4, "%s: %s vs finite differences rel rms %.3g", tag, grad_name[a], e);
        if (e > worst[a]) { worst[a] = e; snprintf(wtag[a], 128, "%s", tag); }
    }
    free(dq); free(dk); free(dv); free(dg); free(db); free(dh0); free(work);
}

static void grad_sweep(int scalar) {
    static const int Ts[] = {1, 2, 37, 130};
    /* B, H, dk, dv */
    static const int dims[][4] = {{1, 1, 5, 3}, {2, 3, 5, 3}, {2, 2, 8, 6}};
    double worst[NGRAD] = {0};
    char wtag[NGRAD][128] = {{0}};
    int n = 0;
    for (size_t it = 0; it < 4; it++)
        for (int gate = 0; gate < 3; gate++)
            for (size_t id = 0; id < 3; id++)
                for (int hv = 0; hv < 2; hv++) {
                    /* (h0, dhT) in {(0,0),(1,1)} for even dims, {(1,0),(0,1)} for odd */
                    int use_h0 = hv, use_dhT = (id & 1) ? !hv : hv;
                    if (Ts[it] == 130 && id == 0) continue; /* the larger dims cover it */
                    prob p;
                    prob_init(&p, dims[id][0], Ts[it], dims[id][1], dims[id][2], dims[id][3],
                              scalar, gate, use_h0, use_dhT, 5000 + 31 * n + scalar);
                    char tag[128];
                    snprintf(tag, sizeof tag, "%s T=%d B=%d H=%d dk=%d dv=%d gate=%s h0=%d dhT=%d",
                             scalar ? "GDN" : "KDA", Ts[it], dims[id][0], dims[id][1],
                             dims[id][2], dims[id][3], gate_name[gate], use_h0, use_dhT);
                    check_grads(&p, tag, worst, wtag);
                    prob_free(&p);
                    n++;
                }
    printf("  %d cases; worst rel rms vs finite differences:\n", n);
    for (int a = 0; a < NGRAD; a++)
        printf("    %-6s %.3g  (%s)\n", grad_name[a], worst[a], wtag[a]);
}

TEST(delta_ref_grad_kda_vs_fd) { grad_sweep(0); }
TEST(delta_ref_grad_gdn_vs_fd) { grad_sweep(1); }

/* ---------------------------------------------------------------------------------- */

/* Forward and backward bitwise equal with 1 and 2 threads (and 3, more than pairs/2). */
TEST(delta_ref_deterministic_threads) {
    for (int scalar = 0; scalar < 2; scalar++) {
        prob p;
        prob_init(&p, 2, 37, 3, 16, 12, scalar, GATE_STRONG, 1, 1, 808 + scalar);
        const dm_delta_dims *d = &p.d;
        float *out[3][8];
        size_t sz[8] = {p.nv, p.ns, p.nq, p.nq, p.nv, p.ng, p.nb, p.ns};
        const int nts[3] = {1, 2, 3};
        for (int r = 0; r < 3; r++) {
            for (int a = 0; a < 8; a++) out[r][a] = t_alloc(sz[a]);
            float *work = t_alloc(dm_delta_ref_bwd_work(d, nts[r]));
            dm_delta_ref_fwd(d, p.q, p.k, p.v, p.g, p.beta, p.h0, out[r][0], out[r][1], nts[r]);
            dm_delta_ref_bwd(d, p.q, p.k, p.v, p.g, p.beta, p.h0, p.dO, p.dhT, out[r][2],
                             out[r][3], out[r][4], out[r][5], out[r][6], out[r][7], work, nts[r]);
            free(work);
        }
        static const char *nm[8] = {"o", "hT", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
        for (int r = 1; r < 3; r++)
            for (int a = 0; a < 8; a++)
                CHECKF(memcmp(out[0][a], out[r][a], sz[a] * sizeof(float)) == 0,
                       "%s: %s differs between 1 and %d threads", scalar ? "GDN" : "KDA",
                       nm[a], nts[r]);
        for (int r = 0; r < 3; r++)
            for (int a = 0; a < 8; a++) free(out[r][a]);
        prob_free(&p);
    }
}

/* The public API: same bits as the kernel on valid input (thread count free). */
/* the public API goes through the dispatch guard with the default settings: the chunked
 * kernel for supported dims (bitwise the kernel's result), equal to the reference within
 * the fp32 bound */
TEST(delta_api_matches_kernel) {
    prob p;
    prob_init(&p, 2, 20, 2, 8, 6, 0, GATE_MILD, 1, 1, 91);
    const dm_delta_dims *d = &p.d;
    dm_config cfg;
    dm_config_default(&cfg);
    int C = cfg.chunk_size;
    float *o1 = t_alloc(p.nv), *o2 = t_alloc(p.nv), *h1 = t_alloc(p.ns), *h2 = t_alloc(p.ns);
    float *o3 = t_alloc(p.nv);
    char err[DM_ERRLEN] = "";
    float *fw = t_alloc(dm_delta_chunk_fwd_work(d, C, 1)), *bw = t_alloc(dm_delta_chunk_bwd_work(d, C, 1));
    dm_delta_chunk_fwd(d, C, p.q, p.k, p.v, p.g, p.beta, p.h0, o1, h1, NULL, fw, 1);
    CHECKF(dm_delta_forward(d, p.q, p.k, p.v, p.g, p.beta, p.h0, o2, h2, err, sizeof err) == 0,
           "forward failed: %s", err);
    CHECK(memcmp(o1, o2, p.nv * sizeof(float)) == 0);
    CHECK(memcmp(h1, h2, p.ns * sizeof(float)) == 0);
    dm_delta_ref_fwd(d, p.q, p.k, p.v, p.g, p.beta, p.h0, o3, NULL, 1);
    CHECK(t_rel_rms_ff(o2, o3, p.nv) <= 1e-5);
    float *g1[6], *g2[6];
    size_t sz[6] = {p.nq, p.nq, p.nv, p.ng, p.nb, p.ns};
    for (int a = 0; a < 6; a++) { g1[a] = t_alloc(sz[a]); g2[a] = t_alloc(sz[a]); }
    dm_delta_chunk_bwd(d, C, p.q, p.k, p.v, p.g, p.beta, p.h0, NULL, p.dO, p.dhT, g1[0], g1[1],
                       g1[2], g1[3], g1[4], g1[5], bw, 1);
    CHECKF(dm_delta_backward(d, p.q, p.k, p.v, p.g, p.beta, p.h0, p.dO, p.dhT, g2[0], g2[1],
                             g2[2], g2[3], g2[4], g2[5], err, sizeof err) == 0,
           "backward failed: %s", err);
    for (int a = 0; a < 6; a++)
        CHECKF(memcmp(g1[a], g2[a], sz[a] * sizeof(float)) == 0, "%s differs", grad_name[a]);
    /* dh0 == NULL is allowed */
    CHECK(dm_delta_backward(d, p.q, p.k, p.v, p.g, p.beta, p.h0, p.dO, NULL, g2[0], g2[1],
                            g2[2], g2[3], g2[4], NULL, err, sizeof err) == 0);
    for (int a = 0; a < 6; a++) { free(g1[a]); free(g2[a]); }
    free(fw); free(bw); free(o1); free(o2); free(o3); free(h1); free(h2);
    prob_free(&p);
}

TEST(delta_api_rejects_bad_dims) {
    float buf[64] = {0};
    float *x = buf;
    const dm_delta_dims good = {1, 2, 1, 2, 2, 0, 0.5f};
    struct { dm_delta_dims d; const char *what; } bad[] = {
        {{0, 2, 1, 2, 2, 0, 0.5f}, "B"},    {{-1, 2, 1, 2, 2, 0, 0.5f}, "B"},
        {{1, 0, 1, 2, 2, 0, 0.5f}, "T"},    {{1, -5, 1, 2, 2, 0, 0.5f}, "T"},
        {{1, 2, 0, 2, 2, 0, 0.5f}, "H"},    {{1, 2, -1, 2, 2, 0, 0.5f}, "H"},
        {{1, 2, 1, 0, 2, 0, 0.5f}, "dk"},   {{1, 2, 1, -2, 2, 0, 0.5f}, "dk"},
        {{1, 2, 1, 2, 0, 0, 0.5f}, "dv"},   {{1, 2, 1, 2, -7, 0, 0.5f}, "dv"},
        {{1, 2, 1, 2, 2, 2, 0.5f}, "scalar_gate"},
        {{1, 2, 1, 2, 2, 0, NAN}, "scale"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[DM_ERRLEN] = "";
        int rf = dm_delta_forward(&bad[i].d, x, x, x, x, x, NULL, x, NULL, err, sizeof err);
        CHECKF(rf != 0 && strstr(err, bad[i].what), "forward case %zu (%s): rc %d err '%s'", i,
               bad[i].what, rf, err);
        err[0] = 0;
        int rb = dm_delta_backward(&bad[i].d, x, x, x, x, x, NULL, x, NULL, x, x, x, x, x, NULL,
                                   err, sizeof err);
        CHECKF(rb != 0 && strstr(err, bad[i].what), "backward case %zu (%s): rc %d err '%s'", i,
               bad[i].what, rb, err);
    }
    char err[DM_ERRLEN] = "";
    CHECK(dm_delta_forward(NULL, x, x, x, x, x, NULL, x, NULL, err, sizeof err) != 0 && err[0]);
    err[0] = 0;
    CHECK(dm_delta_forward(&good, x, NULL, x, x, x, NULL, x, NULL, err, sizeof err) != 0 &&
          err[0]);
    CHECK(dm_delta_forward(&good, x, x, x, x, x, NULL, x, NULL, NULL, 0) == 0); /* err NULL ok */
    CHECK(dm_delta_forward(&bad[0].d, x, x, x, x, x, NULL, x, NULL, NULL, 0) != 0);
}
