/* figure.c — figures of training curves: axis ranges, the TSV of what is drawn, and the
 * drawing (see figure.h).
 *
 * Why PLplot: a plot is a C library call away (dormouse links it; no second program, no
 * script to generate, no Python), it is a well-kept Debian package (libplplot-dev) with a
 * cairo driver (plplot-driver-cairo) that writes antialiased PNG and SVG with real fonts,
 * and it draws what we need: axes with ticks and labels, clipped polylines, filled
 * translucent bands, legends. gnuplot would mean piping a script into another process
 * and parsing its failures; hand-made axes would be a plotting library of our own.
 *
 * PLplot keeps its state in process globals and ends the process on a fatal error
 * (plexit), so a figure is drawn in a child process: its state dies with it, a failure
 * comes back as a message through a pipe, and this process never exits on PLplot's
 * behalf. */
#include "io/figure.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/files.h"

#ifdef DM_HAVE_PLPLOT
#include <plplot.h>
#endif

/* ---- building ---------------------------------------------------------------------- */

dm_fig_series *dm_fig_add_series(dm_figure *f, int panel, int n) {
    dm_fig_series *s = realloc(f->series, (size_t)(f->n_series + 1) * sizeof *s);
    if (!s) return NULL;
    f->series = s;
    s = &f->series[f->n_series];
    memset(s, 0, sizeof *s);
    s->panel = panel;
    s->n = n;
    s->x = malloc((size_t)(n ? n : 1) * sizeof *s->x);
    s->y = malloc((size_t)(n ? n : 1) * sizeof *s->y);
    if (!s->x || !s->y) {
        free(s->x);
        free(s->y);
        return NULL;
    }
    f->n_series++;
    return s;
}

dm_fig_band *dm_fig_add_band(dm_figure *f, int panel, int n) {
    dm_fig_band *b = realloc(f->bands, (size_t)(f->n_bands + 1) * sizeof *b);
    if (!b) return NULL;
    f->bands = b;
    b = &f->bands[f->n_bands];
    memset(b, 0, sizeof *b);
    b->panel = panel;
    b->n = n;
    b->x = malloc((size_t)(n ? n : 1) * sizeof *b->x);
    b->lo = malloc((size_t)(n ? n : 1) * sizeof *b->lo);
    b->hi = malloc((size_t)(n ? n : 1) * sizeof *b->hi);
    if (!b->x || !b->lo || !b->hi) {
        free(b->x);
        free(b->lo);
        free(b->hi);
        return NULL;
    }
    f->n_bands++;
    return b;
}

void dm_fig_free(dm_figure *f) {
    for (int i = 0; i < f->n_series; i++) {
        free(f->series[i].x);
        free(f->series[i].y);
    }
    for (int i = 0; i < f->n_bands; i++) {
        free(f->bands[i].x);
        free(f->bands[i].lo);
        free(f->bands[i].hi);
    }
    free(f->series);
    free(f->bands);
    f->series = NULL;
    f->bands = NULL;
    f->n_series = f->n_bands = 0;
}

/* ---- axis ranges ------------------------------------------------------------------- */

static void pad(double *lo, double *hi) {
    double span = *hi - *lo;
    if (!(span > 0)) span = fabs(*lo) > 0 ? fabs(*lo) : 1; /* one value: +-4% of it */
    *lo -= 0.04 * span;
    *hi += 0.04 * span;
}

