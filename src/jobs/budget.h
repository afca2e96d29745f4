/* budget.h — a run that fits a wall-clock budget (`time_budget`, issue 15): how many
 * steps fit, from the measured cost of a step and of an evaluation. */
#ifndef DM_BUDGET_H
#define DM_BUDGET_H

/* The share of the budget kept back for what the measurement does not see (the
 * checkpoints, the summary, a slower step now and then). */
#define DM_BUDGET_RESERVE 0.02

/* The most steps s (0 when none) with
 *     elapsed_s + s * step_s + evals(s) * eval_s <= (1 - DM_BUDGET_RESERVE) * budget_s,
 * where evals(s) = ceil(s / eval_every): every eval_every steps and one at the end, the
 * end's shared when s is a multiple (eval_every 0: only the one at the end). At most
 * max_steps. */
long dm_budget_steps(double budget_s, double elapsed_s, double step_s, double eval_s,
                     int eval_every, long max_steps);

#endif
