/* atlas.h — the step atlas (DESIGN.md section 7): where a training step's time goes, by
 * stage (data, forward, backward, optimizer, eval) and by op (calls, time, share, GFLOP/s
 * where the FLOPs are known). Off unless asked for (`atlas=1`): a NULL atlas costs one
 * branch per op call. */
#ifndef DM_ATLAS_H
#define DM_ATLAS_H

#include <stdio.h>

enum { DM_ST_DATA, DM_ST_FORWARD, DM_ST_BACKWARD, DM_ST_OPTIMIZER, DM_ST_EVAL, DM_ST_COUNT };
#define DM_ATLAS_MAX_OPS 96

typedef struct {
    const char *name, *dir, *impl; /* static strings; dir and impl may be NULL */
    long calls;
    double sec, flops;
} dm_atlas_op;

typedef struct dm_atlas {
    dm_atlas_op op[DM_ATLAS_MAX_OPS];
    int n_ops;
    double stage[DM_ST_COUNT];
    long stage_calls[DM_ST_COUNT];
    long steps;
} dm_atlas;

/* Seconds on a monotonic clock. */
double dm_now(void);

void dm_atlas_reset(dm_atlas *a);
/* One call of op (with its direction and implementation, or NULL: "ns", "adamw") taking
 * sec seconds and flops FLOPs (0: not counted). The ops layer times every op call here. */
void dm_atlas_add(dm_atlas *a, const char *op, const char *dir, const char *impl, double sec,
                  double flops);
void dm_atlas_stage(dm_atlas *a, int stage, double sec);
/* The table: per step averages over a->steps steps. */
void dm_atlas_print(const dm_atlas *a, FILE *f);

/* Run stmt, timing it as `name` with `flops` when atlas is non-NULL (the optimizer's
 * steps; ops are timed by the dispatch routine). */
#define DM_TIMED(atlas, name, flops, stmt)                                             \
    do {                                                                               \
        dm_atlas *a_ = (atlas);                                                        \
        if (a_) {                                                                      \
            double t0_ = dm_now();                                                     \
            stmt;                                                                      \
            dm_atlas_add(a_, name, NULL, NULL, dm_now() - t0_, flops);                             \
        } else {                                                                       \
            stmt;                                                                      \
        }                                                                              \
    } while (0)

#endif
