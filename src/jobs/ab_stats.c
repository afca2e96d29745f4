/* ab_stats.c — the verdicts of an A/B sweep, pure: arm statistics, better / worse / wash
 * against the control's spread (see ab.h). */
#include <math.h>

#include "jobs/ab.h"

dm_ab_stats dm_ab_arm_stats(const dm_ab_cell *cells, int n) {
    dm_ab_stats st = {0};
    double lo = INFINITY, hi = -INFINITY, sum = 0, mlo = INFINITY, mhi = -INFINITY, msum = 0;
    st.timed = 1;
    for (int k = 0; k < n; k++) {
        const dm_ab_cell *c = &cells[k];
        if (c->status != DM_CELL_DONE) continue;
        st.n++;
        sum += c->bpb;
        lo = fmin(lo, c->bpb);
        hi = fmax(hi, c->bpb);
        if (isnan(c->ms)) st.timed = 0;
        else {
            msum += c->ms;
            mlo = fmin(mlo, c->ms);
            mhi = fmax(mhi, c->ms);
        }
        if (c->flags) st.contended = 1;
    }
    st.complete = n > 0 && st.n == n;
    st.mean = st.n ? sum / st.n : NAN;
    st.spread = st.n ? hi - lo : NAN;
    st.ms_mean = st.n && st.timed ? msum / st.n : NAN;
    st.ms_spread = st.n && st.timed ? mhi - mlo : NAN;
    return st;
}

int dm_ab_judge(double control_mean, double control_spread, double mean) {
    if (mean < control_mean - control_spread) return DM_AB_BETTER;
    if (mean > control_mean + control_spread) return DM_AB_WORSE;
    return DM_AB_WASH;
}

dm_ab_verdict dm_ab_compare(const dm_ab_cell *control, const dm_ab_cell *variant, int n) {
    dm_ab_stats c = dm_ab_arm_stats(control, n), v = dm_ab_arm_stats(variant, n);
    dm_ab_verdict out = {DM_AB_NA_MISSING, DM_AB_NA_MISSING, NAN, NAN};
    if (!c.complete || !v.complete) return out; /* no verdict on a partial arm */
    out.bpb_delta = v.mean - c.mean;
    if (c.timed && v.timed) out.ms_delta = v.ms_mean - c.ms_mean;
    if (n < 2) { /* one seed: the noise is unknown, any difference could be it */
        out.bpb = out.time = DM_AB_NA_SEEDS;
        return out;
    }
    out.bpb = dm_ab_judge(c.mean, c.spread, v.mean);
    if (!c.timed || !v.timed) out.time = DM_AB_NA_UNTIMED;
    else if (c.contended || v.contended) out.time = DM_AB_NA_CONTENDED;
    else out.time = dm_ab_judge(c.ms_mean, c.ms_spread, v.ms_mean);
    return out;
}

const char *dm_ab_verdict_text(int v) {
    switch (v) {
    case DM_AB_WASH: return "wash";
    case DM_AB_BETTER: return "better";
    case DM_AB_WORSE: return "worse";
    case DM_AB_NA_MISSING: return "n/a (missing cells)";
    case DM_AB_NA_SEEDS: return "n/a (needs 2+ seeds)";
    case DM_AB_NA_CONTENDED: return "n/a (contended)";
    case DM_AB_NA_UNTIMED: return "n/a (no timing)";
    }
    return "?";
}

