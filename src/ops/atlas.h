/* atlas.h — the step atlas (docs/architecture.md section 7): where a training step's time
 * goes, by stage (data, forward, backward, optimizer, eval) and by op (calls, time, share,
 * GFLOP/s where the FLOPs are known). Off unless asked for (`atlas=1`): a NULL atlas costs one
 * branch per op call. */
#ifndef DM_ATLAS_H
#define DM_ATLAS_H

#include <stdio.h>

#include "base/clock.h" /* dm_now, for DM_TIMED */

enum { DM_ST_DATA, DM_ST_FORWARD, DM_ST_BACKWARD, DM_ST_OPTIMIZER, DM_ST_EVAL, DM_ST_COUNT };
#define DM_ATLAS_MAX_OPS 96
#define DM_ATLAS_MAX_GEMMS 64

/* The GEMM kernel a product ran on (the roofline times it on the same one). */
enum { DM_GEMM_BF16_ONEDNN, DM_GEMM_F32_ONEDNN, DM_GEMM_F32_OPENBLAS };

/* One GEMM as the roofline sees it: row-major C[M,N] = op(A)[M,K] op(B)[K,N] (+ C when
 * beta), the leading dimensions those of dense operands. */
typedef struct { int ta, tb, M, N, K, beta; } dm_atlas_prod;

/* A distinct set of products a call runs, and how: `reps` times the products prod[0..n)
 * on each of `slices` independent slices. tiled: each product over the shape-fixed tiles
 * and all threads (dm_gemm_tile_shape; slices is 1); else one slice per thread at a
 * time, each product single-threaded (Newton–Schulz on a stack, or a lone small slice). */
typedef struct {
    const char *label; /* "matmul.fwd", "ns": static */
    int kind;          /* DM_GEMM_* */
    int n, reps, slices, tiled;
    dm_atlas_prod prod[3];
    long calls;
    double sec;        /* in the step: the whole call (the op, or the whole NS) */
    double flops;      /* of the products, per call */
    double best;       /* standalone, seconds per call (best of a few), once measured */
} dm_atlas_gemm;

typedef struct {
    const char *name, *dir, *impl; /* static strings; dir and impl may be NULL */
    long calls;
    double sec, flops;
    double bytes;      /* the bytes its calls moved (their outputs written, an accumulated
                          one read too; their inputs read once each): a lower bound of
                          the traffic */
} dm_atlas_op;

/* The step time's drift over a run: the median ms a step of the first and of the last
 * tenth of the steps after the warm-up (DM_DRIFT_WARM steps left out), and their ratio.
 * A late median more than DM_DRIFT_SLOW times the early one is a slowdown the run should
 * say (a busier machine, or arithmetic that got slower as the weights trained). */
#define DM_DRIFT_WARM 2
#define DM_DRIFT_MIN 20   /* steps after the warm-up needed for a drift (a tenth of 2+) */
#define DM_DRIFT_SLOW 1.10
typedef struct {
    long n;               /* steps after the warm-up; 0 when too few for a drift */
    long tenth;           /* the steps of each tenth */
    long early_from, late_from; /* the first step of each tenth, counted from 1 */
    double early_ms, late_ms, ratio;
    int slower;           /* ratio > DM_DRIFT_SLOW */
} dm_drift;

/* The drift of n step times ms[0..n) (ms[i] the time of step first + i, milliseconds):
 * 0 and *d filled, or 1 and d->n = 0 when fewer than DM_DRIFT_WARM + DM_DRIFT_MIN. */
int dm_step_drift(const double *ms, long n, long first, dm_drift *d);
/* One line (no newline) saying the drift; with the note when the late steps are slower. */
int dm_drift_text(const dm_drift *d, char *buf, size_t n);

/* The floor of a step: what it would take with every op at the machine's measured peaks,
 * each op's calls at the slower of their FLOPs at peak_flops (FLOP/s) and their bytes at
 * bw (bytes/s):  floor = sum_i max(flops_i / peak_flops, bytes_i / bw). An op whose FLOPs
 * are not counted is bound by its bytes; a peak that is not positive counts as absent
 * (that side adds nothing). Seconds. */
double dm_floor_seconds(const double *flops, const double *bytes, int n, double peak_flops,
                        double bw);
/* The peaks behind an atlas's floor: the GEMM rate of the step's products at their
 * standalone speed (the roofline: their FLOPs over their best times, weighted by calls)
 * and the streaming bandwidth, both measured by the backend; and the floor of one step
 * (the atlas's ops over a->steps steps). 0 ok, else 1 with why set (not measured). */
typedef struct {
    double peak_flops, bw, floor_s;
    const char *why;
} dm_floor;

typedef struct dm_atlas {
    dm_atlas_op op[DM_ATLAS_MAX_OPS];
    int n_ops;
    double stage[DM_ST_COUNT];
    long stage_calls[DM_ST_COUNT];
    long steps;
    /* the GEMMs of the step, by distinct shape, for the roofline */
    dm_atlas_gemm gemm[DM_ATLAS_MAX_GEMMS];
    int n_gemm;
    long gemm_lost;        /* calls of sets beyond the table (not timed) */
    int measured;          /* the roofline: 0 not yet, 1 measured, -1 could not */
    const char *roof_why;  /* why not (-1) */
    int roof_threads;
    double bw;             /* bytes/s of a streaming copy on those threads; 0: not measured */
    dm_drift drift;        /* the run's step-time drift, set by its owner before printing
                              (n 0: none) */
    /* the roofline's measurement on the kernels of the backend the step ran on (its
     * dm_backend_vt.roofline, set when the atlas is attached to a model); NULL: none */
    void (*measure)(struct dm_atlas *a);
} dm_atlas;

void dm_atlas_reset(dm_atlas *a);
/* The floor of a step from the atlas's ops (over a->steps steps) at the peaks measured by
 * the roofline (measured first when it has not been). 0 ok, else 1 with f->why. */
int dm_atlas_floor(dm_atlas *a, dm_floor *f);
/* One call of op (with its direction and implementation, or NULL: "ns", "adamw") taking
 * sec seconds and flops FLOPs (0: not counted). The ops layer times every op call here. */
void dm_atlas_add(dm_atlas *a, const char *op, const char *dir, const char *impl, double sec,
                  double flops);
/* The bytes a call of op (as dm_atlas_add names it) moved: added to its entry. */
void dm_atlas_bytes(dm_atlas *a, const char *op, const char *dir, const char *impl,
                    double bytes);
void dm_atlas_stage(dm_atlas *a, int stage, double sec);
/* One call of a set of GEMMs (g: label, kind, n, reps, slices, tiled, prod) that took sec in the
 * step: counted per distinct set. */
void dm_atlas_gemm_add(dm_atlas *a, const dm_atlas_gemm *g, double sec);
/* The roofline: every distinct set of GEMMs the step ran, timed standalone on the kernel
 * it ran on (same tiles, same threads: the OpenMP threads there are now; fresh operands;
 * one warm-up, then the best of DM_ATLAS_ROOF_REPS), and the memory's streaming bandwidth
 * (a->bw), by the backend's measure. Done once;
 * dm_atlas_print does it when it has not been done. */
#define DM_ATLAS_ROOF_REPS 5
void dm_atlas_roofline(dm_atlas *a);
/* The table: per step averages over a->steps steps; then the roofline (measured first
 * when it has not been). */
void dm_atlas_print(dm_atlas *a, FILE *f);

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
