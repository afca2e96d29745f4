/* test_plot.c — `dormouse plot`, `dormouse ab --plot` and `dormouse metrics` on tiny runs:
 * the files they write (PNG / SVG format and size, the colors of the series in the SVG),
 * the points they drew (the TSV beside the picture) against the runs' metrics.jsonl read
 * here with cJSON, the axis ranges, the control band of a sweep, the CSV; and bad input. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "io/figure.h"

#define CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz"
#define TINY "--data " CORPUS " --set d_model=32 --set n_layer=1 --set n_head=2 " \
             "--set head_dim=16 --set gate_rank=8 --set batch_size=2 --set seq_len=32 " \
             "--set eval_window=1024 --set warmup_steps=1 --set threads=1"

/* ---- helpers --------------------------------------------------------------------------- */


/* metrics.jsonl of a run, column by name: step[i], v[i] (NAN when absent); returns rows */
static int jsonl_col(const char *run, const char *key, double *step, double *v, int max) {
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    char *s = t_read_text(path);
    CHECK(s != NULL);
    int n = 0;
    for (char *save = NULL, *line = s ? strtok_r(s, "\n", &save) : NULL; line && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "step"),
              *b = cJSON_GetObjectItemCaseSensitive(o, key);
        step[n] = cJSON_IsNumber(a) ? a->valuedouble : NAN;
        v[n] = cJSON_IsNumber(b) ? b->valuedouble : NAN;
        n++;
        cJSON_Delete(o);
    }
    free(s);
    return n;
}

typedef struct {
    int panel, band;
    char label[160];
    double x, y, hi;
} point;

typedef struct {
    double xmin, xmax, ymin, ymax;
} axes;

/* the TSV of a plot: its points and its per-panel axes; returns the points */
static int read_tsv(const char *path, point *pts, int max, axes ax[2], char *xlabel, size_t xn) {
    char *s = t_read_text(path);
    CHECK(s != NULL);
    int n = 0, header = 0;
    xlabel[0] = 0;
    for (char *save = NULL, *line = s ? strtok_r(s, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        int p;
        axes a;
        if (!strncmp(line, "# x: ", 5)) snprintf(xlabel, xn, "%s", line + 5);
        if (sscanf(line, "#axes\t%d\t%lf\t%lf\t%lf\t%lf", &p, &a.xmin, &a.xmax, &a.ymin,
                   &a.ymax) == 5 && p >= 0 && p < 2)
            ax[p] = a;
        if (line[0] == '#') continue;
        if (!header++) {
            CHECKF(!strcmp(line, "panel\tkind\tlabel\tx\ty\ty_hi"), "TSV header: %s", line);
            continue;
        }
        if (n == max) break;
        point *q = &pts[n];
        char kind[16];
        char *f[6];
        int k = 0;
        for (char *sv = NULL, *t = strtok_r(line, "\t", &sv); t && k < 6; t = strtok_r(NULL, "\t", &sv))
            f[k++] = t;
        CHECKF(k >= 5, "TSV row with %d fields", k);
        if (k < 5) continue;
        q->panel = atoi(f[0]);
        snprintf(kind, sizeof kind, "%s", f[1]);
        q->band = !strcmp(kind, "band");
        snprintf(q->label, sizeof q->label, "%s", f[2]);
        q->x = strtod(f[3], NULL);
        q->y = strtod(f[4], NULL);
        q->hi = k > 5 ? strtod(f[5], NULL) : NAN;
        n++;
    }
    free(s);
    return n;
}

/* the series (band: the bands) among the points: a series is a run of consecutive points
 * of one (panel, kind, label) */
static int count_series(const point *p, int n, int band) {
    int c = 0;
    for (int i = 0; i < n; i++)
        if (p[i].band == band && (i == 0 || p[i - 1].band != band || p[i - 1].panel != p[i].panel ||
                                  strcmp(p[i - 1].label, p[i].label) != 0))
            c++;
    return c;
}

static int png_size(const char *path, unsigned *w, unsigned *h) {
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    if (got < 24 || memcmp(b, "\x89PNG\r\n\x1a\n", 8) || memcmp(b + 12, "IHDR", 4)) return 1;
    *w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19];
    *h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23];
    return 0;
}

