/* atlas.c — the step atlas. */
#include "ops/atlas.h"

#include <string.h>
#include <time.h>

double dm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dm_atlas_reset(dm_atlas *a) { memset(a, 0, sizeof *a); }

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

void dm_atlas_print(const dm_atlas *a, FILE *f) {
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
}
