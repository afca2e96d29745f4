/* budget.c — see budget.h. */
#include "jobs/budget.h"

#include <stdio.h>

#include "optim/optim.h" /* dm_lr_cooldown_start */

/* what steps done+1 .. s cost, the evaluations among them and at the end included */
static double cost(long s, long done, double step_s, double eval_s, int eval_every) {
    long evals = eval_every > 0 ? (s + eval_every - 1) / eval_every - done / eval_every : 1;
    return (double)(s - done) * step_s + (double)evals * eval_s;
}

long dm_budget_steps(double budget_s, double elapsed_s, long done, double step_s,
                     double eval_s, int eval_every, long max_steps) {
    double avail = (1.0 - DM_BUDGET_RESERVE) * budget_s - elapsed_s;
    if (!(step_s > 0) || !(eval_s >= 0) || max_steps <= done) return done;
    /* cost is non-decreasing in s: the largest s that fits, by bisection */
    long lo = done, hi = max_steps;
    if (avail / step_s < (double)(hi - done)) hi = done + (long)(avail > 0 ? avail / step_s : 0) + 1;
    while (lo < hi) {
        long mid = lo + (hi - lo + 1) / 2;
        if (cost(mid, done, step_s, eval_s, eval_every) <= avail) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

long dm_budget_cut(double budget_s, double now_s, long done, long steps, long schedule_steps,
                   double step_s, double eval_s, int eval_every) {
    if (done >= steps || !(step_s > 0)) return steps;
    if (now_s + cost(steps, done, step_s, eval_s, eval_every) <= budget_s) {
        /* a cut run whose machine is fast again grows back toward its plan while its
         * cooldown has not begun (the steps done keep their lr: the planned schedule's) */
        if (schedule_steps <= steps || done > dm_lr_cooldown_start(steps)) return steps;
        long fit = dm_budget_steps(budget_s, now_s, done, step_s, eval_s, eval_every,
                                   schedule_steps);
        long gain = fit - steps, worth = (schedule_steps + 49) / 50; /* 2% of the plan */
        return fit == schedule_steps || gain >= worth ? (fit > steps ? fit : steps) : steps;
    }
    if (schedule_steps > steps && done > dm_lr_cooldown_start(steps)) return steps;
    long fit = dm_budget_steps(budget_s, now_s, done, step_s, eval_s, eval_every, steps);
    long least = done + 1; /* the cooldown may not start before `done` */
    while (dm_lr_cooldown_start(least) < done) least++;
    long s = fit > least ? fit : least;
    return s < steps ? s : steps;
}

double dm_budget_eval_guess(double step_s, long eval_window, int batch_size, int seq_len) {
    double seqs = (double)(eval_window + seq_len - 2) / seq_len; /* ceil((window - 1) / T) */
    double batches = (double)(long)((seqs + batch_size - 1) / batch_size);
    return batches * step_s / 3.0;
}

int dm_budget_cut_text(const char *budget, double step_ms, int window, long was, long steps,
                       long schedule_steps, char *buf, size_t n) {
    if (steps < was)
        return snprintf(buf, n, "time budget %s: the machine slowed (%.0f ms a step over the "
                        "last %d): steps=%ld instead of %ld, the last %ld a cooldown "
                        "(schedule_steps=%ld; recorded in config.json)", budget, step_ms,
                        window, steps, was, steps - dm_lr_cooldown_start(steps),
                        schedule_steps);
    return snprintf(buf, n, "time budget %s: the machine is faster again (%.0f ms a step over "
                    "the last %d): steps=%ld instead of %ld, of the %ld planned%s (recorded in "
                    "config.json)", budget, step_ms, window, steps, was, schedule_steps,
                    steps == schedule_steps ? ": the whole plan" : "");
}

int dm_budget_summary(long steps, long schedule_steps, long tokens_per_step, char *buf,
                      size_t n) {
    if (schedule_steps <= steps) return 0;
    long lost = schedule_steps - steps;
    return snprintf(buf, n, "time budget: the run was cut to %ld of the %ld steps planned "
                    "when the machine slowed: %ld steps (%.0f%% of the plan, %.2f M tokens) "
                    "fewer, the cost in validation BPB about 0.01 at a 25%% cut and 0.03 at "
                    "50%% (docs/budget.md)", steps, schedule_steps, lost,
                    100.0 * (double)lost / (double)schedule_steps,
                    1e-6 * (double)lost * (double)tokens_per_step);
}
