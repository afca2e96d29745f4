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
        a->op[a->n_ops++] = (dm_atlas_op){op, dir, impl, 0, 0, 0};
    }
    a->op[i].calls++;
    a->op[i].sec += sec;
    a->op[i].flops += flops;
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
    fprintf(f, "  %-28s %10s %10s %8s %9s\n", "op", "calls/step", "ms/step", "share", "GFLOP/s");
    for (int k = 0; k < a->n_ops; k++) {
        const dm_atlas_op *o = &a->op[order[k]];
        ops += o->sec;
        char gf[32] = "-", name[96];
        if (o->flops > 0 && o->sec > 0) snprintf(gf, sizeof gf, "%.1f", o->flops / o->sec / 1e9);
        snprintf(name, sizeof name, "%s%s%s%s%s%s", o->name, o->dir ? "." : "", o->dir ? o->dir : "",
                 o->impl ? " (" : "", o->impl ? o->impl : "", o->impl ? ")" : "");
        fprintf(f, "  %-28s %10.1f %10.3f %7.1f%% %9s\n", name, o->calls / steps,
                1e3 * o->sec / steps, step > 0 ? 100 * o->sec / steps / step : 0, gf);
    }
    fprintf(f, "  %-28s %10s %10.3f %7.1f%%\n", "(ops total)", "", 1e3 * ops / steps,
            step > 0 ? 100 * ops / steps / step : 0);
    print_roofline(a, f, steps, step);
}
