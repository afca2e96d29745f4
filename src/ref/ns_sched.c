/* ns_sched.c — the Newton–Schulz schedules (ns_sched.h): their names and coefficients. */
#include "ref/ns_sched.h"

#include <string.h>

/* KJ / Moonlight quintic: p'(0) = 3.4445 maximized, output band, not convergence. */
static const double ns_quintic5[5][3] = {
    {3.4445, -4.7750, 2.0315}, {3.4445, -4.7750, 2.0315}, {3.4445, -4.7750, 2.0315},
    {3.4445, -4.7750, 2.0315}, {3.4445, -4.7750, 2.0315},
};
/* Polar Express (arXiv 2505.16932), modded-nanogpt train_gpt.py table
 * ("num_iters=5, safety_factor=2e-2, cushion=2"); used with X0 = G/(1.02 ||G||_F). */
static const double ns_polar5[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};

const char *dm_ns_sched_name(dm_ns_sched s) {
    return s == DM_NS_POLAR5 ? "polar5" : "quintic5";
}

int dm_ns_sched_parse(const char *name, dm_ns_sched *s) {
    if (!name) return -1;
    if (strcmp(name, "quintic5") == 0) { *s = DM_NS_QUINTIC5; return 0; }
    if (strcmp(name, "polar5") == 0) { *s = DM_NS_POLAR5; return 0; }
    return -1;
}

int dm_ns_sched_steps(dm_ns_sched s) { (void)s; return 5; }

double dm_ns_sched_safety(dm_ns_sched s) { return s == DM_NS_POLAR5 ? 1.02 : 1.0; }

void dm_ns_sched_coeffs(dm_ns_sched s, int step, double abc[3]) {
    const double(*t)[3] = s == DM_NS_POLAR5 ? ns_polar5 : ns_quintic5;
    if (step < 0) step = 0;
    if (step > 4) step = 4;
    abc[0] = t[step][0];
    abc[1] = t[step][1];
    abc[2] = t[step][2];
}
