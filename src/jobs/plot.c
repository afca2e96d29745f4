/* plot.c — curves of runs and sweeps drawn as figures (io/figure.h), and `dormouse
 * metrics` (see plot.h). */
#include "jobs/plot.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/stats.h"
#include "io/figure.h"
#include "io/files.h"
#include "io/metrics.h"
#include "jobs/ab.h"

#define MAX_POINTS 80 /* train-loss points per curve: more are averaged into bins */

int dm_plot_x_parse(const char *name) {
    if (!strcmp(name, "step")) return DM_PLOT_X_STEP;
    if (!strcmp(name, "time")) return DM_PLOT_X_TIME;
    if (!strcmp(name, "tokens")) return DM_PLOT_X_TOKENS;
    return -1;
}

/* ---- one run's curves ---------------------------------------------------------------- */

typedef struct {
    int nt, nv;
    double *tstep, *tx, *ty; /* train loss in bits per byte, binned */
    double *vstep, *vx, *vy; /* validation BPB */
} curves;

static void curves_free(curves *c) {
    free(c->tstep), free(c->tx), free(c->ty), free(c->vstep), free(c->vx), free(c->vy);
    memset(c, 0, sizeof *c);
}

/* Bytes per optimizer step of a run (batch_size x seq_len x grad_accum of its
 * config.json); 0 when unknown. */
static double tokens_per_step(const char *dir) {
    char path[4200], err[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *js = dm_read_file(path, err, sizeof err);
    cJSON *o = js ? cJSON_Parse(js) : NULL;
    free(js);
    double v = 1;
    const char *keys[] = {"batch_size", "seq_len", "grad_accum"};
    for (int i = 0; i < 3; i++) {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
        if (cJSON_IsNumber(e) && e->valuedouble > 0) v *= e->valuedouble;
        else if (i < 2) v = 0;
    }
    cJSON_Delete(o);
    return v;
}

/* The curves of the run in dir against x (raw units: steps, seconds, bytes). 0 ok; else
 * a bad-input status. */
static int read_curves(const char *dir, int x, curves *c, dm_status *st) {
    char path[4200], err[4400];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (access(path, F_OK) != 0)
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s has no metrics.jsonl (not a run directory?)",
                       dir);
    dm_metrics m;
    if (dm_metrics_read(path, &m, err, sizeof err))
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    int cs = dm_metrics_col(&m, "step"), cl = dm_metrics_col(&m, "loss_avg"),
        cl1 = dm_metrics_col(&m, "loss"), cv = dm_metrics_col(&m, "val_bpb"),
        ce = dm_metrics_col(&m, "elapsed_s");
    if (cl < 0) cl = cl1;
    double tps = x == DM_PLOT_X_TOKENS ? tokens_per_step(dir) : 0;
    if (x == DM_PLOT_X_TOKENS && !(tps > 0)) {
        dm_metrics_free(&m);
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s/config.json gives no batch_size and seq_len "
                       "(needed for --x tokens)", dir);
    }
    int n = m.n_rows;
    double *xs = malloc((size_t)(n ? n : 1) * sizeof *xs);
    c->tstep = malloc((size_t)(n ? n : 1) * sizeof(double));
    c->tx = malloc((size_t)(n ? n : 1) * sizeof(double));
    c->ty = malloc((size_t)(n ? n : 1) * sizeof(double));
    c->vstep = malloc((size_t)(n ? n : 1) * sizeof(double));
    c->vx = malloc((size_t)(n ? n : 1) * sizeof(double));
    c->vy = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!xs || !c->tstep || !c->tx || !c->ty || !c->vstep || !c->vx || !c->vy) {
        free(xs);
        curves_free(c);
        dm_metrics_free(&m);
        return dm_fail(st, DM_JOB_FAILED, "out of memory");
    }
    /* x of every row; elapsed_s starts again at 0 on a resume: continue it */
    double offset = 0, prev = 0;
    for (int r = 0; r < n; r++) {
        double s = dm_metrics_at(&m, r, cs);
        if (x == DM_PLOT_X_STEP) xs[r] = s;
        else if (x == DM_PLOT_X_TOKENS) xs[r] = s * tps;
        else {
            double e = dm_metrics_at(&m, r, ce);
            if (e < prev) offset += prev;
            prev = e;
            xs[r] = e + offset;
        }
    }
    /* train loss: rows with a loss, averaged into at most MAX_POINTS bins, each row
     * weighted by the steps it covers */
    int nl = 0;
    for (int r = 0; r < n; r++) nl += !isnan(dm_metrics_at(&m, r, cl));
    int per = (nl + MAX_POINTS - 1) / MAX_POINTS, in = 0;
    double wsum = 0, lsum = 0, last_step = 0;
    for (int r = 0; r < n; r++) {
        double s = dm_metrics_at(&m, r, cs), l = dm_metrics_at(&m, r, cl);
        if (isnan(l) || isnan(s) || isnan(xs[r])) continue;
        double w = s - last_step > 0 ? s - last_step : 1;
        last_step = s;
        wsum += w;
        lsum += w * l;
        if (++in == per || r == n - 1) {
            c->tstep[c->nt] = s;
            c->tx[c->nt] = xs[r];
            c->ty[c->nt] = lsum / wsum / log(2.0);
            c->nt++;
            in = 0;
            wsum = lsum = 0;
        }
    }
    if (in) { /* a last bin cut short by rows without a loss */
        c->tstep[c->nt] = last_step;
        c->tx[c->nt] = c->nt ? c->tx[c->nt - 1] : 0;
        c->ty[c->nt] = lsum / wsum / log(2.0);
        c->nt++;
    }
    for (int r = 0; r < n; r++) {
        double v = dm_metrics_at(&m, r, cv), s = dm_metrics_at(&m, r, cs);
        if (isnan(v) || isnan(s) || isnan(xs[r])) continue;
        c->vstep[c->nv] = s;
        c->vx[c->nv] = xs[r];
        c->vy[c->nv] = v;
        c->nv++;
    }
    free(xs);
    dm_metrics_free(&m);
    if (c->nt + c->nv == 0) {
        curves_free(c);
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s/metrics.jsonl holds no logged step yet", dir);
    }
    return 0;
}

