/* atlas.c — the step atlas, and its roofline table (the roofline's measurement, the
 * step's GEMMs timed standalone on the kernels they ran on, is the backend's: the cpu's in
 * backends/cpu/roofline.c). */
#include "ops/atlas.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void dm_atlas_reset(dm_atlas *a) {
    void (*measure)(dm_atlas *) = a->measure; /* the backend's, kept */
    memset(a, 0, sizeof *a);
    a->measure = measure;
}

static int same(const char *x, const char *y) {
    return x == y || (x && y && strcmp(x, y) == 0);
}

void dm_atlas_add(dm_atlas *a, const char *op, const char *dir, const char *impl, double sec,
                  double flops) {
    int i = 0;
    while (i < a->n_ops && !(same(a->op[i].name, op) && same(a->op[i].dir, dir) &&
                             same(a->op[i].impl, impl)))
        i++;
    if (i == a->n_ops) {
        if (a->n_ops == DM_ATLAS_MAX_OPS) return;
        a->op[a->n_ops++] = (dm_atlas_op){op, dir, impl, 0, 0, 0, 0};
    }
    a->op[i].calls++;
    a->op[i].sec += sec;
    a->op[i].flops += flops;
}

void dm_atlas_bytes(dm_atlas *a, const char *op, const char *dir, const char *impl,
                    double bytes) {
    for (int i = a->n_ops - 1; i >= 0; i--) /* the entry dm_atlas_add just counted */
        if (same(a->op[i].name, op) && same(a->op[i].dir, dir) && same(a->op[i].impl, impl)) {
            a->op[i].bytes += bytes;
            return;
        }
}

void dm_atlas_stage(dm_atlas *a, int stage, double sec) {
    a->stage[stage] += sec;
    a->stage_calls[stage]++;
}

static int same_set(const dm_atlas_gemm *x, const dm_atlas_gemm *y) {
    if (!same(x->label, y->label) || x->kind != y->kind || x->n != y->n || x->reps != y->reps ||
        x->slices != y->slices || x->tiled != y->tiled)
        return 0;
    for (int i = 0; i < x->n; i++) {
        const dm_atlas_prod *p = &x->prod[i], *q = &y->prod[i];
        if (p->ta != q->ta || p->tb != q->tb || p->M != q->M || p->N != q->N || p->K != q->K ||
            p->beta != q->beta)
            return 0;
    }
    return 1;
}

void dm_atlas_gemm_add(dm_atlas *a, const dm_atlas_gemm *g, double sec) {
    int i = 0;
    while (i < a->n_gemm && !same_set(&a->gemm[i], g)) i++;
    if (i == a->n_gemm) {
        if (a->n_gemm == DM_ATLAS_MAX_GEMMS || g->n < 1 || g->n > 3) {
            a->gemm_lost++;
            return;
        }
        dm_atlas_gemm *e = &a->gemm[a->n_gemm++];
        *e = *g;
        e->calls = 0;
        e->sec = e->best = 0;
        e->flops = 0;
        for (int k = 0; k < g->n; k++)
            e->flops += 2.0 * g->prod[k].M * g->prod[k].N * g->prod[k].K;
        e->flops *= (double)g->reps * g->slices;
    }
    a->gemm[i].calls++;
    a->gemm[i].sec += sec;
}

/* ---- the drift of the step time over a run ---- */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* the median of x[0..n), n >= 1, through tmp[n] */
static double median_of(const double *x, long n, double *tmp) {
    memcpy(tmp, x, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

int dm_step_drift(const double *ms, long n, long first, dm_drift *d) {
    memset(d, 0, sizeof *d);
    long m = n - DM_DRIFT_WARM;
    if (m < DM_DRIFT_MIN) return 1;
    long tenth = m / 10;
    double *tmp = malloc((size_t)tenth * sizeof *tmp);
    if (!tmp) return 1;
    const double *early = ms + DM_DRIFT_WARM, *late = ms + n - tenth;
    d->n = m;
    d->tenth = tenth;
    d->early_from = first + DM_DRIFT_WARM;
    d->late_from = first + n - tenth;
    d->early_ms = median_of(early, tenth, tmp);
    d->late_ms = median_of(late, tenth, tmp);
    d->ratio = d->early_ms > 0 ? d->late_ms / d->early_ms : 0;
    d->slower = d->ratio > DM_DRIFT_SLOW;
    free(tmp);
    return 0;
}

int dm_drift_text(const dm_drift *d, char *buf, size_t n) {
    if (!d->n) return snprintf(buf, n, "step time drift: too few steps (%d after the %d "
                               "warm-up steps needed)", DM_DRIFT_MIN, DM_DRIFT_WARM);
    int k = snprintf(buf, n, "step time drift: median %.2f ms a step over steps %ld-%ld (the "
                     "first tenth after %d warm-up steps), %.2f ms over steps %ld-%ld (the "
                     "last tenth): %.2fx", d->early_ms, d->early_from,
                     d->early_from + d->tenth - 1, DM_DRIFT_WARM, d->late_ms, d->late_from,
                     d->late_from + d->tenth - 1, d->ratio);
    if (d->slower && k >= 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, "; note: the late steps are %.0f%% slower than "
                      "the early ones (more than %.0f%%): the machine got busier, or the step "
                      "got slower as the weights trained (`dormouse bench --from RUN` times "
                      "the step on the trained weights against their initial ones)",
                      100 * (d->ratio - 1), 100 * (DM_DRIFT_SLOW - 1));
    return k;
}

/* ---- the floor of a step ---- */

double dm_floor_seconds(const double *flops, const double *bytes, int n, double peak_flops,
                        double bw) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        double tf = peak_flops > 0 && flops[i] > 0 ? flops[i] / peak_flops : 0;
        double tb = bw > 0 && bytes[i] > 0 ? bytes[i] / bw : 0;
        s += tf > tb ? tf : tb;
    }
    return s;
}

