/* budget.h — a run that fits a wall-clock budget (`time_budget`): how many steps fit,
 * from the measured cost of a step and of an evaluation, and when a run whose machine
 * slowed down must be cut.
 *
 * The design: `steps` is fixed once, after the warmup's first steps (whose learning rates
 * do not depend on it), from their measured rate; the run is then the run of that many
 * steps. After every step the rate of the last DM_BUDGET_WINDOW steps (once there are half
 * as many; the first step, which warms the caches, left out) projects the end;
 * when it falls past the budget the run is cut: `steps` becomes what fits at that rate
 * and `schedule_steps` keeps the length the schedule was planned over. A cut run follows
 * the planned schedule up to its cooldown, the last tenth of its steps, which decays
 * linearly to min_lr_frac (optim.h: dm_lr_factor); so every step's lr is a function of
 * the final (steps, schedule_steps), recorded in config.json: the run is, bit for bit,
 * the run with those two keys set. A cut is made only while its cooldown still lies
 * ahead; once a cooldown has begun, steps stay. The bound: a machine that slows by up to
 * 2x at any moment ends the run within 5% past the budget — the worst case is a slowdown
 * at the start of the last tenth, which no cut can shorten: 0.9 + 2 x 0.1 = 1.1 times the
 * planned 95% is 1.045 of the budget. */
#ifndef DM_BUDGET_H
#define DM_BUDGET_H

#include <stddef.h>

/* The share of the budget kept back for what the measurement does not see (the
 * checkpoints, the summary, a slower stretch of steps: the drift measured is in
 * docs/budget.md). */
#define DM_BUDGET_RESERVE 0.05
/* The steps whose mean time is the rate a cut is judged by. */
#define DM_BUDGET_WINDOW 16
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

/* After `done` of `steps` steps at now_s seconds (from the start), a rate of step_s
 * seconds a step and eval_s an evaluation: `steps` when the projected end, now_s + the
 * remaining steps and evaluations, is within budget_s, or when the run cannot be cut
 * (schedule_steps > steps and its cooldown has begun: done > dm_lr_cooldown_start(steps));
 * else the new steps, fewer than `steps`: the most that fit (dm_budget_steps) but at
 * least the fewest whose cooldown starts at `done` or later.
 * A run that was cut (schedule_steps > steps) and whose end now fits grows back: while
 * its cooldown has not begun, the most steps that fit, up to schedule_steps, when that
 * gains 2% of the plan or reaches it (smaller gains wait, so a rate that wavers does not
 * move the end at every step). The steps done keep their lr either way (the planned
 * schedule's, before any cooldown), so the run stays the run of its final two keys. */
long dm_budget_cut(double budget_s, double now_s, long done, long steps, long schedule_steps,
                   double step_s, double eval_s, int eval_every);

/* The note of a change of steps by dm_budget_cut (was -> steps; no newline): a cut when
 * the machine slowed, a growth when it is faster again. Returns the length. */
int dm_budget_cut_text(const char *budget, double step_ms, int window, long was, long steps,
                       long schedule_steps, char *buf, size_t n);
/* The summary's line about a cut that stayed (steps < schedule_steps): how many steps and
 * tokens the run has fewer than planned, and what that costs (docs/budget.md); 0 and
 * nothing written when the run ran its plan. */
int dm_budget_summary(long steps, long schedule_steps, long tokens_per_step, char *buf,
                      size_t n);

/* An evaluation's time estimated from a training step's, before one was measured: its
 * forwards (the window's sequences in batches of batch_size) at a third of a step's time
 * each (a forward is about a third of forward + backward + update). */
double dm_budget_eval_guess(double step_s, long eval_window, int batch_size, int seq_len);

#endif