/* ---- figures ------------------------------------------------------------------------ */

static void fig_frame(dm_figure *f, int x) {
    f->n_panels = 2;
    snprintf(f->ptitle[0], sizeof f->ptitle[0], "train loss (mean of each logged interval)");
    snprintf(f->ylabel[0], sizeof f->ylabel[0], "bits per byte");
    snprintf(f->ptitle[1], sizeof f->ptitle[1], "validation");
    snprintf(f->ylabel[1], sizeof f->ylabel[1], "bits per byte");
    snprintf(f->xlabel, sizeof f->xlabel, "%s",
             x == DM_PLOT_X_STEP ? "step" : x == DM_PLOT_X_TIME ? "time" : "tokens (bytes)");
    snprintf(f->note, sizeof f->note, "train loss in bits = nats / ln 2. The y axes fit the "
             "curves after the first 10%% of x (earlier points are clipped).");
}

/* Scale x to readable units (minutes, millions of bytes, ...) and say so in the label. */
static void fig_units(dm_figure *f, int x) {
    double mx = 0, k = 1;
    const char *unit = NULL;
    for (int i = 0; i < f->n_series; i++)
        for (int j = 0; j < f->series[i].n; j++) mx = fmax(mx, f->series[i].x[j]);
    if (x == DM_PLOT_X_TIME) {
        if (mx >= 2 * 3600) k = 3600, unit = "time (h)";
        else if (mx >= 300) k = 60, unit = "time (min)";
        else unit = "time (s)";
    } else if (x == DM_PLOT_X_TOKENS) {
        if (mx >= 1e9) k = 1e9, unit = "tokens (billions of bytes)";
        else if (mx >= 1e6) k = 1e6, unit = "tokens (millions of bytes)";
        else if (mx >= 1e4) k = 1e3, unit = "tokens (thousands of bytes)";
    }
    if (unit) snprintf(f->xlabel, sizeof f->xlabel, "%s", unit);
    for (int i = 0; i < f->n_series; i++)
        for (int j = 0; j < f->series[i].n; j++) f->series[i].x[j] /= k;
    for (int i = 0; i < f->n_bands; i++)
        for (int j = 0; j < f->bands[i].n; j++) f->bands[i].x[j] /= k;
}

