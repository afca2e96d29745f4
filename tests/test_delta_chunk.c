/* test_delta_chunk.c — the chunked delta-rule core (src/kernels/delta_chunk.c) against
 * the reference (src/kernels/delta_ref.c, itself checked against the double oracle and
 * finite differences in test_delta_ref.c): outputs o, hT and all gradients (q, k, v, g,
 * beta, h0), KDA and GDN, relative RMS <= 1e-5, no NaN; over T, head dims, chunk sizes,
 * gates (zero, mild, strong down to -20 per token) and h0.
 *
 * Covering set (each row of a table below is one problem; B x H = 2 x 2 unless noted):
 *   small: dk = dv = 16, every T in {1,15,63,64,65,200,1024} x chunk {16,32,64}, gates and
 *          h0 cycling, KDA and GDN (42 problems);
 *   dh64:  dk = dv = 64, T in {1,15,63,64,65,200,1024} x each gate at chunk 64 (h0
 *          alternating), plus T in {63,65,200,1024} at chunks 16 and 32 (gates cycling) and
 *          T = 1024 strong at 16, zero at 32 (KDA and GDN, 28 problems each);
 *   dh128: dk = dv = 128, T in {15,63,65,200,1024}, chunks 16/32/64 (8 problems each);
 *   odd:   dk != dv (dk 48 / dv 80, dk 80 / dv 48, dk 5 / dv 3), B x H = 1 x 3 and 2 x 3;
 *   plus: the double truth for the hardest rows, extreme gates (all -20, -1000 channels,
 *   g = 0, small positive g) at every chunk size, optional pointers NULL, and bitwise
 *   determinism over 1/2/3 threads and saved vs recompute.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "kernels/cpu/delta_chunk.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ref/ref.h"
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
    t_l2norm_rows(p->q, p->nb, dk);
    t_l2norm_rows(p->k, p->nb, dk);
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
/* Double-precision reverse-time backward (docs/kda.md section 5), used only to tell
 * which of reference and chunked is closer to the truth where they differ most. */
static void dbl_bwd(const prob *p, double *dq, double *dk, double *dv, double *dg, double *db,
                    double *dh0) {
    const dm_delta_dims *d = &p->d;
    const int T = d->T, H = d->H, K = d->dk, V = d->dv;
    double *P = malloc(sizeof(double) * (size_t)(T + 1) * K * V);
    double *dS = malloc(sizeof(double) * (size_t)K * V);
    double *Sp = malloc(sizeof(double) * (size_t)K * V);
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
                for (int i = 0; i < K; i++)
                    a[i] = exp(d->scalar_gate ? p->g[row] : p->g[row * K + i]);
                for (int j = 0; j < V; j++) {
                    double s = p->v[row * V + j];
                    for (int i = 0; i < K; i++) s -= a[i] * Pt[i * V + j] * p->k[row * K + i];
                    e[j] = s;
                }
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++)
                        Pn[i * V + j] =
                            a[i] * Pt[i * V + j] + p->beta[row] * p->k[row * K + i] * e[j];
            }
            for (size_t i = 0; i < (size_t)K * V; i++) dS[i] = p->dhT ? p->dhT[so + i] : 0;
            for (int t = T - 1; t >= 0; t--) {
                size_t row = ((size_t)b * T + t) * H + h;
                const double *Pt = P + (size_t)t * K * V, *St = P + (size_t)(t + 1) * K * V;
                const float *q = p->q + row * K, *k = p->k + row * K, *dO = p->dO + row * V;
                double bt = p->beta[row];
                for (int i = 0; i < K; i++)
                    a[i] = exp(d->scalar_gate ? p->g[row] : p->g[row * K + i]);
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
                    for (int j = 0; j < V; j++) {
                        dse += dS[i * V + j] * e[j];
                        sde += Sp[i * V + j] * de[j];
                    }
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
    const int Tm[] = {63, 65, 200, 1024};
    for (int i = 0; i < 4; i++)
        for (int ic = 0; ic < 2; ic++)
            cs[n++] = (cfg){2, 2, Tm[i], 64, 64, Cs[ic], (i + ic) % 3, ic};
    cs[n++] = (cfg){2, 2, 1024, 64, 64, 16, GATE_STRONG, 1};
    cs[n++] = (cfg){2, 2, 1024, 64, 64, 32, GATE_ZERO, 0};
    run_set(cs, n, scalar);
}

