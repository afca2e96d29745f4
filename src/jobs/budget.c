/* budget.c — see budget.h. */
#include "jobs/budget.h"

static double cost(long s, double step_s, double eval_s, int eval_every) {
    long evals = s == 0 ? 0 : eval_every > 0 ? (s + eval_every - 1) / eval_every : 1;
    return (double)s * step_s + (double)evals * eval_s;
}

long dm_budget_steps(double budget_s, double elapsed_s, double step_s, double eval_s,
                     int eval_every, long max_steps) {
    double avail = (1.0 - DM_BUDGET_RESERVE) * budget_s - elapsed_s;
    if (!(avail > 0) || !(step_s > 0) || eval_s < 0) return 0;
    /* cost is non-decreasing in s: the largest s that fits, by bisection */
    long lo = 0, hi = max_steps;
    if ((double)hi > avail / step_s + 1) hi = (long)(avail / step_s) + 1;
    while (lo < hi) {
        long mid = lo + (hi - lo + 1) / 2;
        if (cost(mid, step_s, eval_s, eval_every) <= avail) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