/* Add a run's two curves, named name, in color c; the legend shows label ("": none) for
 * the train curve. */
static int fig_add_run(dm_figure *f, const curves *c, const char *name, const char *label,
                       int color, double width) {
    dm_fig_series *s = dm_fig_add_series(f, 0, c->nt);
    if (!s) return 1;
    snprintf(s->label, sizeof s->label, "%s", label);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->color = color;
    s->width = width;
    memcpy(s->x, c->tx, (size_t)c->nt * sizeof *s->x);
    memcpy(s->y, c->ty, (size_t)c->nt * sizeof *s->y);
    if (!(s = dm_fig_add_series(f, 1, c->nv))) return 1;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->color = color;
    s->width = width;
    s->markers = 1;
    memcpy(s->x, c->vx, (size_t)c->nv * sizeof *s->x);
    memcpy(s->y, c->vy, (size_t)c->nv * sizeof *s->y);
    return 0;
}

/* Write the TSV and draw the figure: out, and out with .tsv for its extension. */
static dm_job_code fig_write(dm_figure *f, int x, const char *out, const dm_job_io *io,
                             dm_status *st) {
    char err[8192], tsv[4200];
    const char *ext = strrchr(out, '.');
    if (!ext || (strcmp(ext, ".png") && strcmp(ext, ".svg")))
        return dm_fail(st, DM_JOB_BAD_INPUT, "--out %s: the plot file must end in .png or .svg",
                       out);
    fig_units(f, x);
    if (dm_fig_ranges(f)) return dm_fail(st, DM_JOB_BAD_INPUT, "nothing to plot");
    int rc = dm_fig_render(f, out, err, sizeof err);
    if (rc) return dm_fail(st, rc == 2 ? DM_JOB_BAD_INPUT : DM_JOB_FAILED, "%s", err);
    snprintf(tsv, sizeof tsv, "%.*s.tsv", (int)(ext - out), out);
    if (dm_fig_write_tsv(f, tsv, err, sizeof err)) {
        unlink(out);
        return dm_fail(st, DM_JOB_FAILED, "%s", err);
    }
    dm_job_note(io, "wrote %s (%d curves; the points drawn are in %s)\n", out,
                f->n_series, tsv);
    return DM_JOB_OK;
}

static int is_sweep(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/ab.json", dir);
    return access(p, F_OK) == 0;
}

/* dir without trailing slashes, for labels */
static void clean_label(char *buf, size_t n, const char *dir) {
    snprintf(buf, n, "%s", dir);
    size_t l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/') buf[--l] = 0;
}

dm_status dm_plot(const dm_plot_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    if (a->n_runs < 1) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "no run directory to plot");
        return st;
    }
    for (int i = 0; i < a->n_runs; i++)
        if (is_sweep(a->runs[i])) {
            if (a->n_runs > 1)
                dm_fail(&st, DM_JOB_BAD_INPUT, "%s is an A/B sweep: plot it on its own",
                        a->runs[i]);
            else return dm_plot_ab(a->runs[0], a->out, a->x, io);
            return st;
        }
    char out[4200];
    if (a->out) snprintf(out, sizeof out, "%s", a->out);
    else if (a->n_runs == 1) snprintf(out, sizeof out, "%s/plot.png", a->runs[0]);
    else /* several: beside the first run's own plot, never in the current directory */
        snprintf(out, sizeof out, "%s/plot-%d-runs.png", a->runs[0], a->n_runs);
    dm_figure f = {0};
    fig_frame(&f, a->x);
    snprintf(f.title, sizeof f.title, "dormouse: %d run%s", a->n_runs,
             a->n_runs == 1 ? "" : "s");
    for (int i = 0; i < a->n_runs && !st.code; i++) {
        curves c;
        char label[160];
        if (read_curves(a->runs[i], a->x, &c, &st)) break;
        clean_label(label, sizeof label, a->runs[i]);
        if (fig_add_run(&f, &c, label, label, i, 1.6)) dm_fail(&st, DM_JOB_FAILED, "out of memory");
        curves_free(&c);
    }
    if (!st.code) fig_write(&f, a->x, out, io, &st);
    dm_fig_free(&f);
    return st;
}

