/* test_delta_chunk.c — the chunked delta-rule core (src/kernels/delta_chunk.c) against
 * the reference (src/kernels/delta_ref.c, itself checked against the double oracle and
 * finite differences in test_delta_ref.c): outputs o, hT and all gradients (q, k, v, g,
 * beta, h0), KDA and GDN, relative RMS <= 1e-5, no NaN; over T, head dims, chunk sizes,
 * gates (zero, mild, strong down to -20 per token) and h0.
 *
 * Covering set (each row of a table below is one problem; B x H = 2 x 2 unless noted):
 *   small: dk = dv = 16, every T in {1,15,63,64,65,200,1024} x chunk {16,32,64}, gates and
 *          h0 cycling, KDA and GDN (42 problems);
 *   dh64:  dk = dv = 64, T in {1,15,63,64,65,200,1024}, chunk 64 plus T in {63,65,200}
 *          at chunk 16/32, each gate, h0 on/off (KDA and GDN);
 *   dh128: dk = dv = 128, T in {15,65,200,1024}, chunks 64/32 (KDA and GDN);
 *   odd:   dk != dv (dk 48 / dv 80, dk 5 / dv 3), B x H = 1 x 3.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/delta.h"
#include "oracle.h"

enum { GATE_ZERO = 0, GATE_MILD = 1, GATE_STRONG = 2 };
static const char *gate_name[] = {"zero", "mild", "strong"};

typedef struct {
    dm_delta_dims d;
    size_t nq, nv, ng, nb, ns;
    float *q, *k, *v, *g, *beta, *h0, *dO, *dhT;
} prob;

static void prob_init(prob *p, int B, int T, int H, int dk, int dv, int scalar, int gate,
                      int use_h0, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->d = (dm_delta_dims){B, T, H, dk, dv, scalar, (float)(1.0 / sqrt((double)dk))};
    p->nq = (size_t)B * T * H * dk;
    p->nv = (size_t)B * T * H * dv;
    p->nb = (size_t)B * T * H;
    p->ng = scalar ? p->nb : p->nq;
    p->ns = (size_t)B * H * dk * dv;
    p->q = t_alloc(p->nq); p->k = t_alloc(p->nq); p->v = t_alloc(p->nv);
    p->g = t_alloc(p->ng); p->beta = t_alloc(p->nb); p->dO = t_alloc(p->nv);
    p->dhT = t_alloc(p->ns);
    t_fill_normal(p->q, p->nq, seed + 1, 1.f);
    t_fill_normal(p->k, p->nq, seed + 2, 1.f);
    for (size_t r = 0; r < p->nb; r++) {
        float *xs[2] = {p->q + r * dk, p->k + r * dk};
        for (int c = 0; c < 2; c++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += (double)xs[c][i] * xs[c][i];
            float rn = (float)(1.0 / sqrt(s + 1e-6));
            for (int i = 0; i < dk; i++) xs[c][i] *= rn;
        }
    }
    t_fill_normal(p->v, p->nv, seed + 3, 1.f);
    t_fill_uniform(p->beta, p->nb, seed + 4, 0.05f, 0.95f);
    if (gate == GATE_MILD) t_fill_uniform(p->g, p->ng, seed + 5, -0.1f, -0.01f);
    else if (gate == GATE_STRONG) t_fill_uniform(p->g, p->ng, seed + 5, -20.f, 0.f);
    t_fill_normal(p->dO, p->nv, seed + 6, 1.f);
    t_fill_normal(p->dhT, p->ns, seed + 8, 1.f);
    if (use_h0) { p->h0 = t_alloc(p->ns); t_fill_normal(p->h0, p->ns, seed + 7, 0.5f); }
}

static void prob_free(prob *p) {
    float *f[] = {p->q, p->k, p->v, p->g, p->beta, p->h0, p->dO, p->dhT};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
}

enum { O_O, O_HT, O_DQ, O_DK, O_DV, O_DG, O_DB, O_DH0, NOUT };
static const char *out_name[NOUT] = {"o", "hT", "dq", "dk", "dv", "dg", "dbeta", "dh0"};

typedef struct { float *x[NOUT]; size_t n[NOUT]; } outs;

static void outs_alloc(outs *o, const prob *p) {
    size_t n[NOUT] = {p->nv, p->ns, p->nq, p->nq, p->nv, p->ng, p->nb, p->ns};
    for (int a = 0; a < NOUT; a++) { o->n[a] = n[a]; o->x[a] = t_alloc(n[a]); }
}
static void outs_free(outs *o) { for (int a = 0; a < NOUT; a++) free(o->x[a]); }

static void run_ref(const prob *p, outs *o) {
    const dm_delta_dims *d = &p->d;
    dm_delta_ref_fwd(d, p->q, p->k, p->v, p->g, p->beta, p->h0, o->x[O_O], o->x[O_HT], 2);
    float *work = t_alloc(dm_delta_ref_bwd_work(d, 2));
    dm_delta_ref_bwd(d, p->q, p->k, p->v, p->g, p->beta, p->h0, p->dO, p->dhT, o->x[O_DQ],
                     o->x[O_DK], o->x[O_DV], o->x[O_DG], o->x[O_DB], o->x[O_DH0], work, 2);
    free(work);
}

/* chunked forward + backward; use_hs: pass the forward's chunk states to the backward */
static void run_chunk(const prob *p, int C, int use_hs, int nthreads, outs *o) {
    const dm_delta_dims *d = &p->d;
    float *hs = use_hs ? t_alloc(dm_delta_chunk_saved(d, C)) : NULL;
    float *wf = t_alloc(dm_delta_chunk_fwd_work(d, C, nthreads));
    float *wb = t_alloc(dm_delta_chunk_bwd_work(d, C, nthreads));
    dm_delta_chunk_fwd(d, C, p->q, p->k, p->v, p->g, p->beta, p->h0, o->x[O_O], o->x[O_HT], hs,
                       wf, nthreads);
    dm_delta_chunk_bwd(d, C, p->q, p->k, p->v, p->g, p->beta, p->h0, hs, p->dO, p->dhT,
                       o->x[O_DQ], o->x[O_DK], o->x[O_DV], o->x[O_DG], o->x[O_DB], o->x[O_DH0],
                       wb, nthreads);
    free(hs); free(wf); free(wb);
}


