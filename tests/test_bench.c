/* test_bench.c — how benchmarks report (dm_history_report: rows in the history columns,
 * printed and appended alike), `dormouse bench` on a tiny model, its bad input, and the
 * benchmark programs' rows (bench/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/bench.h"
#include "check.h"
#include "io/history.h"
#include "backends/cpu/kernels/kernels.h" /* dm_cpu_bf16_missing */

#define TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
             "--set gate_rank=8 --set batch_size=2 --set seq_len=32"

/* ---- helpers ---- */


static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, got;
    char *s = malloc(cap);
    while ((got = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) s = realloc(s, cap *= 2);
    }
    s[len] = 0;
    fclose(f);
    return s;
}

/* Split text into lines (in place); at most max. Returns the count. */
static int lines(char *text, char **line, int max) {
    int n = 0;
    for (char *p = text; p && *p && n < max;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        line[n++] = p;
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* The non-note lines of a benchmark's stdout: its rows. */
static int rows_of(char *text, char **row, int max) {
    char *all[4096];
    int n = lines(text, all, 4096), k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (all[i][0] != '#') row[k++] = all[i];
    return k;
}

typedef struct {
    char *f[10];
    double value, spread; /* spread NAN for "-" */
    long n;
} parsed;

static int num(const char *s, double *x) {
    char *end;
    *x = strtod(s, &end);
    return end != s && *end == 0 && isfinite(*x);
}

/* Parse one history row (a copy of line is split in buf); 1 when it is well formed, else
 * 0 with the reason in why. what: the expected what column (NULL: any "bench:..."). */
static int parse_row(const char *line, const char *what, char *buf, size_t bufn, parsed *r,
                     char *why, size_t whyn) {
    snprintf(buf, bufn, "%s", line);
    int nf = 0;
    for (char *p = buf; p && nf < 11;) {
        char *tab = strchr(p, '\t');
        if (tab) *tab = 0;
        if (nf < 10) r->f[nf] = p;
        nf++;
        p = tab ? tab + 1 : NULL;
    }
    if (nf != 10) return snprintf(why, whyn, "%d columns, not 10", nf), 0;
    int Y, M, D, h, m, s;
    char z;
    if (strlen(r->f[0]) != 20 ||
        sscanf(r->f[0], "%4d-%2d-%2dT%2d:%2d:%2d%c", &Y, &M, &D, &h, &m, &s, &z) != 7 || z != 'Z')
        return snprintf(why, whyn, "date '%s'", r->f[0]), 0;
    if (!r->f[1][0] || strchr(r->f[1], ' ')) return snprintf(why, whyn, "commit"), 0;
    size_t ml = strlen(r->f[2]);
    if (!strchr(r->f[2], '/') || ml < 2 || r->f[2][ml - 1] != 'c')
        return snprintf(why, whyn, "machine '%s'", r->f[2]), 0;
    if (what ? strcmp(r->f[3], what) != 0 : strncmp(r->f[3], "bench:", 6) != 0)
        return snprintf(why, whyn, "what '%s'", r->f[3]), 0;
    if (!r->f[4][0] || !r->f[5][0] || strchr(r->f[5], ' '))
        return snprintf(why, whyn, "config or metric empty"), 0;
    if (!num(r->f[6], &r->value)) return snprintf(why, whyn, "value '%s'", r->f[6]), 0;
    r->spread = NAN;
    if (strcmp(r->f[7], "-") != 0 && !(num(r->f[7], &r->spread) && r->spread >= 0))
        return snprintf(why, whyn, "spread '%s'", r->f[7]), 0;
    char *end;
    r->n = strtol(r->f[8], &end, 10);
    if (end == r->f[8] || *end || r->n < 1) return snprintf(why, whyn, "n '%s'", r->f[8]), 0;
    if (strcmp(r->f[9], "-") != 0) {
        static const char *const words[] = {"contended", "steal", "others", "load",
                                            "unmeasured", "dirty", "untimed", NULL};
        char fl[256];
        snprintf(fl, sizeof fl, "%s", r->f[9]);
        for (char *w = strtok(fl, ","); w; w = strtok(NULL, ",")) {
            int known = 0;
            for (int i = 0; words[i]; i++) known |= !strcmp(w, words[i]);
            if (!known) return snprintf(why, whyn, "flag '%s'", w), 0;
        }
    }
    return 1;
}

/* Every row well formed, of `what`; returns how many. */
static int check_rows(char **row, int n, const char *what) {
    char buf[4096], why[256];
    parsed p;
    int good = 0;
    for (int i = 0; i < n; i++) {
        int ok = parse_row(row[i], what, buf, sizeof buf, &p, why, sizeof why);
        CHECKF(ok, "row %d: %s: %s", i + 1, why, row[i]);
        good += ok;
    }
    return good;
}

/* ---- the row printer ---- */

TEST(bench_report_rows_parse_back) {
    char d[256], hist[512], outp[512], buf[4096], why[256];
    t_tmpdir(d, sizeof d);
    snprintf(hist, sizeof hist, "%s/h.tsv", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    dm_history_row rows[3] = {
        {"bench:x", "d_model=32\tT=64", "fwd_ms", 1.25, 0.5, 5, "contended,load"},
        {"bench:x", "d_model=32 T=64", "fwd_speedup_over_ref", 3.0625, NAN, 1, NULL},
        {"bench:y", "shape", "gflops", 123456.5, 0, 9, ""},
    };
    char err[512];
    FILE *out = fopen(outp, "w");
    CHECK(out != NULL);
    if (!out) return;
    /* print only, then print and append twice (the header only once) */
    CHECK(dm_history_report(out, NULL, rows, 3, err, sizeof err) == 0);
    CHECK(!t_exists(hist));
    CHECK(dm_history_report(out, hist, rows, 3, err, sizeof err) == 0);
    CHECK(dm_history_report(NULL, hist, rows, 1, err, sizeof err) == 0);
    fclose(out);

    char *printed = slurp(outp), *file = slurp(hist);
    CHECK(printed && file);
    if (!printed || !file) return;
    char *pl[64], *fl[64];
    int np = lines(printed, pl, 64), nf = lines(file, fl, 64);
    CHECKF(np == 6, "printed %d lines, expected 6 (no header)", np);
    CHECKF(nf == 5, "history has %d lines, expected header + 4 rows", nf);
    CHECK(nf > 0 && strcmp(fl[0], DM_HISTORY_HEADER) == 0);
    /* the file's rows are the printed rows of the same call, to the byte */
    for (int i = 0; i < 3 && i + 1 < nf && i + 3 < np; i++)
        CHECKF(strcmp(fl[i + 1], pl[i + 3]) == 0, "appended row differs from printed:\n%s\n%s",
               fl[i + 1], pl[i + 3]);
    /* and they parse back to what was reported */
    for (int i = 0; i < np; i++) {
        parsed p;
        const dm_history_row *r = &rows[i % 3];
        int ok = parse_row(pl[i], r->what, buf, sizeof buf, &p, why, sizeof why);
        CHECKF(ok, "row %d: %s: %s", i + 1, why, pl[i]);
        if (!ok) continue;
        if (i == 0) printf("  %s\n", pl[i]);
        CHECK(fabs(p.value - r->value) <= 1e-5 * fabs(r->value));
        CHECK(isnan(r->spread) ? isnan(p.spread) : fabs(p.spread - r->spread) <= 1e-6);
        CHECK(p.n == r->n);
        CHECK(strcmp(p.f[5], r->metric) == 0);
        if (i % 3 != 2) CHECK(strcmp(p.f[4], "d_model=32 T=64") == 0); /* the tab is a space */
        const char *flags = p.f[9];
        if (i % 3 == 0) CHECK(strncmp(flags, "contended,load", 14) == 0);
        else CHECK(strcmp(flags, "-") == 0 || strcmp(flags, "dirty") == 0);
    }
    free(printed);
    free(file);

    /* the flags of a probe reading */
    dm_probe_result pr = {0};
    char f[96];
    dm_bench_flags(&pr, f, sizeof f);
    CHECK(f[0] == 0);
    pr.flags = DM_PROBE_LOAD | DM_PROBE_OTHERS;
    dm_bench_flags(&pr, f, sizeof f);
    CHECKF(strcmp(f, "contended,others,load") == 0, "flags '%s'", f);
    double x[] = {5, 1, 4, 2}, sp;
    CHECK(dm_median(x, 4, &sp) == 3 && sp == 4 && x[0] == 5);
    CHECK(dm_median(x, 3, NULL) == 4);
    t_rmtree(d);
}

/* ---- dormouse bench ---- */

TEST(bench_cli_appends_history_rows) {
    char d[256], hist[512], outp[512], cmd[2048];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(hist, sizeof hist, "%s/history.tsv", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " bench -v " TINY " --reps 2 --history %s 2>&1", hist);
    for (int run = 1; run <= 2; run++) {
        int rc = t_run_out(cmd, outp, out, sizeof out);
        CHECKF(rc == 0, "dormouse bench exited %d:\n%s", rc, out);
        if (rc) break;
        CHECKF(strstr(out, "speed-up") && strstr(out, "# history: appended 16 rows") &&
               strstr(out, "# floor of kda_impl=auto: ") && strstr(out, "x its floor"),
               "no notes:\n%s", out);
        char *file = slurp(hist);
        CHECK(file != NULL);
        if (!file) break;
        char *fl[128], *row[128];
        int nf = lines(file, fl, 128), np = rows_of(out, row, 128);
        CHECKF(nf == 1 + 16 * run, "run %d: history has %d lines, expected %d", run, nf,
               1 + 16 * run);
        CHECK(strcmp(fl[0], DM_HISTORY_HEADER) == 0);
        CHECKF(np == 16, "printed %d rows, expected 16", np);
        CHECK(check_rows(fl + 1, nf - 1, "bench:step") == nf - 1);
        /* stdout's rows are the appended ones */
        for (int i = 0; i < np && i < 16; i++)
            CHECKF(strcmp(row[i], fl[nf - 16 + i]) == 0, "printed row differs:\n%s\n%s",
                   row[i], fl[nf - 16 + i]);
        /* both arms, every stage, the ratios */
        static const char *const want[] = {
            "forward_ms", "fwd_bwd_ms", "step_ms", "forward_tokens_per_s",
            "fwd_bwd_tokens_per_s", "step_tokens_per_s", "forward_speedup_over_reference",
            "fwd_bwd_speedup_over_reference", "step_speedup_over_reference",
            "step_over_floor", NULL};
        for (int w = 0; want[w]; w++) {
            int found[2] = {0, 0};
            for (int i = nf - 16; i < nf; i++) {
                char buf[4096], why[256];
                parsed p;
                if (!parse_row(fl[i], "bench:step", buf, sizeof buf, &p, why, sizeof why) ||
                    strcmp(p.f[5], want[w]) != 0)
                    continue;
                CHECK(p.n == 2 && p.value > 0 && !isnan(p.spread));
                CHECK(strstr(p.f[4], "d_model=32") && strstr(p.f[4], "seq_len=32"));
                found[strstr(p.f[4], "kda_impl=reference") != NULL]++;
            }
            /* the ratios and the arm's step over its floor: one row, the arm's */
            int ratio = strstr(want[w], "speedup") != NULL || strstr(want[w], "floor") != NULL;
            CHECKF(found[0] == 1 && found[1] == !ratio, "metric %s: %d + %d rows", want[w],
                   found[0], found[1]);
        }
        free(file);
    }
    t_rmtree(d);
}

TEST(bench_cli_bad_input) {
    char d[256], outp[512], cmd[2048], hist[512];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(hist, sizeof hist, "%s/h.tsv", d);
    const char *bad[] = {
        "--bogus",          "--reps 0",           "--reps x",  "--reps",
        "--set nope=1",     "--set d_model",      "extra",     "--help=1",
        "--set n_head=3",   "--data /nonexistent/corpus",
        "--history /nonexistent/dir/h.tsv",
        "--set kda_impl=chunked --set head_dim=512 --set n_head=1 --set d_model=512 "
        "--set batch_size=1 --set seq_len=16",
        "--baseline nope=1", "--baseline gemm", "--baseline gemm=fast",
        "--baseline n_head=3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI " bench %s --history %s", bad[i], hist);
        if (strstr(bad[i], "--history") || !strcmp(bad[i], "--reps"))
            snprintf(cmd, sizeof cmd, DM_CLI " bench " TINY " %s", bad[i]);
        int rc = t_run_out(cmd, outp, out, sizeof out);
        int nl = 0;
        for (char *p = out; *p; p++) nl += *p == '\n';
        CHECKF(rc == 2, "'%s' exited %d, expected 2:\n%s", bad[i], rc, out);
        CHECKF(nl == 1, "'%s': %d lines of output, expected one:\n%s", bad[i], nl, out);
        CHECKF(!t_exists(hist), "'%s' created the history", bad[i]);
    }
    CHECK(t_run_out(DM_CLI " bench --help", outp, out, sizeof out) == 0);
    CHECK(strstr(out, "--reps") && strstr(out, "--history") && strstr(out, "--data") &&
          strstr(out, "--set") && strstr(out, "kda_impl=reference"));
    CHECK(t_run_out(DM_CLI " --help", outp, out, sizeof out) == 0 && strstr(out, "  bench "));
    t_rmtree(d);
}

/* --baseline: two configs timed against each other; the speed-up rows name the baseline. */
TEST(bench_cli_baseline) {
    char d[256], outp[512], cmd[2048];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " bench -v " TINY " --set threads=1 --reps 1 "
             "--baseline gemm=openblas 2>&1");
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "dormouse bench --baseline exited %d:\n%s", rc, out);
    CHECKF(strstr(out, "# arms gemm=auto and gemm=openblas (the baseline)") &&
           strstr(out, "over the baseline gemm=openblas"), "notes do not name the arms:\n%s", out);
    char *row[128];
    int np = rows_of(out, row, 128), speedups = 0, base_rows = 0;
    CHECKF(np == 16, "printed %d rows, expected 16", np);
    CHECK(check_rows(row, np, "bench:step") == np);
    for (int i = 0; i < np; i++) {
        char buf[4096], why[256];
        parsed p;
        if (!parse_row(row[i], "bench:step", buf, sizeof buf, &p, why, sizeof why)) continue;
        CHECKF(!strstr(p.f[5], "over_reference"), "row compares with the reference: %s", row[i]);
        if (strstr(p.f[5], "_speedup_over_baseline")) {
            speedups++;
            CHECKF(strstr(p.f[4], "| baseline gemm=openblas") != NULL, "config: %s", p.f[4]);
        } else if (strstr(p.f[4], "gemm=openblas")) {
            base_rows++;
        }
    }
    CHECKF(speedups == 3 && base_rows == 6, "%d speed-up rows, %d baseline rows", speedups,
           base_rows);
    /* a bad --baseline key: one line, exit 2 */
    snprintf(cmd, sizeof cmd, DM_CLI " bench " TINY " --reps 1 --baseline no_such_key=1");
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 2 && strstr(out, "--baseline no_such_key=1: unknown config key") &&
           strchr(out, '\n') == out + strlen(out) - 1, "exit %d:\n%s", rc, out);
    t_rmtree(d);
}

