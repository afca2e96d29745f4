/* bench_ns.c — head-wise batched Newton–Schulz vs the per-head loop (docs/architecture.md
 * section 9: "batched head-wise NS never slower than the per-head loop"), plus whole-matrix
 * NS.
 *
 *   bench_ns [--quick] [--sched quintic5|polar5] [--history FILE]
 *
 * Every number is measured in this run, variants interleaved round by round (so drift
 * and noise hit all of them alike); a row is the median over rounds, spread = max - min
 * over rounds, n = rounds. Ratios are per round (loop / batched), then the median.
 * Variants on a head-wise stack [n_head, head_dim, d]:
 *   batched     dm_ns over the whole stack (one call; slice-parallel when threads > 1)
 *   loop        dm_ns on each head in turn (our single-matrix entry, n = 1)
 *   loop_blas   dm_ns_slice on each head in turn with its GEMMs tiled over the threads
 *               (dm_gemm), as a per-head loop in a framework would run (the baseline)
 * Output: notes (lines starting with '#'), then rows in the columns of benches/history.tsv
 * (what "bench:ns"; config "headwise|matrix SCHED [shape] threads=T wait=POLICY"; flags
 * "contended,..." when the contention probe saw a busy machine during that shape's
 * rounds); --history FILE appends them to FILE as well.
 * Run with OMP_WAIT_POLICY=passive, as the tests do; the config column records it. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs/bench.h"
#include "check.h"
#include "backends/cpu/kernels/ns.h"
#include "base/rng.h"

#define MAX_ROUNDS 400

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static char g_wait[32];
static const char *g_history;
static dm_ns_sched g_sched = DM_NS_QUINTIC5;

/* The rows of one shape: collected by row(), printed (and appended) by report(). */
static struct {
    char config[128], metric[64];
    double value, spread;
    int n;
} g_rows[16];
static int g_nrows;

static void row(const char *config, const char *metric, double value, double spread, int n) {
    if (g_nrows == 16) return;
    snprintf(g_rows[g_nrows].config, sizeof g_rows[g_nrows].config, "%s", config);
    snprintf(g_rows[g_nrows].metric, sizeof g_rows[g_nrows].metric, "%s", metric);
    g_rows[g_nrows].value = value;
    g_rows[g_nrows].spread = spread;
    g_rows[g_nrows++].n = n;
}

static void report(const dm_probe_result *pr) {
    dm_history_row rows[16];
    char flags[96], err[512];
    dm_bench_flags(pr, flags, sizeof flags);
    for (int i = 0; i < g_nrows; i++)
        rows[i] = (dm_history_row){"bench:ns", g_rows[i].config, g_rows[i].metric,
                                   g_rows[i].value, g_rows[i].spread, g_rows[i].n, flags};
    if (dm_history_report(stdout, g_history, rows, g_nrows, err, sizeof err)) {
        fprintf(stderr, "bench_ns: %s\n", err);
        exit(1);
    }
    g_nrows = 0;
}

enum { V_BATCHED, V_LOOP, V_LOOP_BLAS, V_COUNT };
static const char *vname[V_COUNT] = {"batched", "loop", "loop_blas"};

typedef struct {
    int n, rows, cols;
    float *G, *out, *work;
} shape_t;

static void run_variant(shape_t *s, int v) {
    size_t len = (size_t)s->rows * s->cols;
    switch (v) {
    case V_BATCHED:
        dm_ns(s->out, s->G, s->n, s->rows, s->cols, g_sched, s->work);
        break;
    case V_LOOP:
        for (int h = 0; h < s->n; h++)
            dm_ns(s->out + h * len, s->G + h * len, 1, s->rows, s->cols, g_sched, s->work);
        break;
    default:
        for (int h = 0; h < s->n; h++)
            dm_ns_slice(s->out + h * len, s->G + h * len, s->rows, s->cols, g_sched, s->work, 0);
        break;
    }
}

/* time `nv` variants interleaved; t[v][r] in seconds; returns the number of rounds */
static int measure(shape_t *s, const int *vars, int nv, double budget_s, int min_rounds,
                   double t[][MAX_ROUNDS], dm_probe *probe) {
    for (int i = 0; i < nv; i++) run_variant(s, vars[i]); /* warm up (pages, BLAS buffers) */
    double t0 = now_s();
    for (int i = 0; i < nv; i++) run_variant(s, vars[i]);
    double per_round = now_s() - t0;
    int rounds = (int)(budget_s / (per_round > 1e-9 ? per_round : 1e-9));
    if (rounds < min_rounds) rounds = min_rounds;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nv; i++) {
            int v = vars[(i + r) % nv]; /* rotate the order too */
            double a = now_s();
            run_variant(s, v);
            t[v][r] = now_s() - a;
            dm_probe_tick(probe);
        }
    return rounds;
}

static void shape_alloc(shape_t *s, int n, int rows, int cols) {
    s->n = n;
    s->rows = rows;
    s->cols = cols;
    size_t len = (size_t)n * rows * cols;
    s->G = t_alloc(len);
    s->out = t_alloc(len);
    s->work = t_alloc(dm_ns_work(n, rows, cols));
    dm_rng g;
    dm_rng_seed(&g, 1234 + n + rows + cols, 1);
    for (size_t i = 0; i < len; i++) s->G[i] = (float)(0.02 * dm_rng_normal(&g));
}