/* ---------------------------------------------------------------------------------- */
/* Double-precision reverse-time backward (docs/kda.md section 4), used only to tell
 * which of reference and chunked is closer to the truth where they differ most. */
static void dbl_bwd(const prob *p, double *dq, double *dk, double *dv, double *dg, double *db,
                    double *dh0) {
    const dm_delta_dims *d = &p->d;
    const int T = d->T, H = d->H, K = d->dk, V = d->dv;
    double *P = malloc(sizeof(double) * (size_t)(T + 1) * K * V);
    double *dS = malloc(sizeof(double) * (size_t)K * V), *Sp = malloc(sizeof(double) * (size_t)K * V);
    double *e = malloc(sizeof(double) * V), *de = malloc(sizeof(double) * V);
    double *a = malloc(sizeof(double) * K);
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < H; h++) {
            size_t so = ((size_t)b * H + h) * K * V;
            for (size_t i = 0; i < (size_t)K * V; i++) P[i] = p->h0 ? p->h0[so + i] : 0;
            for (int t = 0; t < T; t++) {
                size_t row = ((size_t)b * T + t) * H + h;
                const double *Pt = P + (size_t)t * K * V;
                double *Pn = P + (size_t)(t + 1) * K * V;
                for (int i = 0; i < K; i++) a[i] = exp(d->scalar_gate ? p->g[row] : p->g[row * K + i]);
                for (int j = 0; j < V; j++) {
                    double s = p->v[row * V + j];
                    for (int i = 0; i < K; i++) s -= a[i] * Pt[i * V + j] * p->k[row * K + i];
                    e[j] = s;
                }
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++)
                        Pn[i * V + j] = a[i] * Pt[i * V + j] + p->beta[row] * p->k[row * K + i] * e[j];
            }
            for (size_t i = 0; i < (size_t)K * V; i++) dS[i] = p->dhT ? p->dhT[so + i] : 0;
            for (int t = T - 1; t >= 0; t--) {
                size_t row = ((size_t)b * T + t) * H + h;
                const double *Pt = P + (size_t)t * K * V, *St = P + (size_t)(t + 1) * K * V;
                const float *q = p->q + row * K, *k = p->k + row * K, *dO = p->dO + row * V;
                double bt = p->beta[row];
                for (int i = 0; i < K; i++) a[i] = exp(d->scalar_gate ? p->g[row] : p->g[row * K + i]);
                for (int i = 0; i < K; i++) {
                    double s = 0;
                    for (int j = 0; j < V; j++) {
                        Sp[i * V + j] = a[i] * Pt[i * V + j];
                        dS[i * V + j] += d->scale * q[i] * dO[j];
                        s += St[i * V + j] * dO[j];
                    }
                    dq[row * K + i] = d->scale * s;
                }
                for (int j = 0; j < V; j++) {
                    double s = p->v[row * V + j];
                    for (int i = 0; i < K; i++) s -= Sp[i * V + j] * k[i];
                    e[j] = s;
                    double t2 = 0;
                    for (int i = 0; i < K; i++) t2 += dS[i * V + j] * k[i];
                    de[j] = bt * t2;
                    dv[row * V + j] = de[j];
                }
                double dbt = 0, dgs = 0;
                for (int i = 0; i < K; i++) {
                    double dse = 0, sde = 0, dgi = 0;
                    for (int j = 0; j < V; j++) { dse += dS[i * V + j] * e[j]; sde += Sp[i * V + j] * de[j]; }
                    dk[row * K + i] = bt * dse - sde;
                    dbt += k[i] * dse;
                    for (int j = 0; j < V; j++) {
                        dS[i * V + j] -= k[i] * de[j];
                        dgi += dS[i * V + j] * Sp[i * V + j];
                        dS[i * V + j] *= a[i];
                    }
                    if (d->scalar_gate) dgs += dgi; else dg[row * K + i] = dgi;
                }
                db[row] = dbt;
                if (d->scalar_gate) dg[row] = dgs;
            }
            for (size_t i = 0; i < (size_t)K * V; i++) dh0[so + i] = dS[i];
        }
    free(P); free(dS); free(Sp); free(e); free(de); free(a);
}

