/* ns_sched.h — the Newton–Schulz schedules (docs/muon.md sections 3-6): the math every
 * backend's Newton–Schulz and the reference share, and the pair of building blocks the
 * Stiefel retraction iterates with (a backend's, or the reference's in optim_ref.h). */
#ifndef DM_REF_NS_SCHED_H
#define DM_REF_NS_SCHED_H

#include "dormouse.h"

/* Schedules: DM_NS_QUINTIC5 = (3.4445, -4.7750, 2.0315) x 5, X0 = G/||G||_F (KJ / Moonlight);
 * DM_NS_POLAR5 = Polar Express, modded-nanogpt 5-step table, X0 = G/(1.02||G||_F).
 * The values are the config's (the `ns` key, include/dormouse.h). */
typedef int dm_ns_sched;

/* Config names: "quintic5", "polar5". parse returns 0 and sets *s, or -1 if unknown. */
const char *dm_ns_sched_name(dm_ns_sched s);
int dm_ns_sched_parse(const char *name, dm_ns_sched *s);
int dm_ns_sched_steps(dm_ns_sched s);             /* iterations: 5 for both */
double dm_ns_sched_safety(dm_ns_sched s);         /* 1.0 quintic5, 1.02 polar5 */
/* coefficient (a, b, c) of iteration `step` (0-based, < steps) */
void dm_ns_sched_coeffs(dm_ns_sched s, int step, double abc[3]);

/* The two as a pair (the Stiefel retraction runs on either these or the reference's) */
typedef struct {
    void (*gram)(float *A, const float *X, int rows, int cols, int serial);
    void (*poly)(float *Y, const float *X, const float *A, float *B, int rows, int cols,
                 float a, float b, float c, int serial);
} dm_ns_blocks;

#endif
