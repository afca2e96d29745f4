/* budget.h — a run that fits a wall-clock budget (`time_budget`): how many steps fit,
 * from the measured cost of a step and of an evaluation. */
#ifndef DM_BUDGET_H
#define DM_BUDGET_H

/* The share of the budget kept back for what the measurement does not see (the
 * checkpoints, the summary, a slower stretch of steps: on a 2-core cloud VM the step rate
 * drifted by up to 6% within a 5-minute run after its first 50 steps were measured). */
#define DM_BUDGET_RESERVE 0.05
/* The most warmup steps measured before the steps are fixed. */
#define DM_BUDGET_MEASURE 64
/* `steps` until then: the key's largest value. */
#define DM_BUDGET_UNFIXED (1 << 30)

/* After `done` steps and elapsed_s seconds: the most steps S >= done with
 *     elapsed_s + (S - done) step_s + (evals(S) - evals(done)) eval_s
 *         <= (1 - DM_BUDGET_RESERVE) budget_s,
 * where evals(S) = ceil(S / eval_every) counts the evaluations every eval_every steps and
 * the one at the end (the end's shared when S is a multiple), and evals(done) =
 * floor(done / eval_every) those already made (eval_every 0: only the one at the end).
 * done when nothing more fits (or step_s is not positive); at most max(done, max_steps). */
long dm_budget_steps(double budget_s, double elapsed_s, long done, double step_s,
                     double eval_s, int eval_every, long max_steps);

#endif