int dm_atlas_floor(dm_atlas *a, dm_floor *f) {
    memset(f, 0, sizeof *f);
    if (a->steps <= 0 || !a->n_ops) return f->why = "no steps in the atlas", 1;
    dm_atlas_roofline(a);
    if (a->measured < 0) return f->why = a->roof_why ? a->roof_why : "no roofline", 1;
    double gf = 0, gs = 0;
    for (int j = 0; j < a->n_gemm; j++)
        if (a->gemm[j].best > 0 && isfinite(a->gemm[j].best)) {
            gf += a->gemm[j].flops * a->gemm[j].calls;
            gs += a->gemm[j].best * a->gemm[j].calls;
        }
    if (!(gs > 0)) return f->why = "the step ran no GEMM that was timed alone", 1;
    if (!(a->bw > 0)) return f->why = "the backend measured no memory bandwidth", 1;
    f->peak_flops = gf / gs;
    f->bw = a->bw;
    double fl[DM_ATLAS_MAX_OPS], by[DM_ATLAS_MAX_OPS];
    for (int i = 0; i < a->n_ops; i++) fl[i] = a->op[i].flops, by[i] = a->op[i].bytes;
    f->floor_s = dm_floor_seconds(fl, by, a->n_ops, f->peak_flops, f->bw) / (double)a->steps;
    return 0;
}

static const char *KIND[] = {"bf16 onednn", "f32 onednn", "f32 openblas"};

void dm_atlas_roofline(dm_atlas *a) {
    if (a->measured) return;
    if (a->measure) {
        a->measure(a);
        return;
    }
    a->measured = -1;
    a->roof_why = "the backend times no GEMMs alone";
}

/* the roofline table: each set's time in the step and alone, then the fraction */
static void print_roofline(dm_atlas *a, FILE *f, double steps, double step) {
    if (!a->n_gemm) return;
    dm_atlas_roofline(a);
    if (a->measured < 0) {
        fprintf(f, "roofline: not measured (%s)\n", a->roof_why ? a->roof_why : "?");
        return;
    }
    fprintf(f, "roofline: each distinct GEMM set of the step timed alone after the run, on the "
               "kernel and tiles it ran on, %d threads, fresh operands, best of %d\n",
            a->roof_threads, DM_ATLAS_ROOF_REPS);
    fprintf(f, "  %-12s %-26s %-12s %9s %9s %9s %8s %8s\n", "gemms", "products", "kernel",
            "calls/st", "step ms", "alone ms", "GF/s st", "GF/s al");
    double roof = 0, part[2] = {0, 0}, part_step[2] = {0, 0};
    for (int j = 0; j < a->n_gemm; j++) {
        const dm_atlas_gemm *g = &a->gemm[j];
        char shape[64];
        const dm_atlas_prod *p = &g->prod[0];
        if (g->n == 1 && g->reps == 1 && g->slices == 1)
            snprintf(shape, sizeof shape, "%dx%dx%d %c%c%s", p->M, p->N, p->K, p->ta ? 't' : 'n',
                     p->tb ? 't' : 'n', p->beta ? " +C" : "");
        else /* Newton-Schulz: slices x steps x products, the shape of the last (B X) */
            snprintf(shape, sizeof shape, "%dx%dx%d of %dx%dx%d%s", g->slices, g->reps, g->n,
                     g->prod[g->n - 1].M, g->prod[g->n - 1].N, g->prod[g->n - 1].K,
                     g->tiled ? " tiled" : "");
        double cs = g->calls / steps, ms_step = 1e3 * g->sec / steps, ms_alone = 1e3 * cs * g->best;
        fprintf(f, "  %-12s %-26s %-12s %9.1f %9.3f %9.3f %8.1f %8.1f\n", g->label, shape,
                KIND[g->kind], cs, ms_step, ms_alone,
                g->sec > 0 ? g->flops * g->calls / g->sec / 1e9 : 0,
                g->best > 0 ? g->flops / g->best / 1e9 : 0);
        roof += ms_alone;
        int ns = strncmp(g->label, "ns", 2) == 0;
        part[ns] += ms_alone;
        part_step[ns] += ms_step;
    }
    if (a->gemm_lost)
        fprintf(f, "  (%ld calls of GEMM sets beyond the table's %d were not timed: the "
                   "roofline leaves them out)\n", a->gemm_lost, DM_ATLAS_MAX_GEMMS);
    fprintf(f, "roofline: %.2f ms of GEMMs per step at their standalone speed (matmul %.2f, "
               "ns %.2f; in the step %.2f and %.2f)",
            roof, part[0], part[1], part_step[0], part_step[1]);
    if (step > 0)
        fprintf(f, " = %.1f%% of the step's %.2f ms\n", 100 * roof / (1e3 * step), 1e3 * step);
    else fprintf(f, " (no step time in the atlas)\n");
    dm_floor fl;
    if (dm_atlas_floor(a, &fl)) {
        fprintf(f, "floor: not derived (%s)\n", fl.why);
        return;
    }
    fprintf(f, "floor: %.2f ms a step (each op at the slower of its FLOPs at %.1f GFLOP/s, "
               "the step's GEMMs alone, and the bytes it reads and writes at %.1f GB/s, a "
               "streaming copy)", 1e3 * fl.floor_s, fl.peak_flops / 1e9, fl.bw / 1e9);
    if (step > 0) fprintf(f, ": the step is %.2fx its floor\n", step / fl.floor_s);
    else fprintf(f, "\n");
}

