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

/* The Stiefel retraction's schedule (backends/cpu/kernels/retract.h; the cuda backend's in
 * kernels/cuda): Polar Express (arXiv 2505.16932, Algorithm 1), 8 steps from
 * X / (DM_PE8_SAFETY ||X||_F) with the safety factor on every step but the last, at most
 * DM_PE8_ROUNDS rounds, then at most DM_RETRACT_QUINTIC_MAX steps of the convergent quintic
 * (15/8, -5/4, 3/8) until the Gram defect is below DM_RETRACT_STOP. */
#define DM_PE8_SAFETY 1.01
#define DM_PE8_ROUNDS 3          /* each multiplies a tiny singular value by ~3e3 */
#define DM_RETRACT_QUINTIC_MAX 6 /* from delta <= 0.5, 3 steps reach 7e-11 in exact arithmetic */
#define DM_RETRACT_STOP 1e-5f    /* stop the quintic once ||A - I||_F (fp32 Gram) is below */
static inline void dm_pe8_coeffs(int t, float *a, float *b, float *c) {
    static const double pe8[8][3] = {
        {8.28721201814563, -23.595886519098837, 17.300387312530933},
        {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
        {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
        {3.3184196573706015, -2.488488024314874, 0.51004894012372},
        {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
        {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
        {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
        {1.875, -1.25, 0.375},
    };
    double f = t < 7 ? DM_PE8_SAFETY : 1.0;
    *a = (float)(pe8[t][0] / f), *b = (float)(pe8[t][1] / (f * f * f));
    *c = (float)(pe8[t][2] / (f * f * f * f * f));
}

/* The two as a pair (the Stiefel retraction runs on either these or the reference's) */
typedef struct {
    void (*gram)(float *A, const float *X, int rows, int cols, int serial);
    void (*poly)(float *Y, const float *X, const float *A, float *B, int rows, int cols,
                 float a, float b, float c, int serial);
} dm_ns_blocks;

#endif
