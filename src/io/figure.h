/* figure.h — line charts of training curves, drawn to PNG or SVG, and the numbers behind
 * them as a TSV (`dormouse plot`, `dormouse ab --plot`).
 *
 * A figure has one or two panels stacked over a shared x axis; each panel holds series
 * (a polyline, optionally with a marker at each point) and bands (a filled region between
 * lo and hi over x, drawn under the lines). The renderer is PLplot (src/io/figure.c says
 * why); without it at build time, dm_fig_render fails with how to get it and everything
 * else works. */
#ifndef DM_FIGURE_H
#define DM_FIGURE_H

#include <stddef.h>

#define DM_FIG_PANELS 2
#define DM_FIG_COLORS 10 /* series colors cycle through this many */

typedef struct {
    char label[160];  /* legend text ("" = no legend entry) */
    char name[160];   /* the series in the TSV ("" = label) */
    int panel;        /* 0 = top */
    int color;        /* index into the palette (mod DM_FIG_COLORS) */
    int dashed;
    int markers;      /* a dot at each point (sparse series: validation) */
    double width;     /* line width in pen units (PLplot's; 0 = the default 1.6) */
    int n;
    double *x, *y;    /* owned by the figure (dm_fig_free) */
} dm_fig_series;

typedef struct {
    char label[160];  /* legend text ("" = no legend entry) */
    char name[160];   /* the band in the TSV ("" = label) */
    int panel, color;
    int n;
    double *x, *lo, *hi; /* owned */
} dm_fig_band;

typedef struct {
    char title[256];
    char xlabel[96];
    int n_panels;                       /* 1 or 2 */
    char ptitle[DM_FIG_PANELS][96];     /* a panel's title (drawn inside, top left) */
    char ylabel[DM_FIG_PANELS][96];
    char note[256];                     /* a line under the plot ("" = none) */
    int n_series, n_bands;
    dm_fig_series *series;
    dm_fig_band *bands;
    /* axis ranges (dm_fig_ranges) */
    double xmin, xmax, ymin[DM_FIG_PANELS], ymax[DM_FIG_PANELS];
} dm_figure;

/* A new series / band with room for n points (x, y / lo, hi uninitialized); NULL when out
 * of memory. Pointers stay valid until the next add. */
dm_fig_series *dm_fig_add_series(dm_figure *f, int panel, int n);
dm_fig_band *dm_fig_add_band(dm_figure *f, int panel, int n);
void dm_fig_free(dm_figure *f);

/* The axis ranges: x spans every point drawn (from 0 when none is negative, with 1.5%
 * room on the right); a panel's y spans its points from the
 * lowest up to the highest after the first tenth of the x axis (the first steps of a
 * run sit far above the rest of the curve and would flatten it; they are clipped at the
 * top), each side padded by 4% of the span. 0 ok; 1 when there is nothing to draw. */
int dm_fig_ranges(dm_figure *f);

/* The figure as a TSV the plot can be checked against and redrawn from (pandas:
 * read_csv(path, sep="\t", comment="#")): `#` lines with the title and per panel
 * "#axes PANEL xmin xmax ymin ymax TITLE"; then the header "panel kind label x y y_hi"
 * and one row per point: kind "line" (y) or "band" (y = lo, y_hi = hi); label is the
 * series' name (else its legend label).
 * Written atomically. 0 ok; else err. */
int dm_fig_write_tsv(const dm_figure *f, const char *path, char *err, size_t errlen);

/* Draw to path: PNG (.png) or SVG (.svg), 1200 x 400 px per panel (+ title), written to a
 * temporary file and renamed (a failure leaves no file). Call dm_fig_ranges first.
 * 0 ok; 2 bad input (the extension); 1 failure (PLplot missing at build time, its cairo
 * driver missing at run time, the file not writable), with a one-line err. */
int dm_fig_render(const dm_figure *f, const char *path, char *err, size_t errlen);
/* 1 when this build can draw (it was built with PLplot). */
int dm_fig_available(void);

#endif