/* --from: the arm is a trained checkpoint's model (its config, weights, optimizer state),
 * the default baseline the same config at its initial weights; rows name both. A model
 * key that differs from the checkpoint's, and a path with no checkpoint, are one-line
 * refusals with exit 2; a key that is not a model key (threads) may change. */
TEST(bench_cli_from_checkpoint) {
    char d[256], outp[512], cmd[2048];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --steps 3 --set eval_every=0 " TINY
             " >/dev/null 2>&1", d);
    CHECKF(system(cmd) == 0, "training the run failed: %s", cmd);
    snprintf(cmd, sizeof cmd, DM_CLI " bench -v --from %s/run --set threads=1 --reps 1 2>&1", d);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "dormouse bench --from exited %d:\n%s", rc, out);
    CHECKF(strstr(out, "ckpt-00000003/model.safetensors: step 3, with its optimizer state") &&
           strstr(out, "# arms weights=trained and weights=init (the baseline)") &&
           strstr(out, "d_model 32, 1 layer,"), "notes:\n%s", out);
    char *row[128];
    int np = rows_of(out, row, 128), trained = 0, init = 0, speedups = 0;
    CHECKF(np == 16, "printed %d rows, expected 16", np);
    for (int i = 0; i < np; i++) {
        char buf[4096], why[256];
        parsed p;
        if (!parse_row(row[i], "bench:step", buf, sizeof buf, &p, why, sizeof why)) continue;
        if (strstr(p.f[5], "_speedup_over_baseline"))
            speedups += strstr(p.f[4], "weights=trained-step-3 ") &&
                        strstr(p.f[4], "| baseline weights=init");
        else if (strstr(p.f[4], "weights=trained-step-3")) trained++;
        else if (strstr(p.f[4], "weights=init")) init++;
    }
    /* the trained arm's rows: 6 stages and its step over its floor */
    CHECKF(speedups == 3 && trained == 7 && init == 6, "%d speed-up, %d trained, %d init rows",
           speedups, trained, init);
    const char *bad[] = {"--from %s/run --set d_model=64", "--from %s/none"};
    const char *want[] = {"d_model", "none"};
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof args, bad[i], d);
        snprintf(cmd, sizeof cmd, DM_CLI " bench %s --reps 1", args);
        rc = t_run_out(cmd, outp, out, sizeof out);
        CHECKF(rc == 2 && strstr(out, "error: ") && strstr(out, want[i]),
               "bench %s: exit %d:\n%s", args, rc, out);
    }
    t_rmtree(d);
}