static double worst[NOUT];
static char worst_tag[NOUT][128];

static void compare(const prob *p, int C, const char *tag) {
    outs r, c;
    outs_alloc(&r, p);
    outs_alloc(&c, p);
    run_ref(p, &r);
    run_chunk(p, C, 1, 2, &c);
    for (int a = 0; a < NOUT; a++) {
        CHECKF(t_all_finite(c.x[a], c.n[a]), "%s: chunked %s has NaN/Inf", tag, out_name[a]);
        double e = t_rel_rms_ff(c.x[a], r.x[a], r.n[a]);
        CHECKF(e <= 1e-5, "%s: %s rel rms %.3g vs reference", tag, out_name[a], e);
        if (e > worst[a]) { worst[a] = e; snprintf(worst_tag[a], sizeof worst_tag[a], "%s", tag); }
    }
    outs_free(&r);
    outs_free(&c);
}

static void report(void) {
    printf("  worst rel rms, chunked vs reference:\n");
    for (int a = 0; a < NOUT; a++) {
        printf("    %-6s %.3g  (%s)\n", out_name[a], worst[a], worst_tag[a]);
        worst[a] = 0;
        worst_tag[a][0] = 0;
    }
}

/* one row of a covering set: B, H, T, dk, dv, chunk, gate, h0 */
typedef struct { int B, H, T, dk, dv, C, gate, h0; } cfg;