/* The spread of the control's curves: min and max over the cells that reached each point
 * (the cells of one sweep log the same steps); x the mean of theirs. A band needs two
 * cells. */
static int add_band(dm_figure *f, int panel, const curves *cells, int n, int color,
                    const char *name, const char *label) {
    int len = -1, have = 0;
    for (int k = 0; k < n; k++) {
        int m = panel ? cells[k].nv : cells[k].nt;
        if (!m) continue;
        have++;
        if (len < 0 || m < len) len = m;
    }
    if (have < 2 || len < 1) return 0;
    dm_fig_band *b = dm_fig_add_band(f, panel, len);
    if (!b) return 1;
    snprintf(b->label, sizeof b->label, "%.150s", label);
    snprintf(b->name, sizeof b->name, "%.150s", name);
    b->color = color;
    for (int j = 0; j < len; j++) {
        double lo = INFINITY, hi = -INFINITY, xs = 0;
        int cnt = 0;
        for (int k = 0; k < n; k++) {
            int m = panel ? cells[k].nv : cells[k].nt;
            if (!m) continue;
            double y = panel ? cells[k].vy[j] : cells[k].ty[j];
            lo = fmin(lo, y);
            hi = fmax(hi, y);
            xs += panel ? cells[k].vx[j] : cells[k].tx[j];
            cnt++;
        }
        b->x[j] = xs / cnt;
        b->lo[j] = lo;
        b->hi[j] = hi;
    }
    return 0;
}

dm_status dm_plot_ab(const char *dir, const char *out_arg, int x, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    char err[8192], out[4200], cell[4400], label[200], seeds[512];
    dm_ab_spec *s = malloc(sizeof *s);
    curves *cells = calloc(DM_AB_MAX_ARMS * DM_AB_MAX_SEEDS, sizeof *cells);
    dm_figure f = {0};
    int lrc = s && cells ? dm_ab_load_spec(dir, s, err, sizeof err) : -1;
    if (lrc < 0) dm_fail(&st, DM_JOB_FAILED, "out of memory");
    else if (lrc) dm_fail(&st, lrc == 2 ? DM_JOB_BAD_INPUT : DM_JOB_FAILED, "%s", err);
    if (st.code) goto done;
    snprintf(out, sizeof out, "%s", out_arg ? out_arg : "");
    if (!out_arg) snprintf(out, sizeof out, "%s/plot.png", dir);
    fig_frame(&f, x);
    dm_ab_seeds_text(s, seeds, sizeof seeds);
    char span[64]; /* a time-budget sweep's cells fix their own steps */
    if (s->arms[0].cfg.time_budget > 0)
        snprintf(span, sizeof span, "a time budget of %ld s", s->arms[0].cfg.time_budget);
    else snprintf(span, sizeof span, "%d steps", s->steps);
    snprintf(f.title, sizeof f.title, "A/B %.100s: control + %d variant%s, seeds %.40s, %.40s", dir,
             s->n_arms - 1, s->n_arms == 2 ? "" : "s", seeds, span);
    int drawn = 0;
    for (int a = 0; a < s->n_arms; a++)
        for (int k = 0; k < s->n_seeds; k++) {
            curves *c = &cells[a * DM_AB_MAX_SEEDS + k];
            dm_status cst;
            dm_ab_cell_dir(s, a, k, cell, sizeof cell);
            if (read_curves(cell, x, c, &cst)) continue; /* not run yet */
            drawn++;
        }
    if (!drawn) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s: no cell has logged a step yet", dir);
        goto done;
    }
    /* the band under everything, then the lines: each arm one color, the legend naming
     * the arm once */
    snprintf(label, sizeof label, "control spread (min-max of %d seeds)", s->n_seeds);
    if (add_band(&f, 0, cells, s->n_seeds, 0, "control spread", label) ||
        add_band(&f, 1, cells, s->n_seeds, 0, "control spread", "")) {
        dm_fail(&st, DM_JOB_FAILED, "out of memory");
        goto done;
    }
    for (int a = 0; a < s->n_arms; a++) {
        int first = 1;
        for (int k = 0; k < s->n_seeds; k++) {
            curves *c = &cells[a * DM_AB_MAX_SEEDS + k];
            if (c->nt + c->nv == 0) continue;
            char name[160];
            snprintf(name, sizeof name, "%s/seed%" PRIu64, s->arms[a].name, s->seeds[k]);
            if (first) snprintf(label, sizeof label, "%s%s%.100s", s->arms[a].name,
                                s->arms[a].overrides[0] ? ": " : "", s->arms[a].overrides);
            if (fig_add_run(&f, c, name, first ? label : "", a, 1.1)) {
                dm_fail(&st, DM_JOB_FAILED, "out of memory");
                goto done;
            }
            first = 0;
        }
    }
    fig_write(&f, x, out, io, &st);