/* stroked paths of cairo's SVG in the color rgb(r,g,b) (percent, as cairo writes it) */
static int svg_strokes(const char *svg, int r, int g, int b) {
    char want[96];
    snprintf(want, sizeof want, "stroke:rgb(%.0f", 100.0 * r / 255);
    int n = 0;
    for (const char *p = svg; (p = strstr(p, "stroke:rgb(")); p++) {
        double pr, pg, pb;
        if (sscanf(p, "stroke:rgb(%lf%%,%lf%%,%lf%%)", &pr, &pg, &pb) == 3 &&
            fabs(pr - 100.0 * r / 255) < 0.01 && fabs(pg - 100.0 * g / 255) < 0.01 &&
            fabs(pb - 100.0 * b / 255) < 0.01)
            n++;
    }
    (void)want;
    return n;
}

static void train(const char *run, const char *extra) {
    char cmd[2048], err[4096];
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s " TINY " %s", run, extra);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "training %s failed (%d): %s", run, rc, err);
}

/* ---- tests ----------------------------------------------------------------------------- */

TEST(plot_runs_files_points_and_axes) {
    if (!dm_fig_available()) {
        t_skip("dormouse was built without PLplot (Debian: libplplot-dev plplot-driver-cairo)");
        return;
    }
    char d[256], a[512], b[512], cmd[4096], outp[600], out[16384], path[700], xl[128];
    t_tmpdir(d, sizeof d);
    snprintf(a, sizeof a, "%s/a", d);
    snprintf(b, sizeof b, "%s/b", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    train(a, "--set steps=40 --set log_every=4 --set eval_every=10");
    train(b, "--set steps=40 --set log_every=4 --set eval_every=10 --set lr=0.01");

    /* PNG: its signature and size (1200 x 400 per panel + title and note) */
    snprintf(cmd, sizeof cmd, DM_CLI " plot %s %s --out %s/p.png", a, b, d);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "wrote "), "plot failed (%d): %s", rc, out);
    unsigned w = 0, h = 0;
    snprintf(path, sizeof path, "%s/p.png", d);
    CHECKF(png_size(path, &w, &h) == 0, "%s is not a PNG", path);
    CHECKF(w == 1200 && h == 890, "PNG is %ux%u", w, h);

    /* the points drawn: 2 runs x 2 panels, each point the run's own number */
    static point pts[4096];
    axes ax[2] = {{0}};
    snprintf(path, sizeof path, "%s/p.tsv", d);
    int n = read_tsv(path, pts, 4096, ax, xl, sizeof xl);
    CHECKF(count_series(pts, n, 0) == 4, "%d line series, expected 4", count_series(pts, n, 0));
    CHECK(count_series(pts, n, 1) == 0);
    CHECK(!strcmp(xl, "step"));
    double st[256], loss[256], val[256], st2[256];
    for (int r = 0; r < 2; r++) {
        const char *run = r ? b : a;
        int m = jsonl_col(run, "loss_avg", st, loss, 256);
        jsonl_col(run, "val_bpb", st2, val, 256);
        int nt = 0, nv = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(pts[i].label, run) != 0) continue;
            int found = 0;
            for (int j = 0; j < m; j++) {
                if (st[j] != pts[i].x) continue;
                double want = pts[i].panel ? val[j] : loss[j] / log(2.0);
                found = fabs(pts[i].y - want) <= 1e-6 * fabs(want);
            }
            CHECKF(found, "%s panel %d: point (%g, %g) is not in metrics.jsonl", run, pts[i].panel,
                   pts[i].x, pts[i].y);
            nt += pts[i].panel == 0;
            nv += pts[i].panel == 1;
        }
        int want_t = 0, want_v = 0;
        for (int j = 0; j < m; j++) {
            want_t += !isnan(loss[j]);
            want_v += !isnan(val[j]);
        }
        CHECKF(nt == want_t && nv == want_v, "%s: %d train and %d val points drawn, the run logged "
               "%d and %d", run, nt, nv, want_t, want_v);
    }
    /* axes: x from 0 to just past the last step; y spans every point after the first tenth
     * of x and reaches down to the lowest */
    for (int p = 0; p < 2; p++) {
        CHECKF(ax[p].xmin == 0 && ax[p].xmax >= 40 && ax[p].xmax < 42, "panel %d x axis %g..%g",
               p, ax[p].xmin, ax[p].xmax);
        double lo = INFINITY;
        for (int i = 0; i < n; i++) {
            if (pts[i].panel != p) continue;
            lo = fmin(lo, pts[i].y);
            if (pts[i].x >= 4)
                CHECKF(pts[i].y >= ax[p].ymin && pts[i].y <= ax[p].ymax, "panel %d: (%g, %g) "
                       "outside y %g..%g", p, pts[i].x, pts[i].y, ax[p].ymin, ax[p].ymax);
        }
        CHECKF(ax[p].ymin < lo && ax[p].ymin > lo - 0.2 * (ax[p].ymax - ax[p].ymin),
               "panel %d: y axis starts at %g, the lowest point is %g", p, ax[p].ymin, lo);
    }

    /* SVG: an SVG document, each run's curves stroked in its own color (tab10 blue, orange) */
    snprintf(cmd, sizeof cmd, DM_CLI " plot %s %s --out %s/p.svg --x tokens", a, b, d);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "plot --out .svg failed (%d): %s", rc, out);
    snprintf(path, sizeof path, "%s/p.svg", d);
    char *svg = t_read_text(path);
    CHECKF(svg && strstr(svg, "<?xml") == svg && strstr(svg, "<svg"), "not an SVG");
    CHECKF(svg && svg_strokes(svg, 31, 119, 180) >= 2 && svg_strokes(svg, 255, 127, 14) >= 2,
           "the two runs' colors are not both drawn");
    free(svg);
    /* --x tokens: x = step x batch_size x seq_len (64 bytes a step) */
    snprintf(path, sizeof path, "%s/p.tsv", d);
    n = read_tsv(path, pts, 4096, ax, xl, sizeof xl);
    double xmax = 0;
    for (int i = 0; i < n; i++) xmax = fmax(xmax, pts[i].x);
    CHECKF(!strcmp(xl, "tokens (bytes)") && xmax == 40 * 64,
           "--x tokens: %s, last x %g", xl, xmax);

    /* --x time: wall time, never going back */
    snprintf(cmd, sizeof cmd, DM_CLI " plot %s --x time", a);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/plot.tsv", a);
    n = read_tsv(path, pts, 4096, ax, xl, sizeof xl);
    CHECKF(!strcmp(xl, "time (s)") && n > 10, "--x time: %s, %d points", xl, n);
    for (int i = 1; i < n; i++)
        if (pts[i].panel == pts[i - 1].panel && !strcmp(pts[i].label, pts[i - 1].label))
            CHECKF(pts[i].x >= pts[i - 1].x, "time goes back at point %d", i);
    snprintf(path, sizeof path, "%s/plot.png", a);
    CHECK(png_size(path, &w, &h) == 0);

    /* bad input: one line, exit 2, no file */
    const char *bad[][2] = {
        {"plot", "missing RUN_DIR"},
        {"plot %s/nothing", "no metrics.jsonl"},
        {"plot %s --out %s/p.jpg", ".png or .svg"},
        {"plot %s --x furlongs", "--x expects"},
    };
    for (int i = 0; i < 4; i++) {
        char c[1024], err[4096];
        snprintf(c, sizeof c, bad[i][0], i == 2 ? a : d, d);
        snprintf(cmd, sizeof cmd, DM_CLI " %s", c);
        rc = t_run(cmd, err, sizeof err);
        printf("  [%d] %s -> %s", rc, c, err);
        CHECKF(rc == 2 && strstr(err, bad[i][1]) && strchr(err, '\n') == err + strlen(err) - 1,
               "%s: exit %d: %s", c, rc, err);
    }
    snprintf(path, sizeof path, "%s/p.jpg", d);
    CHECK(!t_exists(path));
    t_rmtree(d);
}

