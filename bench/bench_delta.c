/* bench_delta.c — the delta-rule core: reference (token-serial) vs chunked, forward,
 * backward and forward+backward, KDA and GDN, at T = 512, 2048, 8192 (dk = dv = 64,
 * B = 1, H = 2 x threads so the (b,h) pairs fill the cores evenly).
 *
 * Usage: bench_delta [--quick] [--T N]... [--chunk C]... [--rounds N] [--dh N] [--history FILE]
 * Run with OMP_WAIT_POLICY=passive (as the tests do).
 *
 * Output: notes (lines starting with '#'), then rows in the columns of benches/history.tsv
 * (--history FILE appends them to FILE as well):
 *   what     bench:delta
 *   config   "kda T=512 impl=chunk64 B=1 H=4 dk=dv=64 threads=2"; the mixer is kda or gdn;
 *            impl is ref | chunkC (the forward keeps its saved data, the backward uses it)
 *            | chunkC-recompute (nothing saved: the backward reruns the forward scan)
 *   metric   STAGE_ms, STAGE_ns_per_token, STAGE_speedup_over_ref (not for ref itself),
 *            STAGE = fwd | bwd | fwd_bwd
 *     ms               wall-clock time of the whole call on all threads, median over
 *                      rounds; all variants run interleaved round by round, so drift hits
 *                      them alike
 *     ns_per_token     ms / (B*T*H) in ns: per token and head, so flat = linear in T
 *     speedup_over_ref ref ms / impl ms per round, median over rounds
 *   spread   max - min over the rounds;  n  rounds
 *   flags    "contended,..." when the contention probe saw a busy machine during the
 *            rounds of that mixer and T */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs/bench.h"
#include "check.h"
#include "backends/cpu/kernels/delta_chunk.h"
#include "ref/ref.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *falloc(size_t n) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, (n ? n : 1) * sizeof(float))) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

typedef struct {
    dm_delta_dims d;
    size_t nq, nv, ng, nb, ns;
    float *q, *k, *v, *g, *beta, *o, *hT, *dO, *dq, *dk, *dv, *dg, *db, *dh0;
} prob;

static void prob_init(prob *p, int B, int T, int H, int dh, int scalar) {
    memset(p, 0, sizeof *p);
    p->d = (dm_delta_dims){B, T, H, dh, dh, scalar, (float)(1.0 / sqrt((double)dh))};
    p->nq = (size_t)B * T * H * dh;
    p->nv = p->nq;
    p->nb = (size_t)B * T * H;
    p->ng = scalar ? p->nb : p->nq;
    p->ns = (size_t)B * H * dh * dh;
    p->q = falloc(p->nq); p->k = falloc(p->nq); p->v = falloc(p->nv); p->g = falloc(p->ng);
    p->beta = falloc(p->nb); p->o = falloc(p->nv); p->hT = falloc(p->ns); p->dO = falloc(p->nv);
    p->dq = falloc(p->nq); p->dk = falloc(p->nq); p->dv = falloc(p->nv); p->dg = falloc(p->ng);
    p->db = falloc(p->nb); p->dh0 = falloc(p->ns);
    t_fill_normal(p->q, p->nq, 1, 0.125f);
    t_fill_normal(p->k, p->nq, 2, 0.125f);
    t_fill_normal(p->v, p->nv, 3, 1.f);
    t_fill_uniform(p->g, p->ng, 4, -0.1f, -0.001f);
    t_fill_uniform(p->beta, p->nb, 5, 0.1f, 0.9f);
    t_fill_normal(p->dO, p->nv, 6, 1.f);
}

static void prob_free(prob *p) {
    float *f[] = {p->q, p->k, p->v, p->g, p->beta, p->o, p->hT, p->dO,
                  p->dq, p->dk, p->dv, p->dg, p->db, p->dh0};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
}

/* One implementation under test: reference (C == 0) or chunked with chunk C, with the
 * forward's saved data handed to the backward (saved != NULL) or not (recompute). */
typedef struct {
    char name[32];
    int C, recompute;
    float *work, *wf, *saved;
    double *t[3]; /* per round: fwd, bwd, fwd+bwd seconds */
} impl;

static void impl_init(impl *m, const dm_delta_dims *d, int C, int recompute, int nt, int rounds) {
    memset(m, 0, sizeof *m);
    m->C = C;
    m->recompute = recompute;
    if (C == 0) {
        snprintf(m->name, sizeof m->name, "ref");
        m->work = falloc(dm_delta_ref_bwd_work(d, nt));
    } else {
        snprintf(m->name, sizeof m->name, recompute ? "chunk%d-recompute" : "chunk%d", C);
        m->work = falloc(dm_delta_chunk_bwd_work(d, C, nt));
        m->wf = falloc(dm_delta_chunk_fwd_work(d, C, nt));
        if (!recompute) m->saved = falloc(dm_delta_chunk_saved(d, C));
    }
    for (int k = 0; k < 3; k++) m->t[k] = calloc((size_t)rounds, sizeof(double));
}

static void impl_free(impl *m) {
    free(m->work); free(m->wf); free(m->saved);
    for (int k = 0; k < 3; k++) free(m->t[k]);
}