done:
    for (int i = 0; cells && i < DM_AB_MAX_ARMS * DM_AB_MAX_SEEDS; i++) curves_free(&cells[i]);
    free(cells);
    free(s);
    dm_fig_free(&f);
    return st;
}

/* ---- dormouse metrics --------------------------------------------------------------- */

/* The run directories of the arguments: a sweep directory stands for its cells that
 * have metrics. *n and the malloc'd paths in *dirs; 0 ok, else a status. */
static int add_dir(char ***dirs, int *n, int *cap, const char *d) {
    if (*n == *cap) {
        char **nd = realloc(*dirs, (size_t)(*cap = *cap ? 2 * *cap : 16) * sizeof **dirs);
        if (!nd) return 1;
        *dirs = nd;
    }
    return !((*dirs)[(*n)++] = strdup(d));
}

static int expand_runs(const char *const *runs, int n_runs, char ***dirs, int *n,
                       dm_status *st) {
    int cap = 0, oom = 0;
    *n = 0;
    *dirs = NULL;
    dm_ab_spec *s = malloc(sizeof *s);
    char err[8192], cell[4400], p[4500];
    for (int i = 0; i < n_runs && s && !oom; i++) {
        if (!is_sweep(runs[i])) {
            oom = add_dir(dirs, n, &cap, runs[i]);
            continue;
        }
        if (dm_ab_load_spec(runs[i], s, err, sizeof err)) {
            free(s);
            return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
        }
        for (int a = 0; a < s->n_arms && !oom; a++)
            for (int k = 0; k < s->n_seeds && !oom; k++) {
                dm_ab_cell_dir(s, a, k, cell, sizeof cell);
                snprintf(p, sizeof p, "%s/metrics.jsonl", cell);
                if (access(p, F_OK) == 0) oom = add_dir(dirs, n, &cap, cell);
            }
    }
    if (!s || oom) {
        free(s);
        return dm_fail(st, DM_JOB_FAILED, "out of memory");
    }
    free(s);
    return 0;
}