void dm_atlas_print(dm_atlas *a, FILE *f) {
    static const char *names[DM_ST_COUNT] = {"data", "forward", "backward", "optimizer", "eval"};
    double steps = a->steps > 0 ? (double)a->steps : 1, step = 0, ops = 0;
    for (int s = 0; s < DM_ST_COUNT; s++)
        if (s != DM_ST_EVAL) step += a->stage[s];
    step /= steps;
    fprintf(f, "step atlas over %ld steps: %.2f ms per step (eval apart)\n", a->steps, 1e3 * step);
    fprintf(f, "  %-28s %10s %8s\n", "stage", "ms/step", "share");
    for (int s = 0; s < DM_ST_COUNT; s++) {
        if (s == DM_ST_EVAL) {
            if (a->stage_calls[s])
                fprintf(f, "  %-28s %10.2f %8s  (ms per evaluation, %ld evaluations)\n", names[s],
                        1e3 * a->stage[s] / a->stage_calls[s], "-", a->stage_calls[s]);
            continue;
        }
        fprintf(f, "  %-28s %10.2f %7.1f%%\n", names[s], 1e3 * a->stage[s] / steps,
                step > 0 ? 100 * a->stage[s] / steps / step : 0);
    }
    /* ops, largest first */
    int order[DM_ATLAS_MAX_OPS];
    for (int i = 0; i < a->n_ops; i++) order[i] = i;
    for (int i = 1; i < a->n_ops; i++)
        for (int j = i; j > 0 && a->op[order[j]].sec > a->op[order[j - 1]].sec; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* each op against its own floor (their sum is the step's floor, printed after the roofline) */
    dm_floor fl;
    int floored = a->steps > 0 && a->n_ops && dm_atlas_floor(a, &fl) == 0;
    fprintf(f, "  %-28s %10s %10s %8s %9s %9s %8s\n", "op", "calls/step", "ms/step", "share",
            "GFLOP/s", "floor ms", "x floor");
    for (int k = 0; k < a->n_ops; k++) {
        const dm_atlas_op *o = &a->op[order[k]];
        ops += o->sec;
        char gf[32] = "-", name[96], fm[32] = "-", fx[32] = "-";
        if (o->flops > 0 && o->sec > 0) snprintf(gf, sizeof gf, "%.1f", o->flops / o->sec / 1e9);
        double of = floored ? dm_floor_seconds(&o->flops, &o->bytes, 1, fl.peak_flops, fl.bw) : 0;
        if (of > 0) {
            snprintf(fm, sizeof fm, "%.3f", 1e3 * of / steps);
            snprintf(fx, sizeof fx, "%.2f", o->sec / of);
        }
        snprintf(name, sizeof name, "%s%s%s%s%s%s", o->name, o->dir ? "." : "", o->dir ? o->dir : "",
                 o->impl ? " (" : "", o->impl ? o->impl : "", o->impl ? ")" : "");
        fprintf(f, "  %-28s %10.1f %10.3f %7.1f%% %9s %9s %8s\n", name, o->calls / steps,
                1e3 * o->sec / steps, step > 0 ? 100 * o->sec / steps / step : 0, gf, fm, fx);
    }
    fprintf(f, "  %-28s %10s %10.3f %7.1f%%\n", "(ops total)", "", 1e3 * ops / steps,
            step > 0 ? 100 * ops / steps / step : 0);
    print_roofline(a, f, steps, step);
    if (a->drift.n) {
        char line[1024];
        dm_drift_text(&a->drift, line, sizeof line);
        fprintf(f, "%s\n", line);
    }
}
