/* bench_delta.c — the delta-rule core: reference (token-serial) vs chunked, forward,
 * backward and forward+backward, KDA and GDN, at T = 512, 2048, 8192 (dk = dv = 64,
 * B = 1, H = 2 x threads so the (b,h) pairs fill the cores evenly).
 *
 * Prints one TSV row per measurement (header first):
 *   date  what  T  impl  ms  ns_per_token  ratio
 *   what          kda.fwd | kda.bwd | kda.fwd+bwd | gdn.* (bwd includes nothing else)
 *   impl          ref | chunkC (forward keeps the chunk states hs, backward uses them)
 *                 | chunkC-recompute (no hs: the backward reruns the forward scan)
 *   ms            best of `reps` wall-clock runs of the whole call, all threads
 *   ns_per_token  ms / (B*T*H) in ns: per token and head, so flat = linear in T
 *   ratio         ref ms / impl ms of the same row kind and T (speed-up; 1 for ref)
 * Usage: bench_delta [--quick] [--T N]... [--reps N] [--dh N] [--chunk C]... */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/delta.h"
#include "rng.h"

/* (no check.h helpers: tests/support/check.c carries the test main()) */
static void fill_normal(float *x, size_t n, uint64_t seed, float scale) {
    dm_rng r;
    dm_rng_seed(&r, seed, 0xbe7c);
    for (size_t i = 0; i < n; i++) x[i] = (float)(dm_rng_normal(&r) * scale);
}
static void fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    dm_rng r;
    dm_rng_seed(&r, seed, 0xbe7d);
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * dm_rng_uniform(&r));
}

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
    fill_normal(p->q, p->nq, 1, 0.125f);
    fill_normal(p->k, p->nq, 2, 0.125f);
    fill_normal(p->v, p->nv, 3, 1.f);
    fill_uniform(p->g, p->ng, 4, -0.1f, -0.001f);
    fill_uniform(p->beta, p->nb, 5, 0.1f, 0.9f);
    fill_normal(p->dO, p->nv, 6, 1.f);
}

static void prob_free(prob *p) {
    float *f[] = {p->q, p->k, p->v, p->g, p->beta, p->o, p->hT, p->dO,
                  p->dq, p->dk, p->dv, p->dg, p->db, p->dh0};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
}

typedef struct { double fwd, bwd, both; } times;

/* impl: 0 = reference; C > 0 = chunked with chunk C; recompute: no hs */
static times run(prob *p, int C, int recompute, int nt, int reps) {
    const dm_delta_dims *d = &p->d;
    times best = {1e30, 1e30, 1e30};
    float *work, *wf = NULL, *hs = NULL;
    if (C == 0) {
        work = falloc(dm_delta_ref_bwd_work(d, nt));
    } else {
        work = falloc(dm_delta_chunk_bwd_work(d, C, nt));
        wf = falloc(dm_delta_chunk_fwd_work(d, C, nt));
        if (!recompute) hs = falloc(dm_delta_chunk_states(d, C));
    }
    for (int r = 0; r < reps + 1; r++) { /* first run warms up */
        double t0 = now();
        if (C == 0) dm_delta_ref_fwd(d, p->q, p->k, p->v, p->g, p->beta, NULL, p->o, p->hT, nt);
        else dm_delta_chunk_fwd(d, C, p->q, p->k, p->v, p->g, p->beta, NULL, p->o, p->hT, hs, wf, nt);
        double t1 = now();
        if (C == 0)
            dm_delta_ref_bwd(d, p->q, p->k, p->v, p->g, p->beta, NULL, p->dO, NULL, p->dq, p->dk,
                             p->dv, p->dg, p->db, p->dh0, work, nt);
        else
            dm_delta_chunk_bwd(d, C, p->q, p->k, p->v, p->g, p->beta, NULL, hs, p->dO, NULL, p->dq,
                               p->dk, p->dv, p->dg, p->db, p->dh0, work, nt);
        double t2 = now();
        if (r == 0) continue;
        if (t1 - t0 < best.fwd) best.fwd = t1 - t0;
        if (t2 - t1 < best.bwd) best.bwd = t2 - t1;
        if (t2 - t0 < best.both) best.both = t2 - t0;
    }
    free(work); free(wf); free(hs);
    return best;
}

int main(int argc, char **argv) {
    int Tlist[8] = {512, 2048, 8192}, nT = 3, reps = 3, dh = 64;
    int Clist[4] = {64, 32}, nC = 2, userT = 0, userC = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { Tlist[0] = 512; Tlist[1] = 2048; nT = 2; reps = 2; }
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) {
            if (!userT) nT = 0;
            userT = 1;
            if (nT < 8) Tlist[nT++] = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            if (!userC) nC = 0;
            userC = 1;
            if (nC < 4) Clist[nC++] = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dh") && i + 1 < argc) dh = atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [--quick] [--T N]... [--chunk C]... [--reps N] [--dh N]\n", argv[0]); return 2; }
    }
    const int nt = omp_get_max_threads();
    const int B = 1, H = 2 * nt;
    char date[32];
    time_t tt = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", localtime(&tt));
    fprintf(stderr, "# bench_delta: threads %d, B %d, H %d, dk = dv = %d, best of %d\n", nt, B, H,
            dh, reps);
    printf("date\twhat\tT\timpl\tms\tns_per_token\tratio\n");
    for (int scalar = 0; scalar < 2; scalar++)
        for (int it = 0; it < nT; it++) {
            const int T = Tlist[it];
            prob p;
            prob_init(&p, B, T, H, dh, scalar);
            const char *dl = dm_delta_chunk_supports(&p.d, 64, NULL) ? NULL : "unsupported";
            (void)dl;
            times ref = run(&p, 0, 0, nt, reps);
            const double tok = (double)B * T * H;
            const char *mix = scalar ? "gdn" : "kda";
            struct { const char *impl; times t; } rows[1 + 2 * 4];
            int nr = 0;
            rows[nr].impl = "ref";
            rows[nr++].t = ref;
            static char names[8][32];
            for (int ic = 0; ic < nC; ic++) {
                const int C = Clist[ic];
                const char *why;
                if (!dm_delta_chunk_supports(&p.d, C, &why)) {
                    fprintf(stderr, "# chunk %d: %s\n", C, why);
                    continue;
                }
                snprintf(names[2 * ic], 32, "chunk%d", C);
                rows[nr].impl = names[2 * ic];
                rows[nr++].t = run(&p, C, 0, nt, reps);
                snprintf(names[2 * ic + 1], 32, "chunk%d-recompute", C);
                rows[nr].impl = names[2 * ic + 1];
                rows[nr++].t = run(&p, C, 1, nt, reps);
            }
            for (int kind = 0; kind < 3; kind++)
                for (int r = 0; r < nr; r++) {
                    double ms = (kind == 0 ? rows[r].t.fwd : kind == 1 ? rows[r].t.bwd : rows[r].t.both) * 1e3;
                    double rms = (kind == 0 ? ref.fwd : kind == 1 ? ref.bwd : ref.both) * 1e3;
                    printf("%s\t%s.%s\t%d\t%s\t%.3f\t%.1f\t%.2f\n", date, mix,
                           kind == 0 ? "fwd" : kind == 1 ? "bwd" : "fwd+bwd", T, rows[r].impl, ms,
                           ms * 1e6 / tok, rms / ms);
                }
            fflush(stdout);
            prob_free(&p);
        }
    return 0;
}