int dm_fig_ranges(dm_figure *f) {
    double x0 = INFINITY, x1 = -INFINITY;
    for (int i = 0; i < f->n_series; i++)
        for (int j = 0; j < f->series[i].n; j++)
            if (isfinite(f->series[i].x[j]) && isfinite(f->series[i].y[j])) {
                x0 = fmin(x0, f->series[i].x[j]);
                x1 = fmax(x1, f->series[i].x[j]);
            }
    for (int i = 0; i < f->n_bands; i++)
        for (int j = 0; j < f->bands[i].n; j++) {
            x0 = fmin(x0, f->bands[i].x[j]);
            x1 = fmax(x1, f->bands[i].x[j]);
        }
    if (!(x0 <= x1)) return 1;
    /* curves of steps, bytes and time start at 0: show it; a little room on the right
     * keeps the last marker off the frame */
    f->xmin = x0 >= 0 ? 0 : x0;
    f->xmax = x1 > f->xmin ? x1 + 0.015 * (x1 - f->xmin) : f->xmin + 1;
    double late = f->xmin + 0.1 * (x1 - f->xmin); /* y maxima count from here on */
    for (int p = 0; p < f->n_panels; p++) {
        double lo = INFINITY, hi = -INFINITY, hi_all = -INFINITY;
        for (int i = 0; i < f->n_series; i++) {
            const dm_fig_series *s = &f->series[i];
            if (s->panel != p) continue;
            for (int j = 0; j < s->n; j++) {
                if (!isfinite(s->x[j]) || !isfinite(s->y[j])) continue;
                lo = fmin(lo, s->y[j]);
                hi_all = fmax(hi_all, s->y[j]);
                if (s->x[j] >= late) hi = fmax(hi, s->y[j]);
            }
        }
        for (int i = 0; i < f->n_bands; i++) {
            const dm_fig_band *b = &f->bands[i];
            if (b->panel != p) continue;
            for (int j = 0; j < b->n; j++) {
                lo = fmin(lo, b->lo[j]);
                hi_all = fmax(hi_all, b->hi[j]);
                if (b->x[j] >= late) hi = fmax(hi, b->hi[j]);
            }
        }
        if (!(hi >= lo)) hi = hi_all; /* every point is early: keep them all */
        if (!(lo <= hi)) lo = 0, hi = 1; /* an empty panel */
        pad(&lo, &hi);
        f->ymin[p] = lo;
        f->ymax[p] = hi;
    }
    return 0;
}

/* ---- the TSV ----------------------------------------------------------------------- */

/* text without tabs and line breaks (a TSV field) */
static void tsv_text(FILE *o, const char *s) {
    for (; *s; s++) fputc(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s, o);
}

int dm_fig_write_tsv(const dm_figure *f, const char *path, char *err, size_t errlen) {
    char *buf = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&buf, &len);
    if (!o) {
        snprintf(err, errlen, "out of memory writing %s", path);
        return 1;
    }
    fputs("# ", o);
    tsv_text(o, f->title);
    fputs("\n# x: ", o);
    tsv_text(o, f->xlabel);
    fputc('\n', o);
    for (int p = 0; p < f->n_panels; p++) {
        fprintf(o, "#axes\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t", p, f->xmin, f->xmax, f->ymin[p],
                f->ymax[p]);
        tsv_text(o, f->ptitle[p]);
        fputs(" (", o);
        tsv_text(o, f->ylabel[p]);
        fputs(")\n", o);
    }
    fputs("panel\tkind\tlabel\tx\ty\ty_hi\n", o);
    for (int i = 0; i < f->n_bands; i++) {
        const dm_fig_band *b = &f->bands[i];
        for (int j = 0; j < b->n; j++) {
            fprintf(o, "%d\tband\t", b->panel);
            tsv_text(o, b->name[0] ? b->name : b->label);
            fprintf(o, "\t%.9g\t%.9g\t%.9g\n", b->x[j], b->lo[j], b->hi[j]);
        }
    }
    for (int i = 0; i < f->n_series; i++) {
        const dm_fig_series *s = &f->series[i];
        for (int j = 0; j < s->n; j++) {
            fprintf(o, "%d\tline\t", s->panel);
            tsv_text(o, s->name[0] ? s->name : s->label);
            fprintf(o, "\t%.9g\t%.9g\t\n", s->x[j], s->y[j]);
        }
    }
    fclose(o);
    int rc = buf ? dm_write_file_atomic(path, buf, err, errlen) : 1;
    if (!buf) snprintf(err, errlen, "out of memory writing %s", path);
    free(buf);
    return rc;
}

/* ---- drawing ----------------------------------------------------------------------- */