static void impl_run(impl *m, prob *p, int nt, int round) {
    const dm_delta_dims *d = &p->d;
    double t0 = now();
    if (m->C == 0) dm_delta_ref_fwd(d, p->q, p->k, p->v, p->g, p->beta, NULL, p->o, p->hT, nt);
    else dm_delta_chunk_fwd(d, m->C, p->q, p->k, p->v, p->g, p->beta, NULL, p->o, p->hT, m->saved,
                            m->wf, nt);
    double t1 = now();
    if (m->C == 0)
        dm_delta_ref_bwd(d, p->q, p->k, p->v, p->g, p->beta, NULL, p->dO, NULL, p->dq, p->dk, p->dv,
                         p->dg, p->db, p->dh0, m->work, nt);
    else
        dm_delta_chunk_bwd(d, m->C, p->q, p->k, p->v, p->g, p->beta, NULL, m->saved, p->dO, NULL,
                           p->dq, p->dk, p->dv, p->dg, p->db, p->dh0, m->work, nt);
    double t2 = now();
    if (round >= 0) {
        m->t[0][round] = t1 - t0;
        m->t[1][round] = t2 - t1;
        m->t[2][round] = t2 - t0;
    }
}

int main(int argc, char **argv) {
    int Tlist[8] = {512, 2048, 8192}, nT = 3, rounds = 5, dh = 64;
    int Clist[4] = {64, 32}, nC = 2, userT = 0, userC = 0;
    const char *history = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { Tlist[0] = 512; Tlist[1] = 2048; nT = 2; rounds = 3; }
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) {
            if (!userT) nT = 0;
            userT = 1;
            if (nT < 8) Tlist[nT++] = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            if (!userC) nC = 0;
            userC = 1;
            if (nC < 4) Clist[nC++] = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dh") && i + 1 < argc) dh = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--history") && i + 1 < argc) history = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--T N]... [--chunk C]... [--rounds N] [--dh N] "
                            "[--history FILE]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    const int nt = omp_get_max_threads();
    const int B = 1, H = 2 * nt;
    printf("# bench_delta: threads %d, B %d, H %d, dk = dv = %d; variants interleaved round by "
           "round, median of %d rounds; speedup = median over rounds of ref/impl\n#%s\n",
           nt, B, H, dh, rounds, DM_HISTORY_HEADER);
    for (int scalar = 0; scalar < 2; scalar++)
        for (int it = 0; it < nT; it++) {
            const int T = Tlist[it];
            prob p;
            prob_init(&p, B, T, H, dh, scalar);
            impl m[1 + 2 * 4];
            int nm = 0;
            impl_init(&m[nm++], &p.d, 0, 0, nt, rounds);
            for (int ic = 0; ic < nC; ic++) {
                const char *why;
                if (!dm_delta_chunk_supports(&p.d, Clist[ic], &why)) {
                    printf("# chunk %d: %s\n", Clist[ic], why);
                    continue;
                }
                impl_init(&m[nm++], &p.d, Clist[ic], 0, nt, rounds);
                impl_init(&m[nm++], &p.d, Clist[ic], 1, nt, rounds);
            }
            for (int i = 0; i < nm; i++) impl_run(&m[i], &p, nt, -1); /* warm-up */
            dm_probe probe;
            dm_probe_result pr;
            dm_probe_begin(&probe);
            for (int r = 0; r < rounds; r++) {
                for (int i = 0; i < nm; i++) impl_run(&m[i], &p, nt, r);
                dm_probe_tick(&probe);
            }
            dm_probe_end(&probe, nt, &pr);
            const double tok = (double)B * T * H;
            const char *mix = scalar ? "gdn" : "kda";
            static const char *kind[3] = {"fwd", "bwd", "fwd_bwd"};
            enum { MAXR = 3 * (1 + 2 * 4) * 3 };
            static dm_history_row rows[MAXR];
            static char cfg[1 + 2 * 4][128], metric[MAXR][48];
            char flags[96], err[512];
            dm_bench_flags(&pr, flags, sizeof flags);
            double *x = malloc(sizeof(double) * (size_t)rounds);
            int nr = 0;
            for (int i = 0; i < nm; i++)
                snprintf(cfg[i], sizeof cfg[i], "%s T=%d impl=%.31s B=%d H=%d dk=dv=%d threads=%d",
                         mix, T, m[i].name, B, H, dh, nt);
            for (int k = 0; k < 3; k++)
                for (int i = 0; i < nm; i++) {
                    double sp;
                    for (int r = 0; r < rounds; r++) x[r] = m[i].t[k][r] * 1e3;
                    const double ms = dm_median(x, rounds, &sp);
                    snprintf(metric[nr], sizeof metric[nr], "%s_ms", kind[k]);
                    rows[nr] = (dm_history_row){"bench:delta", cfg[i], metric[nr], ms, sp, rounds,
                                                flags};
                    nr++;
                    snprintf(metric[nr], sizeof metric[nr], "%s_ns_per_token", kind[k]);
                    rows[nr] = (dm_history_row){"bench:delta", cfg[i], metric[nr],
                                                ms * 1e6 / tok, sp * 1e6 / tok, rounds, flags};
                    nr++;
                    if (i == 0) continue; /* ref over ref */
                    for (int r = 0; r < rounds; r++) x[r] = m[0].t[k][r] / m[i].t[k][r];
                    const double ratio = dm_median(x, rounds, &sp);
                    snprintf(metric[nr], sizeof metric[nr], "%s_speedup_over_ref", kind[k]);
                    rows[nr] = (dm_history_row){"bench:delta", cfg[i], metric[nr], ratio, sp,
                                                rounds, flags};
                    nr++;
                }
            free(x);
            for (int i = 0; i < nm; i++) impl_free(&m[i]);
            prob_free(&p);
            if (dm_history_report(stdout, history, rows, nr, err, sizeof err)) {
                fprintf(stderr, "bench_delta: %s\n", err);
                return 1;
            }
        }
    return 0;
}