/* ---- the benchmark programs (built beside the dormouse binary) ---- */

TEST(bench_programs_print_history_rows) {
    char d[256], outp[512], cmd[4096], hist[512], dir[1024];
    static char out[1 << 18];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(hist, sizeof hist, "%s/h.tsv", d);
    snprintf(dir, sizeof dir, "%s", DM_CLI);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    struct {
        const char *prog, *args, *what;
        int rows;
    } progs[] = {
        /* 12 products x (dm_gemm, oneDNN, OpenBLAS threaded GFLOP/s + 2 time ratios), and
         * where the CPU has bf16 oneDNN's bf16 GFLOP/s and time ratio (each product it
         * declines in bf16 is a note instead: counted below) */
        {"bench_gemm", "--rounds 1 --rows 64", "bench:gemm", 12 * 5},
        /* kda and gdn x (ref, chunk16, chunk16-recompute) x 3 stages */
        {"bench_delta", "--T 64 --chunk 16 --rounds 1 --dh 16", "bench:delta", 2 * 3 * 8},
        /* 19 kernels x (ms, ns per element) */
        {"bench_kernels", "--rounds 1 --rows 64 --cold", "bench:kernels", 19 * 2},
    };
    int total = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s/%s %s --history %s 2>&1", dir, progs[i].prog,
                 progs[i].args, hist);
        int rc = t_run_out(cmd, outp, out, sizeof out);
        CHECKF(rc == 0, "%s exited %d (built? it is a target of the same build):\n%s",
               progs[i].prog, rc, out);
        CHECK(strstr(out, "#" DM_HISTORY_HEADER "\n") != NULL); /* before rows_of splits out */
        int want = progs[i].rows;
        if (i == 0 && !dm_cpu_bf16_missing()) {
            want += 12 * 2;
            for (const char *p = out; (p = strstr(p, "declines it in bf16")); p++) want -= 2;
        }
        char *row[512];
        int n = rows_of(out, row, 512);
        CHECKF(n == want, "%s printed %d rows, expected %d", progs[i].prog, n, want);
        CHECK(check_rows(row, n, progs[i].what) == n);
        total += n;
        snprintf(cmd, sizeof cmd, "%s/%s --bogus", dir, progs[i].prog);
        CHECK(t_run_out(cmd, outp, out, sizeof out) == 2);
    }
    char *file = slurp(hist);
    CHECK(file != NULL);
    if (file) {
        char *fl[512];
        int nf = lines(file, fl, 512);
        CHECKF(nf == 1 + total, "history has %d lines, expected %d", nf, 1 + total);
        CHECK(strcmp(fl[0], DM_HISTORY_HEADER) == 0);
        CHECK(check_rows(fl + 1, nf - 1, NULL) == nf - 1);
        free(file);
    }
    t_rmtree(d);
}