int dm_fig_available(void) {
#ifdef DM_HAVE_PLPLOT
    return 1;
#else
    return 0;
#endif
}

#ifdef DM_HAVE_PLPLOT

/* the palette: background, ink, grid, then the series colors (matplotlib's "tab10", which
 * readers know from papers), then the same colors translucent for the bands */
enum { C_BG, C_INK, C_GRID, C_SERIES, C_BAND = C_SERIES + DM_FIG_COLORS,
       C_N = C_BAND + DM_FIG_COLORS };
static const int PALETTE[C_BAND][3] = {
    {255, 255, 255}, {30, 30, 30}, {225, 225, 225},
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
    {140, 86, 75}, {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
};
#define BAND_ALPHA 0.22
#define VP_LEFT 0.095
#define VP_RIGHT 0.975

/* PLplot reads '#' as its text escape: a literal one is "##" */
static void pl_text(char *out, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '#') out[k++] = '#';
        out[k++] = *s;
    }
    out[k] = 0;
}

static int wrap(int c) { return ((c % DM_FIG_COLORS) + DM_FIG_COLORS) % DM_FIG_COLORS; }

/* One panel: grid, bands, lines, axes, labels. */
static void draw_panel(const dm_figure *f, int p, double top, double bottom) {
    char t[512];
    plvpor(VP_LEFT, VP_RIGHT, bottom, top);
    plwind(f->xmin, f->xmax, f->ymin[p], f->ymax[p]);
    /* grid under everything */
    plcol0(C_GRID);
    plwidth(1);
    plbox("g", 0, 0, "g", 0, 0);
    for (int i = 0; i < f->n_bands; i++) {
        const dm_fig_band *b = &f->bands[i];
        if (b->panel != p || b->n < 1) continue;
        PLFLT *px = malloc(2 * (size_t)b->n * sizeof *px), *py = malloc(2 * (size_t)b->n * sizeof *py);
        if (px && py) {
            for (int j = 0; j < b->n; j++) { /* along lo, back along hi */
                px[j] = b->x[j];
                py[j] = b->lo[j];
                px[2 * b->n - 1 - j] = b->x[j];
                py[2 * b->n - 1 - j] = b->hi[j];
            }
            plcol0(C_BAND + wrap(b->color));
            plfill(2 * b->n, px, py);
        }
        free(px);
        free(py);
    }
    for (int i = 0; i < f->n_series; i++) {
        const dm_fig_series *s = &f->series[i];
        if (s->panel != p || s->n < 1) continue;
        plcol0(C_SERIES + wrap(s->color));
        plwidth(s->width > 0 ? s->width : 1.6);
        pllsty(s->dashed ? 3 : 1);
        if (s->n > 1) plline(s->n, s->x, s->y);
        if (s->markers || s->n == 1) { /* a filled dot, smaller than the text */
            plschr(0, 0.45);
            plstring(s->n, s->x, s->y, "\u25CF");
            plschr(0, 0.85);
        }
    }
    pllsty(1);
    plwidth(1);
    plcol0(C_INK);
    plbox(p == f->n_panels - 1 ? "bcnst" : "bcst", 0, 0, "bcnstv", 0, 0);
    pl_text(t, sizeof t, f->ylabel[p]);
    plmtex("l", 6.0, 0.5, 0.5, t); /* clear of tick labels of five characters */
    pl_text(t, sizeof t, f->ptitle[p]);
    plmtex("t", 0.8, 0.0, 0.0, t);
    if (p == f->n_panels - 1) {
        pl_text(t, sizeof t, f->xlabel);
        plmtex("b", 3.0, 0.5, 0.5, t);
    }
}

/* The legend, in the top right corner of the top panel (where falling curves leave
 * room), on a white box: one entry per labelled band and series. */