static void dh128_set(int scalar) {
    const cfg cs[] = {
        {1, 2, 15, 128, 128, 64, GATE_MILD, 1},   {1, 2, 65, 128, 128, 64, GATE_STRONG, 0},
        {1, 2, 200, 128, 128, 32, GATE_ZERO, 1},  {1, 2, 1024, 128, 128, 64, GATE_MILD, 1},
        {1, 2, 1024, 128, 128, 64, GATE_STRONG, 0}, {1, 2, 1024, 128, 128, 32, GATE_STRONG, 1},
        {1, 2, 1024, 128, 128, 16, GATE_ZERO, 0},   {1, 2, 63, 128, 128, 16, GATE_MILD, 1},
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

/* The kernels run the heads of one batch row in lockstep, up to 4 at a time, within each
 * thread's contiguous range of (b,h) pairs (fwd_group, bwd_group). H = 9 makes groups of
 * 4, 4 and 1 on one thread and ranges that cut batch rows and groups anywhere on 2, 4, 5
 * and 8 threads: every output bitwise the same (saved and recompute paths), and within the
 * bound of the reference. */
TEST(delta_chunk_head_groups) {
    for (int scalar = 0; scalar < 2; scalar++) {
        prob p;
        prob_init(&p, 2, 77, 9, 16, 24, scalar, GATE_STRONG, 1, (uint64_t)(911 + scalar));
        const int nts[6] = {1, 2, 4, 5, 8, 3};
        outs o[6];
        for (int r = 0; r < 6; r++) {
            outs_alloc(&o[r], &p);
            run_chunk(&p, 16, r < 5, nts[r], &o[r]);
        }
        for (int r = 1; r < 6; r++)
            for (int a = 0; a < NOUT; a++)
                CHECKF(memcmp(o[0].x[a], o[r].x[a], o[0].n[a] * sizeof(float)) == 0,
                       "%s H=9: %s differs (1 thread vs %d threads%s)", scalar ? "GDN" : "KDA",
                       out_name[a], nts[r], r == 5 ? ", recompute" : "");
        for (int r = 0; r < 6; r++) outs_free(&o[r]);
        compare(&p, 16, scalar ? "GDN B=2 H=9 T=77 dk=16 dv=24 C=16" : "KDA B=2 H=9 T=77 dk=16 dv=24 C=16");
        prob_free(&p);
    }
    report();
}

TEST(delta_chunk_supports_reasons) {
    const char *why = NULL;
    dm_delta_dims d = {2, 100, 3, 64, 64, 0, 0.125f};
    for (int c = 16; c <= 64; c *= 2) CHECK(dm_delta_chunk_supports(&d, c, &why) && why == NULL);
    const int bad_chunks[] = {0, 8, 24, 48, 128, -64};
    for (size_t i = 0; i < sizeof bad_chunks / sizeof bad_chunks[0]; i++) {
        why = NULL;
        CHECKF(!dm_delta_chunk_supports(&d, bad_chunks[i], &why) && why && why[0],
               "chunk %d accepted", bad_chunks[i]);
    }
    dm_delta_dims bad[] = {{0, 1, 1, 8, 8, 0, 1.f},   {1, 0, 1, 8, 8, 0, 1.f},
                           {1, 1, -1, 8, 8, 0, 1.f},  {1, 1, 1, 257, 8, 0, 1.f},
                           {1, 1, 1, 8, 300, 0, 1.f}, {1, 1, 1, 8, 8, 2, 1.f}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        CHECKF(!dm_delta_chunk_supports(&bad[i], 64, &why) && why && why[0], "bad dims %zu", i);
    }
    CHECK(!dm_delta_chunk_supports(NULL, 64, &why));
    CHECK(dm_delta_chunk_supports(&d, 64, NULL)); /* why may be NULL */
    d.dk = d.dv = 256;
    CHECK(dm_delta_chunk_supports(&d, 64, NULL));
}

/* Gates at the edges: every token -20 (a factored exp(-G_j) would overflow after 5 tokens),
 * some channels -1000 per token, g = 0 everywhere, and small positive g (accepted by the
 * contract). Chunked vs reference <= 1e-5 and no NaN/Inf anywhere. */
TEST(delta_chunk_extreme_gates) {
    for (int scalar = 0; scalar < 2; scalar++)
        for (int mode = 0; mode < 4; mode++)
            for (int ic = 0; ic < 3; ic++) {
                prob p;
                prob_init(&p, 1, 150, 2, 32, 24, scalar, GATE_ZERO, mode & 1,
                          (uint64_t)(900 + 10 * mode + ic + 100 * scalar));
                const int gw = scalar ? 1 : 32;
                for (size_t i = 0; i < p.ng; i++) {
                    if (mode == 0) p.g[i] = -20.f;
                    else if (mode == 1) p.g[i] = (i % gw) % 3 == 0 ? -1000.f : -0.02f;
                    else if (mode == 2) p.g[i] = 0.f;
                    else p.g[i] = 0.05f * (float)((int)(i % 7) - 3) / 3.f;
                }
                static const char *mname[] = {"all -20", "-1000 channels", "zero", "+-0.05"};
                char tag[96];
                snprintf(tag, sizeof tag, "%s %s C=%d", scalar ? "GDN" : "KDA", mname[mode],
                         Cs[ic]);
                compare(&p, Cs[ic], tag);
                prob_free(&p);
            }
    report();
}

/* The optional pointers: h0, hT, dhT, dh0 NULL (and the recompute path) give the same
 * results as the reference run the same way. */
TEST(delta_chunk_optional_pointers) {
    for (int scalar = 0; scalar < 2; scalar++) {
        prob p;
        prob_init(&p, 2, 77, 2, 16, 16, scalar, GATE_MILD, 0, (uint64_t)(4040 + scalar));
        free(p.dhT);
        p.dhT = NULL;
        const dm_delta_dims *d = &p.d;
        float *o1 = t_alloc(p.nv), *o2 = t_alloc(p.nv);
        float *g1[5], *g2[5];
        size_t sz[5] = {p.nq, p.nq, p.nv, p.ng, p.nb};
        for (int a = 0; a < 5; a++) { g1[a] = t_alloc(sz[a]); g2[a] = t_alloc(sz[a]); }
        float *wr = t_alloc(dm_delta_ref_bwd_work(d, 2));
        dm_delta_ref_fwd(d, p.q, p.k, p.v, p.g, p.beta, NULL, o1, NULL, 2);
        dm_delta_ref_bwd(d, p.q, p.k, p.v, p.g, p.beta, NULL, p.dO, NULL, g1[0], g1[1], g1[2],
                         g1[3], g1[4], NULL, wr, 2);
        float *wf = t_alloc(dm_delta_chunk_fwd_work(d, 32, 2));
        float *wb = t_alloc(dm_delta_chunk_bwd_work(d, 32, 2));
        dm_delta_chunk_fwd(d, 32, p.q, p.k, p.v, p.g, p.beta, NULL, o2, NULL, NULL, wf, 2);
        dm_delta_chunk_bwd(d, 32, p.q, p.k, p.v, p.g, p.beta, NULL, NULL, p.dO, NULL, g2[0],
                           g2[1], g2[2], g2[3], g2[4], NULL, wb, 2);
        double e = t_rel_rms_ff(o2, o1, p.nv);
        CHECKF(e <= 1e-5, "%s: o rel rms %.3g", scalar ? "GDN" : "KDA", e);
        for (int a = 0; a < 5; a++) {
            e = t_rel_rms_ff(g2[a], g1[a], sz[a]);
            CHECKF(e <= 1e-5 && t_all_finite(g2[a], sz[a]), "%s: %s rel rms %.3g",
                   scalar ? "GDN" : "KDA", out_name[O_DQ + a], e);
        }
        for (int a = 0; a < 5; a++) { free(g1[a]); free(g2[a]); }
        free(o1); free(o2); free(wr); free(wf); free(wb);
        prob_free(&p);
    }
}

/* Denormals flush to zero on every thread that dm_set_threads leaves in the pool (FTZ: a
 * product below 2^-126 is 0; DAZ: a denormal input reads as 0), at 1, 2 and 3 threads.
 * Under that mode, gates down to -20 per token over 600 tokens (the state decays far below
 * 1e-38, as a trained model's does): no output holds a denormal, every output is bitwise
 * the same at 1, 2 and 3 threads, and within the bound of the reference. */
static int is_denormal(float x) { return x != 0.f && fabsf(x) < 1.17549435e-38f; }
TEST(delta_chunk_denormals_flushed) {
    const int nts[3] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        int n = dm_set_threads(nts[i]), flushed = 1;
        CHECKF(dm_denormals_flushed(), "%d threads: the pool's mode is not FTZ+DAZ", n);
#pragma omp parallel reduction(&& : flushed)
        {
            volatile float a = 1e-30f, b = 1e-10f, z = 0.f;
            uint32_t bits = 0x00000400u; /* a denormal, 1.4e-42 */
            volatile float s;
            memcpy((void *)&s, &bits, sizeof bits);
            flushed = flushed && a * b == 0.f && s + z == 0.f;
        }
        CHECKF(flushed, "%d threads: a denormal survived in some thread", n);
    }
    for (int scalar = 0; scalar < 2; scalar++) {
        prob p;
        prob_init(&p, 2, 600, 2, 32, 32, scalar, GATE_STRONG, 1, (uint64_t)(4242 + scalar));
        outs o[3];
        for (int r = 0; r < 3; r++) {
            dm_set_threads(nts[r]);
            outs_alloc(&o[r], &p);
            run_chunk(&p, 64, 1, nts[r], &o[r]);
        }
        for (int a = 0; a < NOUT; a++) {
            size_t nd = 0;
            for (size_t j = 0; j < o[0].n[a]; j++) nd += is_denormal(o[0].x[a][j]);
            CHECKF(nd == 0, "%s: %s holds %zu denormals", scalar ? "GDN" : "KDA", out_name[a], nd);
            for (int r = 1; r < 3; r++)
                CHECKF(memcmp(o[0].x[a], o[r].x[a], o[0].n[a] * sizeof(float)) == 0,
                       "%s: %s differs between 1 and %d threads", scalar ? "GDN" : "KDA",
                       out_name[a], nts[r]);
        }
        for (int r = 0; r < 3; r++) outs_free(&o[r]);
        compare(&p, 64, scalar ? "GDN strong T=600 flushed" : "KDA strong T=600 flushed");
        prob_free(&p);
    }
    report();
}
