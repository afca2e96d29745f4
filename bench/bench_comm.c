/* bench_comm.c — the cost of the exchanges of data-parallel training (docs/scaling.md):
 * the ordered all-reduce of optim/gradsum.h (an all-to-all of the N shards, the fold of
 * the pieces in rank order, an all-gather of the shards) and the all-gather alone (Muon's
 * updated matrices), over buffers of 1 float to --max-floats, timed on rank 0.
 *
 *   mpirun -np N bench_comm [--max-floats N] [--rounds R] [--history FILE]
 *
 * Each size runs R rounds (after one warm-up), every rank entering each round together
 * (an agreement between rounds); a row is the median over rounds, spread = max - min, n =
 * rounds. The all-reduce's line t = a + b * bytes through its smallest and its largest
 * buffer (Hockney's model: a is the latency of one all-reduce, its 1-float time; b the
 * time per byte of the buffer at the largest size, as GB/s = 1e-9 / b) gives the two
 * numbers the scaling model projects from (docs/scaling.md). Output: '#' notes (a table), then
 * rows in the columns of benches/history.tsv (what "bench:comm"; config "processes=N
 * op=allreduce|allgather floats=K"; flags "contended,..." when the contention probe saw a
 * busy machine); --history FILE appends them (rank 0). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/comm.h"
#include "base/stats.h"
#include "jobs/bench.h"
#include "optim/gradsum.h" /* dm_shard_offsets */

#define MAX_ROWS 96

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* every rank reaches this point before any goes on */
static int together(dm_comm *c) {
    int code = 0, stop = 0;
    char msg[64];
    return dm_comm_agree(c, &code, msg, sizeof msg, &stop);
}