static void draw_legend(const dm_figure *f, double top, double bottom) {
    int n = 0;
    for (int i = 0; i < f->n_series; i++) n += f->series[i].label[0] != 0;
    for (int i = 0; i < f->n_bands; i++) n += f->bands[i].label[0] != 0;
    if (!n) return;
    PLINT *opt = calloc((size_t)n, sizeof *opt), *tc = calloc((size_t)n, sizeof *tc),
          *lc = calloc((size_t)n, sizeof *lc), *ls = calloc((size_t)n, sizeof *ls),
          *bc = calloc((size_t)n, sizeof *bc), *bp = calloc((size_t)n, sizeof *bp),
          *sc = calloc((size_t)n, sizeof *sc), *sn = calloc((size_t)n, sizeof *sn);
    PLFLT *lw = calloc((size_t)n, sizeof *lw), *bs = calloc((size_t)n, sizeof *bs),
          *bw = calloc((size_t)n, sizeof *bw), *ss = calloc((size_t)n, sizeof *ss);
    char **text = calloc((size_t)n, sizeof *text);
    const char **sym = calloc((size_t)n, sizeof *sym);
    int k = 0;
    if (opt && tc && lc && ls && bc && bp && sc && sn && lw && bs && bw && ss && text && sym) {
        for (int i = 0; i < f->n_bands; i++) {
            const dm_fig_band *b = &f->bands[i];
            if (!b->label[0] || !(text[k] = malloc(2 * sizeof b->label + 1))) continue;
            pl_text(text[k], 2 * sizeof b->label + 1, b->label);
            opt[k] = PL_LEGEND_COLOR_BOX;
            tc[k] = C_INK;
            bc[k] = C_BAND + wrap(b->color);
            bs[k] = 0.8;
            bw[k] = 1;
            sym[k] = "";
            k++;
        }
        for (int i = 0; i < f->n_series; i++) {
            const dm_fig_series *s = &f->series[i];
            if (!s->label[0] || !(text[k] = malloc(2 * sizeof s->label + 1))) continue;
            pl_text(text[k], 2 * sizeof s->label + 1, s->label);
            opt[k] = PL_LEGEND_LINE;
            tc[k] = C_INK;
            lc[k] = sc[k] = C_SERIES + wrap(s->color);
            ls[k] = s->dashed ? 3 : 1;
            lw[k] = s->width > 0 ? s->width * 1.5 : 2.4;
            sym[k] = "";
            k++;
        }
        plvpor(VP_LEFT, VP_RIGHT, bottom, top);
        plwind(0, 1, 0, 1);
        PLFLT w, h;
        pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
                 PL_POSITION_VIEWPORT | PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE,
                 0.01, 0.02, 0.05, C_BG, C_GRID, 1, 0, 0, k, opt, 0.6, 0.75, 1.7, 0.0, tc,
                 (const char *const *)text, bc, bp, bs, bw, lc, ls, lw, sc, ss, sn, sym);
    }
    for (int i = 0; text && i < k; i++) free(text[i]);
    free(opt), free(tc), free(lc), free(ls), free(bc), free(bp), free(sc), free(sn);
    free(lw), free(bs), free(bw), free(ss), free(text), free(sym);
}

static int plot_exit(PLCHAR_VECTOR msg) {
    fprintf(stderr, "PLplot: %s\n", msg);
    fflush(stderr);
    _exit(3);
}

/* The child: draw f to path with device dev; PLplot's own complaints and ours go to the
 * pipe `fd`. Exits 0 when the file is written. */