static void shape_free(shape_t *s) {
    free(s->G);
    free(s->out);
    free(s->work);
}

static double g_budget = 1.0; /* seconds of rounds per shape and thread count */
static int g_min_rounds = 9;

static void bench_headwise(int n, int rows, int cols, int threads) {
    static double t[V_COUNT][MAX_ROUNDS];
    shape_t s;
    shape_alloc(&s, n, rows, cols);
    omp_set_num_threads(threads);
    int vars[V_COUNT] = {V_BATCHED, V_LOOP, V_LOOP_BLAS};
    dm_probe probe;
    dm_probe_result pr;
    dm_probe_begin(&probe);
    int R = measure(&s, vars, V_COUNT, g_budget, g_min_rounds, t, &probe);
    dm_probe_end(&probe, threads, &pr);
    char cfg[128];
    snprintf(cfg, sizeof cfg, "headwise %s [%d,%d,%d] threads=%d%s", dm_ns_sched_name(g_sched),
             n, rows, cols, threads, g_wait);
    double sp, med[V_COUNT];
    for (int v = 0; v < V_COUNT; v++) {
        char m[64];
        snprintf(m, sizeof m, "ms_%s", vname[v]);
        med[v] = dm_median(t[v], R, &sp);
        row(cfg, m, 1e3 * med[v], 1e3 * sp, R);
    }
    double ratio[MAX_ROUNDS];
    for (int v = V_LOOP; v < V_COUNT; v++) {
        for (int r = 0; r < R; r++) ratio[r] = t[v][r] / t[V_BATCHED][r];
        char m[64];
        snprintf(m, sizeof m, "ratio_%s_over_batched", vname[v]);
        double md = dm_median(ratio, R, &sp);
        row(cfg, m, md, sp, R);
    }
    double fl = dm_ns_flops(n, rows, cols, g_sched) * 1e-9, lo = t[V_BATCHED][0], hi = lo;
    for (int r = 1; r < R; r++) {
        if (t[V_BATCHED][r] < lo) lo = t[V_BATCHED][r];
        if (t[V_BATCHED][r] > hi) hi = t[V_BATCHED][r];
    }
    row(cfg, "gflops_batched", fl / med[0], fl / lo - fl / hi, R);
    report(&pr);
    shape_free(&s);
}

static void bench_matrix(int rows, int cols, int threads) {
    static double t[V_COUNT][MAX_ROUNDS];
    shape_t s;
    shape_alloc(&s, 1, rows, cols);
    omp_set_num_threads(threads);
    int vars[1] = {V_BATCHED};
    dm_probe probe;
    dm_probe_result pr;
    dm_probe_begin(&probe);
    int R = measure(&s, vars, 1, g_budget / 2, g_min_rounds, t, &probe);
    dm_probe_end(&probe, threads, &pr);
    char cfg[128];
    snprintf(cfg, sizeof cfg, "matrix %s [%d,%d] threads=%d%s", dm_ns_sched_name(g_sched), rows,
             cols, threads, g_wait);
    double sp, md = dm_median(t[V_BATCHED], R, &sp);
    double fl = dm_ns_flops(1, rows, cols, g_sched) * 1e-9, lo = t[V_BATCHED][0], hi = lo;
    for (int r = 1; r < R; r++) {
        if (t[V_BATCHED][r] < lo) lo = t[V_BATCHED][r];
        if (t[V_BATCHED][r] > hi) hi = t[V_BATCHED][r];
    }
    row(cfg, "ms", 1e3 * md, 1e3 * sp, R);
    row(cfg, "gflops", fl / md, fl / lo - fl / hi, R);
    report(&pr);
    shape_free(&s);
}

/* 1-minute load average (contention note: other processes steal the cores we time) */
static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            g_budget = 0.1;
            g_min_rounds = 5;
        } else if (strcmp(argv[i], "--sched") == 0 && i + 1 < argc) {
            if (dm_ns_sched_parse(argv[++i], &g_sched) != 0) {
                fprintf(stderr, "unknown schedule %s\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--history") == 0 && i + 1 < argc) {
            g_history = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_ns [--quick] [--sched quintic5|polar5] [--history FILE]\n");
            return 2;
        }
    }
    const char *wp = getenv("OMP_WAIT_POLICY");
    snprintf(g_wait, sizeof g_wait, " wait=%s", wp && *wp ? wp : "default");
    int maxt = omp_get_max_threads();
    printf("# bench_ns: %d cores available (omp_get_max_threads), threads 1 and 2\n", maxt);
    printf("# loadavg1 at start %.2f (a value near or above the core count means contended timings)\n",
           load1());
    printf("#%s\n", DM_HISTORY_HEADER);
    const int heads[][3] = {{4, 64, 256}, {12, 64, 768}, {16, 128, 2048}};
    const int mats[][2] = {{256, 256}, {768, 256}};
    for (int threads = 1; threads <= 2; threads++) {
        for (int i = 0; i < 3; i++) bench_headwise(heads[i][0], heads[i][1], heads[i][2], threads);
        for (int i = 0; i < 2; i++) bench_matrix(mats[i][0], mats[i][1], threads);
    }
    omp_set_num_threads(maxt);
    printf("# loadavg1 at end %.2f\n", load1());
    return 0;
}
