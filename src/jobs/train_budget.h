/* train_budget.h — a training run's time_budget applied (train_budget.c; the arithmetic
 * and the design: jobs/budget.h). Every rank; rank 0's figures decide for all. */
#ifndef DM_TRAIN_BUDGET_H
#define DM_TRAIN_BUDGET_H

#include "jobs/train_ctx.h"

/* A fresh run with a time_budget: `steps` unfixed until the measured steps are done. */
void train_budget_begin(train_ctx *t);
/* Time that is not a step's (a checkpoint): left out of the step rate. */
void train_budget_exclude(train_ctx *t, double seconds);
/* An evaluation took `seconds`: left out of the step rate, and the cost of the next ones. */
void train_budget_evaluated(train_ctx *t, double seconds);
/* After each step: its time; with a budget, the steps fixed or cut (config.json
 * rewritten). */
int train_budget_tick(train_ctx *t, long done);
/* A stop while the steps are measured: they are fixed now, from the rate so far (an
 * evaluation estimated), so the checkpoint of the steps done records the run they belong
 * to; at least one more step, so the run resumes. */
int train_budget_fit_now(train_ctx *t, long done);

#endif
