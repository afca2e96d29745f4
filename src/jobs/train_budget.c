/* train_budget.c — a training run that fits its time_budget (jobs/budget.h: the design):
 * the steps of the warmup measured, `steps` fixed from their rate, and a run whose machine
 * slowed cut with a cooldown. Every rank runs this; rank 0's figures decide for all. */
#include <math.h>

#include "jobs/eval.h"
#include "jobs/train_budget.h"
#include "jobs/train_ranks.h"

/* time_budget on a fresh run: the steps of the warmup (at most DM_BUDGET_MEASURE of them;
 * up to --until when that comes first) train as any run's, their times are measured, and
 * after them `steps` is fixed. The warmup's learning rates do not depend on `steps`
 * (optim.h: dm_lr_factor), so the run is, bit for bit, the run with the steps fixed here
 * (which config.json records). Until then `steps` is the key's largest value and nothing
 * is checkpointed. */
void train_budget_begin(train_ctx *t) {
    dm_config *c = &t->cfg;
    t->bud.budgeted = 1;
    t->bud.fit_at = c->warmup_steps < DM_BUDGET_MEASURE ? c->warmup_steps : DM_BUDGET_MEASURE;
    if (t->a->until > 0 && t->a->until < t->bud.fit_at) t->bud.fit_at = t->a->until;
    c->steps = DM_BUDGET_UNFIXED;
    c->schedule_steps = 0;
    dm_optim_set_steps(t->opt, c->steps, 0);
}

/* the bytes an evaluation scores (eval_windows: 0 = all of the validation set) */
static long val_bytes(const train_ctx *t) {
    const dm_config *c = &t->cfg;
    return c->eval_windows == 0 ? (long)t->corpus.val_n : c->eval_window * c->eval_windows;
}

/* the mean of x[from..to) */
static double mean_of(const double *x, long from, long to) {
    double sum = 0;
    for (long i = from; i < to; i++) sum += x[i];
    return to > from ? sum / (double)(to - from) : 0;
}

/* With a budget too small for the steps measured before `steps` can be fixed, the steps
 * are fixed at once (rank 0 decides): after `done` of them, when what they still take, the
 * fit's evaluation, one more step and the final evaluation do not fit the budget's share. */
static int fit_now(train_ctx *t, long done, double now) {
    const dm_config *c = &t->cfg;
    long early = 0;
    double step_s = mean_of(t->bud.fit_dt, 1, done);
    double need = (now - t->bud.t_job) + (double)(t->bud.fit_at - done + 1) * step_s +
                  2 * dm_budget_eval_guess(step_s, val_bytes(t), c->batch_size, c->seq_len);
    if (t->ranks.rank == 0) early = need > (1.0 - DM_BUDGET_RESERVE) * (double)c->time_budget;
    if (train_from_rank0(t, &early)) return -1;
    return (int)early;
}

/* After step `done` (fit_at, or earlier when the budget cannot hold the measured steps;
 * every rank): one timed evaluation (not logged; early, the estimate instead, which costs
 * no time), then the steps that fit from the mean time of the measured steps after the
 * first; rank 0's figures decide for every rank. */