TEST(plot_ab_control_band_and_no_history) {
    char d[256], cmd[4096], outp[600], out[65536], path[700], xl[128], hist[600];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    /* the repository's history must not move: ab appends only with --history */
    snprintf(hist, sizeof hist, "%s/benches/history.tsv", DM_SOURCE_DIR);
    struct stat before, after;
    int had = stat(hist, &before) == 0;
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab " TINY " --steps 8 --set eval_every=4 "
             "--seeds 1,2 --variant 'hot: lr=0.01'%s", d, dm_fig_available() ? " --plot" : "");
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "sweep failed (%d):\n%s", rc, out);
    CHECKF(!strstr(out, "appended"), "ab appended history rows without --history:\n%s", out);
    if (had) {
        CHECK(stat(hist, &after) == 0);
        CHECKF(after.st_size == before.st_size && after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
               after.st_mtim.tv_nsec == before.st_mtim.tv_nsec, "%s changed", hist);
    }
    if (!dm_fig_available()) {
        t_skip("dormouse was built without PLplot: the history half ran, the plot cannot");
        t_rmtree(d);
        return;
    }
    unsigned w, h;
    snprintf(path, sizeof path, "%s/ab/plot.png", d);
    CHECKF(png_size(path, &w, &h) == 0, "no PNG at %s:\n%s", path, out);
    static point pts[4096];
    axes ax[2];
    snprintf(path, sizeof path, "%s/ab/plot.tsv", d);
    int n = read_tsv(path, pts, 4096, ax, xl, sizeof xl);
    /* every arm and seed: 2 x 2 lines per panel, one band per panel */
    CHECKF(count_series(pts, n, 0) == 8, "%d line series, expected 8", count_series(pts, n, 0));
    CHECKF(count_series(pts, n, 1) == 2, "%d bands, expected 2", count_series(pts, n, 1));
    /* the band: min and max of the two control seeds at each step */
    double st[2][64], v[2][64];
    int nb = 0;
    for (int p = 0; p < 2; p++) {
        for (int k = 0; k < 2; k++) {
            char cell[600];
            snprintf(cell, sizeof cell, "%s/ab/control/seed%d", d, k + 1);
            jsonl_col(cell, p ? "val_bpb" : "loss_avg", st[k], v[k], 64);
        }
        for (int i = 0; i < n; i++) {
            if (!pts[i].band || pts[i].panel != p) continue;
            int j = 0;
            while (j < 64 && st[0][j] != pts[i].x) j++;
            CHECKF(j < 64 && st[1][j] == pts[i].x, "band point at x %g: no such step", pts[i].x);
            if (j == 64) continue;
            double a = p ? v[0][j] : v[0][j] / log(2.0), b = p ? v[1][j] : v[1][j] / log(2.0);
            CHECKF(fabs(pts[i].y - fmin(a, b)) <= 1e-6 && fabs(pts[i].hi - fmax(a, b)) <= 1e-6,
                   "band at step %g: %g..%g, the seeds give %g and %g", pts[i].x, pts[i].y,
                   pts[i].hi, a, b);
            nb++;
        }
    }
    CHECKF(nb == 8 + 2, "%d band points, expected 8 steps of train loss + 2 evaluations", nb);
    /* `dormouse plot AB_DIR` draws the same figure, here as SVG with the band filled */
    snprintf(cmd, sizeof cmd, DM_CLI " plot %s/ab --out %s/ab.svg", d, d);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/ab.svg", d);
    char *svg = t_read_text(path);
    CHECKF(svg && strstr(svg, "fill-opacity:0.2"), "no translucent band in the SVG");
    free(svg);
    t_rmtree(d);
}