static void fmt_time(char *buf, size_t n, double s) {
    if (isnan(s)) snprintf(buf, n, "-");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

/* One line of the table for a run. */
static void table_row(FILE *o, const char *dir, const dm_metrics *m, int w) {
    int cs = dm_metrics_col(m, "step"), cl = dm_metrics_col(m, "loss_avg"),
        cv = dm_metrics_col(m, "val_bpb"), ct = dm_metrics_col(m, "tokens_per_s");
    if (cl < 0) cl = dm_metrics_col(m, "loss");
    double step = NAN, loss = NAN, val = NAN, vstep = NAN, best = NAN, bstep = NAN;
    double *tps = malloc((size_t)(m->n_rows ? m->n_rows : 1) * sizeof *tps);
    int nt = 0;
    for (int r = 0; r < m->n_rows; r++) {
        double s = dm_metrics_at(m, r, cs), l = dm_metrics_at(m, r, cl),
               v = dm_metrics_at(m, r, cv), t = dm_metrics_at(m, r, ct);
        if (!isnan(s)) step = s;
        if (!isnan(l)) loss = l;
        if (!isnan(v)) {
            val = v, vstep = s;
            if (isnan(best) || v < best) best = v, bstep = s;
        }
        if (tps && !isnan(t)) tps[nt++] = t;
    }
    double time = dm_metrics_wall(m);
    double med = tps ? dm_median(tps, nt, NULL) : NAN;
    free(tps);
    char vb[48] = "-", bb[48] = "-", tb[32];
    if (!isnan(val)) snprintf(vb, sizeof vb, "%.4f @%.0f", val, vstep);
    if (!isnan(best)) snprintf(bb, sizeof bb, "%.4f @%.0f", best, bstep);
    fmt_time(tb, sizeof tb, m->n_rows ? time : NAN);
    fprintf(o, "%-*s  %7.0f  %9.4f  %9.4f  %-15s  %-15s  %9.0f  %s\n", w, dir, step, loss,
            loss / log(2.0), vb, bb, med, tb);
}

dm_status dm_metrics_job(const dm_metrics_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    char **dirs = NULL, err[8192], path[4500];
    int n = 0, w = 3;
    if (a->n_runs < 1) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "no run directory given");
        return st;
    }
    if (expand_runs(a->runs, a->n_runs, &dirs, &n, &st)) return st;
    dm_metrics *ms = calloc((size_t)(n ? n : 1), sizeof *ms);
    if (!ms) dm_fail(&st, DM_JOB_FAILED, "out of memory");
    if (!st.code && n == 0) dm_fail(&st, DM_JOB_BAD_INPUT, "no cell of the sweep has metrics yet");
    for (int i = 0; i < n && !st.code; i++) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", dirs[i]);
        if (access(path, F_OK) != 0)
            dm_fail(&st, DM_JOB_BAD_INPUT, "%s has no metrics.jsonl (not a run directory?)",
                    dirs[i]);
        else if (dm_metrics_read(path, &ms[i], err, sizeof err))
            dm_fail(&st, DM_JOB_BAD_INPUT, "%s", err);
        if ((int)strlen(dirs[i]) > w) w = (int)strlen(dirs[i]);
    }
    dm_note_buf nb = {0};
    FILE *o = st.code ? NULL : dm_note_open(&nb);
    if (!st.code && !o) dm_fail(&st, DM_JOB_FAILED, "out of memory");
    if (o && a->csv) {
        /* the union of the runs' columns, in order of first appearance */
        const char **cols = NULL;
        int nc = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < ms[i].n_cols; c++) {
                int seen = 0;
                for (int j = 0; j < nc && !seen; j++) seen = !strcmp(cols[j], ms[i].cols[c]);
                if (seen) continue;
                const char **nc2 = realloc(cols, (size_t)(nc + 1) * sizeof *cols);
                if (!nc2) break;
                cols = nc2;
                cols[nc++] = ms[i].cols[c];
            }
        dm_metrics_csv_header(o, cols, nc);
        for (int i = 0; i < n; i++) dm_metrics_csv_rows(o, dirs[i], &ms[i], cols, nc);
        free(cols);
    } else if (o) {
        fprintf(o, "%-*s  %7s  %9s  %9s  %-15s  %-15s  %9s  %s\n", w, "run", "step",
                "loss nats", "loss bits", "val bpb @step", "best val @step", "tokens/s", "time");
        for (int i = 0; i < n; i++) table_row(o, dirs[i], &ms[i], w);
    }
    if (o && a->out) {
        fclose(nb.f);
        nb.f = NULL;
        if (dm_write_file_atomic(a->out, nb.buf ? nb.buf : "", err, sizeof err))
            dm_fail(&st, DM_JOB_FAILED, "%s", err);
        else dm_job_note(io, "wrote %s (%d run%s)\n", a->out, n, n == 1 ? "" : "s");
        free(nb.buf);
    } else if (o) {
        dm_note_close(&nb, io);
    }
    for (int i = 0; i < n; i++) {
        if (ms) dm_metrics_free(&ms[i]);
        free(dirs[i]);
    }
    free(ms);
    free(dirs);
    return st;
}