static int fit_budget(train_ctx *t, long done, int early) {
    dm_config *c = &t->cfg;
    /* the first step warms the caches up: left out when there are more */
    double step_s = mean_of(t->bud.fit_dt, done > 1, done), now = train_clock(t);
    if (early) {
        t->bud.eval_s = dm_budget_eval_guess(step_s, val_bytes(t), c->batch_size, c->seq_len);
    } else {
        double te = now;
        size_t scored;
        double bpb = dm_eval_val_fp32(t->m, &t->corpus, c->eval_window, c->eval_windows,
                                      c->batch_size, c->seq_len, t->ranks.comm, t->io,
                                      &scored);
        now = train_clock(t);
        t->bud.eval_s = now - te;
        if (isnan(bpb) && dm_job_stopped(t->io)) /* cut short by a stop: its time says nothing */
            t->bud.eval_s = dm_budget_eval_guess(step_s, val_bytes(t), c->batch_size, c->seq_len);
        t->bud.excluded += t->bud.eval_s;
        if (dm_comm_error(t->ranks.comm)[0]) return train_comm_failed(t);
        char err[8192]; /* the arena back to the step's shape (the evaluation's last was shorter) */
        if (dm_model_reserve(t->m, c->batch_size, c->seq_len, err, sizeof err))
            return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    }
    double elapsed = now - t->bud.t_job;
    long steps = dm_budget_steps((double)c->time_budget, elapsed, done, step_s, t->bud.eval_s,
                                 c->eval_every, DM_BUDGET_UNFIXED);
    if (train_from_rank0(t, &steps)) return t->st->code;
    char bud[32];
    dm_fmt_duration(bud, sizeof bud, (double)c->time_budget);
    if (steps <= done && t->ranks.stop) steps = done + 1; /* stopped: resumable, not finished */
    if (steps <= done) {
        char least[32];
        double per = (elapsed + (double)(c->warmup_steps - done) * step_s + t->bud.eval_s) /
                     (1.0 - DM_BUDGET_RESERVE);
        dm_fmt_duration(least, sizeof least, 2 * per + 1);
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "time budget %s is too small here: the set-up "
                       "and %ld steps took %.1f s (%.0f ms a step), an evaluation %s %.1f s, "
                       "and no more steps fit; the %d warmup steps need about %s "
                       "(--time-budget); %s is left as it was", bud, done, elapsed,
                       1e3 * step_s, early ? "would take about" : "took", t->bud.eval_s,
                       c->warmup_steps, least, t->a->out);
    }
    c->steps = (int)steps;
    dm_optim_set_steps(t->opt, c->steps, 0); /* the lr schedule follows the fitted steps */
    t->bud.fit_at = 0;
    dm_job_note(t->io, "time budget %s: steps=%d fits, evaluation included (recorded in "
                "config.json; cut with a cooldown if the machine slows); measured over the "
                "first %ld: a step %.1f ms, an evaluation %.2f s%s, %.1f s since the start\n",
                bud, c->steps, done, 1e3 * step_s, t->bud.eval_s, early ? " (estimated)" : "",
                elapsed);
    if (c->steps < c->warmup_steps)
        dm_job_note(t->io, "note: the budget holds %d steps, fewer than warmup_steps=%d: the "
                    "learning rate never reaches its peak (a longer budget trains better)\n",
                    c->steps, c->warmup_steps);
    return train_write_config(t);
}

/* After each step's log line (every rank): its time (the clock since the last step's end,
 * less evaluations and checkpoints); with a time budget, the steps fixed once the measured
 * ones are done, and then, when the recent rate projects past the budget, the run cut
 * (budget.h: the design). */
int train_budget_tick(train_ctx *t, long done) {
    dm_config *c = &t->cfg;
    double now = train_clock(t), dt = now - t->bud.mark - t->bud.excluded;
    t->bud.mark = now;
    t->bud.excluded = 0;
    if (!t->bud.budgeted) return 0;
    if (done > 1) /* the first step warms the caches up */
        t->bud.recent[t->bud.n_recent++ % DM_BUDGET_WINDOW] = dt;
    if (t->bud.fit_at) {
        t->bud.fit_dt[done - 1] = dt;
        int early = done >= 2 && done < t->bud.fit_at ? fit_now(t, done, now) : 0;
        if (early < 0) return t->st->code;
        return done == t->bud.fit_at || early ? fit_budget(t, done, early) : 0;
    }
    int n = t->bud.n_recent < DM_BUDGET_WINDOW ? t->bud.n_recent : DM_BUDGET_WINDOW;
    if (n < DM_BUDGET_WINDOW / 2) return 0; /* too few steps for a rate */
    long steps = dm_budget_cut((double)c->time_budget, now - t->bud.t_job, done, c->steps,
                               c->schedule_steps, mean_of(t->bud.recent, 0, n), t->bud.eval_s,
                               c->eval_every);
    if (train_from_rank0(t, &steps) || steps == c->steps) return t->st->code;
    if (!c->schedule_steps) c->schedule_steps = c->steps;
    int was = c->steps;
    c->steps = (int)steps;
    dm_optim_set_steps(t->opt, c->steps, c->schedule_steps);
    char bud[32], text[512];
    dm_fmt_duration(bud, sizeof bud, (double)c->time_budget);
    dm_budget_cut_text(bud, 1e3 * mean_of(t->bud.recent, 0, n), n, was, c->steps,
                       c->schedule_steps, text, sizeof text);
    dm_job_note(t->io, "%s\n", text);
    return train_write_config(t);
}

int train_budget_fit_now(train_ctx *t, long done) { return fit_budget(t, done, 1); }

void train_budget_exclude(train_ctx *t, double seconds) { t->bud.excluded += seconds; }

void train_budget_evaluated(train_ctx *t, double seconds) {
    t->bud.eval_s = seconds;
    t->bud.excluded += t->bud.eval_s;
}