static void run_set(const cfg *cs, size_t n, int scalar) {
    for (size_t i = 0; i < n; i++) {
        const cfg *c = &cs[i];
        prob p;
        prob_init(&p, c->B, c->T, c->H, c->dk, c->dv, scalar, c->gate, c->h0,
                  (uint64_t)(100 + 7 * i + 1000 * scalar));
        char tag[128];
        snprintf(tag, sizeof tag, "%s B=%d H=%d T=%d dk=%d dv=%d C=%d gate=%s h0=%d",
                 scalar ? "GDN" : "KDA", c->B, c->H, c->T, c->dk, c->dv, c->C,
                 gate_name[c->gate], c->h0);
        compare(&p, c->C, tag);
        prob_free(&p);
    }
    report();
}

static const int Ts[] = {1, 15, 63, 64, 65, 200, 1024};
static const int Cs[] = {16, 32, 64};

static void small_set(int scalar) {
    cfg cs[21 * 2];
    size_t n = 0;
    for (int it = 0; it < 7; it++)
        for (int ic = 0; ic < 3; ic++) {
            int gate = (it + ic) % 3;
            cs[n++] = (cfg){2, 2, Ts[it], 16, 16, Cs[ic], gate, (it + ic) & 1};
        }
    run_set(cs, n, scalar);
}

static void dh64_set(int scalar) {
    cfg cs[64];
    size_t n = 0;
    for (int it = 0; it < 7; it++)
        for (int gate = 0; gate < 3; gate++) {
            if (Ts[it] == 1024 && gate == GATE_MILD) continue;
            cs[n++] = (cfg){2, 2, Ts[it], 64, 64, 64, gate, (it + gate) & 1};
        }
    const int Tm[] = {63, 65, 200};
    for (int i = 0; i < 3; i++)
        for (int ic = 0; ic < 2; ic++)
            cs[n++] = (cfg){2, 2, Tm[i], 64, 64, Cs[ic], (i + ic) % 3, ic};
    run_set(cs, n, scalar);
}

static void dh128_set(int scalar) {
    const cfg cs[] = {
        {1, 2, 15, 128, 128, 64, GATE_MILD, 1},   {1, 2, 65, 128, 128, 64, GATE_STRONG, 0},
        {1, 2, 200, 128, 128, 32, GATE_ZERO, 1},  {1, 2, 1024, 128, 128, 64, GATE_MILD, 1},
        {1, 2, 1024, 128, 128, 64, GATE_STRONG, 0},
    };
    run_set(cs, sizeof cs / sizeof cs[0], scalar);
}

static void odd_set(int scalar) {
    const cfg cs[] = {
        {1, 3, 200, 48, 80, 64, GATE_MILD, 1}, {1, 3, 130, 48, 80, 16, GATE_STRONG, 0},
        {1, 3, 37, 5, 3, 16, GATE_MILD, 1},    {2, 3, 100, 5, 3, 32, GATE_ZERO, 1},
        {1, 3, 300, 80, 48, 32, GATE_STRONG, 1},
    };
    run_set(cs, sizeof cs / sizeof cs[0], scalar);
}

TEST(delta_chunk_kda_small) { small_set(0); }
TEST(delta_chunk_gdn_small) { small_set(1); }
TEST(delta_chunk_kda_dh64) { dh64_set(0); }
TEST(delta_chunk_gdn_dh64) { dh64_set(1); }
TEST(delta_chunk_kda_dh128) { dh128_set(0); }
TEST(delta_chunk_gdn_dh128) { dh128_set(1); }
TEST(delta_chunk_kda_odd_dims) { odd_set(0); }
TEST(delta_chunk_gdn_odd_dims) { odd_set(1); }

/* Both float implementations against the double truth (o_delta for o/hT, the double
 * reverse-time backward above for the gradients) on the hardest rows of the set: where
 * the chunked-vs-reference difference is largest, this says whose rounding it is.
 * Asserts chunked vs truth <= 1e-5 for every output. */