static void child_draw(const dm_figure *f, const char *dev, const char *path, int fd) {
    dup2(fd, 2);
    dup2(fd, 1);
    const char *menu_buf[128], *dev_buf[128], **menus = menu_buf, **devs = dev_buf;
    int ndev = 128; /* in: the room of the caller's arrays; out: the devices */
    plgDevs(&menus, &devs, &ndev);
    int found = 0;
    for (int i = 0; i < ndev; i++) found |= !strcmp(devs[i], dev);
    if (!found) {
        fprintf(stderr, "PLplot has no %s device: install the Debian package "
                        "plplot-driver-cairo\n", dev);
        _exit(4);
    }
    plsexit(plot_exit);
    plsdev(dev);
    plsfnam(path);
    int h = 400 * f->n_panels + 90;
    plspage(0, 0, 1200, h, 0, 0);
    plscmap0n(C_N);
    for (int i = 0; i < C_BAND; i++) plscol0(i, PALETTE[i][0], PALETTE[i][1], PALETTE[i][2]);
    for (int i = 0; i < DM_FIG_COLORS; i++) {
        const int *c = PALETTE[C_SERIES + i];
        plscol0a(C_BAND + i, c[0], c[1], c[2], BAND_ALPHA);
    }
    plscolbg(255, 255, 255);
    plinit();
    pladv(0);
    /* panels from the top, each its share of the page between the title and the note */
    double top = 0.92, bottom = f->note[0] ? 0.13 : 0.09, gap = 0.07;
    double hp = (top - bottom - gap * (f->n_panels - 1)) / f->n_panels;
    char t[600];
    plvpor(VP_LEFT, VP_RIGHT, 0, 1);
    plwind(0, 1, 0, 1);
    plcol0(C_INK);
    plschr(0, 1.05);
    pl_text(t, sizeof t, f->title);
    plmtex("t", -1.6, 0.0, 0.0, t);
    plschr(0, 0.85);
    for (int p = 0; p < f->n_panels; p++) {
        double pt = top - p * (hp + gap);
        draw_panel(f, p, pt - 0.03, pt - hp);
    }
    draw_legend(f, top - 0.03, top - hp);
    if (f->note[0]) {
        plvpor(VP_LEFT, VP_RIGHT, 0, 1);
        plwind(0, 1, 0, 1);
        plcol0(C_INK);
        plschr(0, 0.7);
        pl_text(t, sizeof t, f->note);
        plptex(0.0, 0.02, 1, 0, 0.0, t);
    }
    plend();
    _exit(0);
}

#endif /* DM_HAVE_PLPLOT */

int dm_fig_render(const dm_figure *f, const char *path, char *err, size_t errlen) {
    const char *ext = strrchr(path, '.');
    const char *dev = ext && !strcmp(ext, ".png") ? "pngcairo" : ext && !strcmp(ext, ".svg")
                                                                  ? "svgcairo" : NULL;
    if (!dev) {
        snprintf(err, errlen, "%s: the plot file must end in .png or .svg", path);
        return 2;
    }
#ifndef DM_HAVE_PLPLOT
    snprintf(err, errlen, "cannot draw %s: this dormouse was built without PLplot; install the "
             "Debian packages libplplot-dev plplot-driver-cairo (scripts/deps.sh does), then "
             "rebuild (make build)", path);
    (void)f;
    return 1;
#else
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%s", path, ext);
    FILE *probe = fopen(tmp, "w"); /* a clear error before PLplot tries */
    if (!probe) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return 1;
    }
    fclose(probe);
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(err, errlen, "cannot draw %s: %s", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "cannot draw %s: %s", path, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        unlink(tmp);
        return 1;
    }
    if (pid == 0) {
        close(fds[0]);
        child_draw(f, dev, tmp, fds[1]);
    }
    close(fds[1]);
    char msg[2048];
    size_t got = 0;
    ssize_t r;
    while ((r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0 ||
           (r < 0 && errno == EINTR))
        if (r > 0) got += (size_t)r;
    msg[got] = 0;
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    FILE *chk = ok ? fopen(tmp, "rb") : NULL;
    if (chk) { /* PLplot can finish without writing (a driver problem): the file must exist */
        ok = fgetc(chk) != EOF;
        fclose(chk);
    } else ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        /* the last non-empty line of what PLplot said */
        size_t e = strlen(msg);
        while (e && (msg[e - 1] == '\n' || msg[e - 1] == ' ')) msg[--e] = 0;
        char *nl = strrchr(msg, '\n');
        const char *why = nl ? nl + 1 : msg;
        if (ok) why = strerror(errno);
        snprintf(err, errlen, "cannot draw %s: %s", path, why[0] ? why : "the plotting process failed");
        unlink(tmp);
        return 1;
    }
    return 0;
#endif
}