TEST(metrics_csv_and_table) {
    char d[256], a[512], b[512], cmd[4096], outp[600], out[65536], path[700];
    t_tmpdir(d, sizeof d);
    snprintf(a, sizeof a, "%s/a", d);
    snprintf(b, sizeof b, "%s/b", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    train(a, "--set steps=6 --set log_every=2 --set eval_every=3");
    train(b, "--set steps=4 --set log_every=1 --set eval_every=0");

    /* CSV: a header, then every line of both runs with every key, empty where a line lacks
     * it; each number reads back as the JSON's */
    snprintf(cmd, sizeof cmd, DM_CLI " metrics %s %s --csv --out %s/m.csv", a, b, d);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "wrote"), "metrics --csv failed (%d): %s", rc, out);
    snprintf(path, sizeof path, "%s/m.csv", d);
    char *csv = t_read_text(path);
    char *save = NULL, *line = csv ? strtok_r(csv, "\n", &save) : NULL;
    CHECKF(line && !strncmp(line, "run,step,loss,loss_avg,lr,", 26), "CSV header: %s",
           line ? line : "(none)");
    char *cols[32];
    int nc = 0;
    char hdr[1024];
    snprintf(hdr, sizeof hdr, "%s", line ? line : "");
    for (char *sv = NULL, *t = strtok_r(hdr, ",", &sv); t && nc < 32; t = strtok_r(NULL, ",", &sv))
        cols[nc++] = t;
    int vcol = -1;
    for (int i = 0; i < nc; i++)
        if (!strcmp(cols[i], "val_bpb")) vcol = i;
    CHECK(vcol > 0);
    int rows[2] = {0, 0}, vals = 0;
    while ((line = strtok_r(NULL, "\n", &save))) {
        /* split keeping empty fields */
        char *f[32];
        int k = 0;
        for (char *p = line; k < 32;) {
            f[k++] = p;
            char *c = strchr(p, ',');
            if (!c) break;
            *c = 0;
            p = c + 1;
        }
        CHECKF(k == nc, "CSV row with %d fields, header has %d", k, nc);
        int r = !strcmp(f[0], b);
        CHECK(r || !strcmp(f[0], a));
        double st[64], v[64];
        for (int c = 1; c < k && c < nc; c++) {
            int m = jsonl_col(r ? b : a, cols[c], st, v, 64);
            double want = rows[r] < m ? v[rows[r]] : NAN;
            if (isnan(want)) CHECKF(f[c][0] == 0, "%s row %d %s: '%s', the run has none", f[0],
                                    rows[r], cols[c], f[c]);
            else CHECKF(strtod(f[c], NULL) == want, "%s row %d %s: %s, the run has %.17g", f[0],
                        rows[r], cols[c], f[c], want);
            vals += c == vcol && f[c][0];
        }
        rows[r]++;
    }
    /* a logs steps 2, 3 (evaluation), 4, 6 (evaluation); b steps 1-4, evaluating at 4 */
    CHECKF(rows[0] == 4 && rows[1] == 4, "CSV rows %d and %d, the runs logged 4 and 4", rows[0],
           rows[1]);
    CHECKF(vals == 3, "%d val_bpb values, the runs evaluated 3 times", vals);
    free(csv);

    /* the table: per run the last step, the loss in nats and bits, the last val BPB */
    snprintf(cmd, sizeof cmd, DM_CLI " metrics %s", a);
    rc = t_run_out(cmd, outp, out, sizeof out);
    double st[64], loss[64], val[64], st2[64];
    int m = jsonl_col(a, "loss_avg", st, loss, 64);
    jsonl_col(a, "val_bpb", st2, val, 64);
    char want[256];
    snprintf(want, sizeof want, "%7.0f  %9.4f  %9.4f  %.4f @6", st[m - 1], loss[m - 1],
             loss[m - 1] / log(2.0), val[m - 1]);
    CHECKF(rc == 0 && strstr(out, want), "table lacks '%s':\n%s", want, out);

    /* a torn last line (a run killed while writing) is left out; a broken one is an error */
    snprintf(cmd, sizeof cmd, "printf '{\"step\": 7, \"lo' >> %s/metrics.jsonl && " DM_CLI
             " metrics %s --csv | wc -l", a, a);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && atoi(out) == 5, "torn line: %s (expected the header and 4 rows)", out);
    snprintf(cmd, sizeof cmd, "printf 'garbage\\n{\"step\": 8}\\n' >> %s/metrics.jsonl && "
             DM_CLI " metrics %s", a, a);
    char err[4096];
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 2 && strstr(err, "is not a JSON object"), "broken line: exit %d: %s", rc, err);
    snprintf(cmd, sizeof cmd, DM_CLI " metrics %s/nothing", d);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 2 && strstr(err, "no metrics.jsonl"), "missing run: exit %d: %s", rc, err);
    t_rmtree(d);
}