int main(int argc, char **argv) {
    dm_comm *c = NULL;
    char err[512];
    if (dm_comm_start(&argc, &argv, &c, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 2;
    }
    long max_floats = 4L << 20;
    int rounds = 15;
    const char *history = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-floats") && i + 1 < argc) max_floats = atol(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--history") && i + 1 < argc) history = argv[++i];
        else {
            fprintf(stderr, "usage: mpirun -np N bench_comm [--max-floats N] [--rounds R] "
                    "[--history FILE]\n");
            dm_comm_end(c, 2);
            return 2;
        }
    }
    int N = dm_comm_size(c), me = dm_comm_rank(c);
    if (N < 2 || rounds < 1 || max_floats < 1) {
        if (me == 0)
            fprintf(stderr, "error: bench_comm measures exchanges between ranks: run it under "
                    "mpirun -np N with N >= 2 (here %d), rounds >= 1, max-floats >= 1\n", N);
        dm_comm_end(c, 2);
        return 2;
    }
    float *buf = malloc(sizeof(float) * (size_t)max_floats),
          *recv = malloc(sizeof(float) * (size_t)max_floats + sizeof(float) * N),
          *acc = malloc(sizeof(float) * (size_t)max_floats),
          *out = malloc(sizeof(float) * (size_t)max_floats);
    size_t *off = malloc(sizeof(size_t) * (size_t)(N + 1));
    double *t_ar = malloc(sizeof(double) * (size_t)rounds), *t_ag = malloc(sizeof(double) * (size_t)rounds);
    if (!buf || !recv || !acc || !out || !off || !t_ar || !t_ag) {
        fprintf(stderr, "error: out of memory\n");
        dm_comm_end(c, 1);
        return 1;
    }
    for (long i = 0; i < max_floats; i++) buf[i] = (float)(i % 1000) * 1e-3f + (float)me;

    static char config[MAX_ROWS][96], metric[MAX_ROWS][32];
    dm_history_row rows[MAX_ROWS];
    int nr = 0, npts = 0;
    double xs[64], ys[64];
    dm_probe probe;
    dm_probe_begin(&probe);
    if (me == 0)
        printf("# bench_comm: %d processes (%d on this machine); medians over %d rounds\n"
               "# %12s %14s %14s %12s\n", N, dm_comm_local_size(c), rounds, "floats",
               "allreduce ms", "allgather ms", "GB/s (ar)");
    for (long n = 1; n <= max_floats; n = n < max_floats && n * 4 > max_floats ? max_floats : n * 4) {
        dm_shard_offsets((size_t)n, N, off);
        size_t mine = off[me + 1] - off[me];
        int fail = 0;
        for (int r = -1; r < rounds && !fail; r++) {
            fail |= together(c);
            double t0 = now_s();
            /* the ordered all-reduce: shards out, the N pieces folded in rank order, back */
            fail |= dm_comm_alltoall_shards(c, buf, recv, off);
            for (int q = 0; q < N; q++)
                for (size_t i = 0; i < mine; i++)
                    acc[i] = q ? acc[i] + recv[q * mine + i] : recv[i];
            memcpy(out + off[me], acc, mine * sizeof(float));
            fail |= dm_comm_allgather(c, out, off, sizeof(float));
            double t1 = now_s();
            fail |= together(c);
            double t2 = now_s();
            fail |= dm_comm_allgather(c, out, off, sizeof(float));
            double t3 = now_s();
            if (r >= 0) t_ar[r] = t1 - t0, t_ag[r] = t3 - t2;
            dm_probe_tick(&probe);
        }
        if (fail) {
            fprintf(stderr, "error: %s\n", dm_comm_error(c));
            dm_comm_end(c, 1);
            return 1;
        }
        double s_ar, s_ag, m_ar = dm_median(t_ar, rounds, &s_ar), m_ag = dm_median(t_ag, rounds, &s_ag);
        double bytes = 4.0 * n;
        if (me == 0)
            printf("# %12ld %14.4f %14.4f %12.3f\n", n, 1e3 * m_ar, 1e3 * m_ag, 1e-9 * bytes / m_ar);
        if (npts < 64) xs[npts] = bytes, ys[npts++] = m_ar;
        for (int k = 0; k < 2 && nr + 2 <= MAX_ROWS; k++, nr++) {
            snprintf(config[nr], sizeof config[nr], "processes=%d op=%s floats=%ld", N,
                     k ? "allgather" : "allreduce", n);
            snprintf(metric[nr], sizeof metric[nr], "ms");
            rows[nr] = (dm_history_row){"bench:comm", config[nr], metric[nr],
                                        1e3 * (k ? m_ag : m_ar), 1e3 * (k ? s_ag : s_ar), rounds, NULL};
        }
        if (n == max_floats) break;
    }
    /* t = a + b * bytes through the smallest and the largest buffer */
    double a = ys[0], b = npts > 1 ? (ys[npts - 1] - ys[0]) / (xs[npts - 1] - xs[0]) : NAN;
    dm_probe_result pr;
    dm_probe_end(&probe, 1, &pr);
    char flags[96], note[256];
    dm_bench_flags(&pr, flags, sizeof flags);
    for (int i = 0; i < nr; i++) rows[i].flags = flags;
    static char fit_config[96];
    snprintf(fit_config, sizeof fit_config, "processes=%d op=allreduce line floats=1..%ld", N, max_floats);
    if (nr + 2 <= MAX_ROWS) {
        rows[nr++] = (dm_history_row){"bench:comm", fit_config, "latency_us", 1e6 * a, NAN, npts, flags};
        rows[nr++] = (dm_history_row){"bench:comm", fit_config, "gb_per_s", 1e-9 / b, NAN, npts, flags};
    }
    int rc = 0;
    if (me == 0) {
        dm_bench_probe_note(&pr, note, sizeof note);
        printf("# t = a + b * bytes (smallest and largest buffer): a = %.1f us per all-reduce, "
               "b = %.3g s per byte (%.2f GB/s)\n# %s\n", 1e6 * a, b, 1e-9 / b, note);
        if (dm_history_report(stdout, history, rows, nr, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            rc = 1;
        }
    }
    free(buf);
    free(recv);
    free(acc);
    free(out);
    free(off);
    free(t_ar);
    free(t_ag);
    dm_comm_end(c, rc);
    return rc;
}