TEST(delta_chunk_vs_double_truth) {
    const cfg cs[] = {
        {2, 2, 63, 64, 64, 64, GATE_STRONG, 0},   {2, 2, 1024, 64, 64, 64, GATE_MILD, 1},
        {2, 2, 1024, 64, 64, 64, GATE_STRONG, 1}, {1, 2, 200, 128, 128, 32, GATE_ZERO, 1},
        {2, 2, 64, 16, 16, 64, GATE_STRONG, 1},
    };
    for (int scalar = 0; scalar < 2; scalar++)
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            const cfg *c = &cs[i];
            prob p;
            prob_init(&p, c->B, c->T, c->H, c->dk, c->dv, scalar, c->gate, c->h0,
                      (uint64_t)(100 + 7 * i + 1000 * scalar));
            outs r, ch;
            outs_alloc(&r, &p);
            outs_alloc(&ch, &p);
            run_ref(&p, &r);
            run_chunk(&p, c->C, 1, 2, &ch);
            double *tr[NOUT];
            for (int a = 0; a < NOUT; a++) tr[a] = t_allocd(r.n[a]);
            {
                double *qd = t_allocd(p.nq), *kd = t_allocd(p.nq), *vd = t_allocd(p.nv),
                       *gd = t_allocd(p.ng), *bd = t_allocd(p.nb),
                       *h0d = p.h0 ? t_allocd(p.ns) : NULL;
                t_to_double(qd, p.q, p.nq); t_to_double(kd, p.k, p.nq);
                t_to_double(vd, p.v, p.nv); t_to_double(gd, p.g, p.ng);
                t_to_double(bd, p.beta, p.nb);
                if (h0d) t_to_double(h0d, p.h0, p.ns);
                o_delta(&p.d, qd, kd, vd, gd, bd, h0d, tr[O_O], tr[O_HT]);
                free(qd); free(kd); free(vd); free(gd); free(bd); free(h0d);
            }
            dbl_bwd(&p, tr[O_DQ], tr[O_DK], tr[O_DV], tr[O_DG], tr[O_DB], tr[O_DH0]);
            printf("  %s T=%d dk=%d C=%d gate=%s: rel rms vs double (ref / chunked)\n   ",
                   scalar ? "GDN" : "KDA", c->T, c->dk, c->C, gate_name[c->gate]);
            for (int a = 0; a < NOUT; a++) {
                double er = t_rel_rms(r.x[a], tr[a], r.n[a]);
                double ec = t_rel_rms(ch.x[a], tr[a], r.n[a]);
                printf(" %s %.2g/%.2g", out_name[a], er, ec);
                CHECKF(ec <= 1e-5, "%s T=%d: chunked %s vs double %.3g", scalar ? "GDN" : "KDA",
                       c->T, out_name[a], ec);
                CHECKF(er <= 1e-5, "%s T=%d: reference %s vs double %.3g", scalar ? "GDN" : "KDA",
                       c->T, out_name[a], er);
            }
            printf("\n");
            for (int a = 0; a < NOUT; a++) free(tr[a]);
            outs_free(&r);
            outs_free(&ch);
            prob_free(&p);
        }
}

/* Forward and backward bitwise equal with 1, 2 and 3 threads, with and without the saved
 * data; and the saved path equal to the recompute path. */
TEST(delta_chunk_deterministic_threads) {
    for (int scalar = 0; scalar < 2; scalar++)
        for (int ic = 0; ic < 3; ic++) {
            prob p;
            prob_init(&p, 2, 200, 3, 64, 64, scalar, GATE_MILD, 1, (uint64_t)(555 + scalar));
            outs o[4];
            const int nts[4] = {1, 2, 3, 2};
            for (int r = 0; r < 4; r++) {
                outs_alloc(&o[r], &p);
                run_chunk(&p, Cs[ic], r < 3, nts[r], &o[r]);
            }
            for (int r = 1; r < 4; r++)
                for (int a = 0; a < NOUT; a++)
                    CHECKF(memcmp(o[0].x[a], o[r].x[a], o[0].n[a] * sizeof(float)) == 0,
                           "%s C=%d: %s differs (1 thread vs %d threads%s)", scalar ? "GDN" : "KDA",
                           Cs[ic], out_name[a], nts[r], r == 3 ? ", recompute" : "");
            for (int r = 0; r < 4; r++) outs_free(&o[r]);
            prob_free(&p);
        }
}
