/* train_loop.c — the training job (dm_train, jobs/train.h): the config of the run, set-up, then per step the batch,
 * forward, backward and optimizer update, the log line and evaluation, the checkpoint;
 * then the finish (counters, atlas, summary). Exact resume; a clean stop when asked.
 * The rooms it runs through are listed in jobs/train_ctx.h.
 *
 * Under mpirun (a->comm with N ranks, docs/scaling.md) every rank runs this job: rank 0
 * alone reads and writes the run directory (config, checkpoints, metrics, summary) and
 * sends the config, the parameters and the optimizer state to the others at the start;
 * each step runs its share of the micro-batches (jobs/step.h) and the evaluation its share
 * of the window. The ranks agree after set-up, after every step and after every
 * checkpoint (train_ranks.c). */
#include "jobs/train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jobs/eval.h"
#include "jobs/fair.h"
#include "jobs/plan.h" /* dm_memory_fits */
#include "jobs/train_budget.h"
#include "jobs/train_ranks.h"
#include "jobs/train_report.h"
#include "jobs/train_rundir.h"
#include "ops/ops.h" /* DM_VERIFY_BOUND */

/* ---- set-up ---------------------------------------------------------------------------- */

/* vocab given by the run: a resume's or a parent's checkpoint, or a --set */
static int vocab_explicit(const dm_train_args *a) {
    if (a->resume || a->init_from) return 1;
    for (int i = 0; i < a->n_sets; i++)
        if (!strncmp(a->sets[i], "vocab=", 6)) return 1;
    return 0;
}

/* Every rank: the corpus, the model, the optimizer, the step. Nothing is written. */
static int set_up(train_ctx *t) {
    const dm_config *c = &t->cfg;
    char err[8192];
    t->nthreads = dm_fair_threads(c, t->ranks.comm, t->io, 0, NULL);
    if (dm_memory_fits(c, c->batch_size, c->seq_len, t->nthreads, NULL, t->st))
        return t->st->code;
    if (dm_corpus_load(&t->corpus, t->data, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    /* a token corpus sets the vocabulary (the same on every rank: the same data) */
    if (dm_corpus_vocab(&t->corpus, &t->cfg.vocab, vocab_explicit(t->a), err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s: %s", t->data, err);
    if (t->corpus.notes) dm_job_note(t->io, "%s", t->corpus.notes);
    if (t->a->verify_data && dm_corpus_verify(&t->corpus, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s: %s", t->data, err);
    if (t->val[0]) { /* the validation set from a corpus of its own */
        dm_corpus v;
        if (dm_corpus_load(&v, t->val, err, sizeof err))
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "--val: %s", err);
        if (v.notes) dm_job_note(t->io, "%s", v.notes);
        int rc = dm_corpus_split_val(&t->corpus, &v, c->eval_window, c->seq_len, err, sizeof err);
        dm_corpus_free(&v);
        if (rc) return dm_fail(t->st, DM_JOB_BAD_INPUT, "--val %s: %s", t->val, err);
    } else if (dm_corpus_split(&t->corpus, c->eval_window, c->seq_len, err, sizeof err)) {
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    }
    if (dm_eval_check(&t->corpus, c->eval_window, c->eval_windows, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    t->m = dm_model_create_threads(c, t->nthreads, err, sizeof err);
    if (!t->m) return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    const dm_tokdata *td = t->corpus.tok; /* a model of tokens carries its tokenizer */
    if (td && dm_model_set_tokenizer(t->m, td->model, td->model_n, td->checksum))
        return dm_fail(t->st, DM_JOB_FAILED, "out of memory");
    t->opt = dm_optim_create(t->m, c, err, sizeof err);
    if (!t->opt) return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    if (dm_stepper_init(&t->stepper, t->m, t->opt, c, t->ranks.comm, err, sizeof err))
        return dm_fail(t->st, c->grad_accum % t->ranks.n ? DM_JOB_BAD_INPUT : DM_JOB_FAILED,
                       "%s", err);
    if (dm_model_reserve(t->m, c->batch_size, c->seq_len, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    return 0;
}

/* ---- one step ----------------------------------------------------------------------- */

/* A non-finite loss or gradient norm at 0-based step: the run stops; on probation the
 * checkpoint resumed from is named, and the run falls back to the one before it when it
 * may (the fallback's own run then names a divergence). */
static int nonfinite(train_ctx *t, long step) {
    char kb[4400], what[64];
    if (!isfinite(t->loss)) snprintf(what, sizeof what, "loss is %g", t->loss);
    else snprintf(what, sizeof what, "gradient norm is %g", t->gnorm);
    if (!t->run.probation)
        return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld; stopping (%s%s)", what, step + 1,
                       train_kept(t, kb, sizeof kb),
                       t->run.last_ckpt == step ? ": its weights gave this loss" : "");
    if (t->run.fell_back)
        return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld, also after falling back to "
                       "ckpt-%08ld: the training diverges there (no damaged checkpoint); "
                       "stopping (%s)", what, step + 1, t->start,
                       train_kept(t, kb, sizeof kb));
    long after = step + 1 - t->start;
    if (t->run.fall_to && t->run.fallback >= 0 && t->ranks.n == 1) {
        *t->run.fall_to = t->run.fallback;
        return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld, %ld step%s after resuming from "
                       "ckpt-%08ld: taking that checkpoint as damaged, falling back to "
                       "ckpt-%08ld", what, step + 1, after, after == 1 ? "" : "s", t->start,
                       t->run.fallback);
    }
    char fb[96] = "";
    if (t->run.fallback >= 0)
        snprintf(fb, sizeof fb, "; ckpt-%08ld before it is kept", t->run.fallback);
    return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld, %ld step%s after resuming from "
                   "ckpt-%08ld (which may be damaged%s); stopping (%s)", what, step + 1, after,
                   after == 1 ? "" : "s", t->start, fb, train_kept(t, kb, sizeof kb));
}

/* The step (jobs/step.h: its batch, this rank's micro-batches forward and backward, the
 * gradient sum, the optimizer update) and verify on its cadence, of 0-based step. Every
 * rank reaches its end (the exchanges are all made) before a failure is returned. */
static int one_step(train_ctx *t, long step) {
    const dm_config *c = &t->cfg;
    if (t->rep.atlas && step == t->rep.atlas_from) dm_atlas_reset(t->rep.atlas);
    /* verify_fused=N: fused and reference paths both run on every N-th step */
    int verify = c->verify_fused > 0 && (step + 1) % c->verify_fused == 0;
    dm_model_set_verify(t->m, verify);
    t->t0 = dm_now();
    dm_step_out so;
    int rc = dm_stepper_run(&t->stepper, &t->corpus, c->seed, step, step, &so);
    dm_model_set_verify(t->m, 0);
    t->loss = so.loss;
    t->gnorm = so.gnorm;
    t->lr = c->lr * dm_lr_factor(c, step);
    if (t->rep.atlas) {
        dm_atlas_stage(t->rep.atlas, DM_ST_DATA, so.t_data);
        dm_atlas_stage(t->rep.atlas, DM_ST_FORWARD, so.t_fwd);
        dm_atlas_stage(t->rep.atlas, DM_ST_BACKWARD, so.t_bwd);
        dm_atlas_stage(t->rep.atlas, DM_ST_OPTIMIZER, so.t_opt);
        t->rep.atlas->steps++;
    }
    if (rc) return train_comm_failed(t);
    if (!isfinite(t->loss) || !isfinite(t->gnorm)) return nonfinite(t, step);
    if (t->run.probation && t->run.first_saved >= 0 && step + 1 > t->run.first_saved)
        t->run.probation = 0;
    t->vrel = -1;
    if (verify) {
        char what[64];
        t->vrel = dm_model_verify_take(t->m, what, sizeof what);
        if (t->vrel > t->rep.verify_worst) {
            t->rep.verify_worst = t->vrel;
            snprintf(t->rep.verify_what, sizeof t->rep.verify_what, "%s", what);
        }
        if (!(t->vrel <= DM_VERIFY_BOUND))
            return dm_fail(t->st, DM_JOB_FAILED, "verify at step %ld: fused and reference "
                           "differ by %.3g (relative RMS, %s) > %.0e", step + 1, t->vrel, what,
                           DM_VERIFY_BOUND);
    }
    return 0;
}

/* The start of a run, every rank: rank 0 reads the config (a resumed run's is in its
 * directory), every rank sets up, rank 0 opens the run's files; they agree after each, so
 * a failure anywhere stops all of them there (and nothing is written before every rank is
 * ready). 0 when every rank is ready to train. */
static int prepare(train_ctx *t) {
    if (t->ranks.rank == 0) train_config(t);
    if (train_agree(t) || train_share_config(t)) return 1;
    set_up(t);
    if (train_agree(t) || train_check_corpus(t)) return 1;
    train_open_run(t);
    return train_agree(t) || train_share_state(t);
}

/* The steps from t->start until the run ends or stops. */
static void loop(train_ctx *t) {
    if (!t->a->resume && t->cfg.time_budget > 0) train_budget_begin(t);
    train_report_start(t);
    if (t->ranks.stop) /* asked to stop before a step ran (every rank agreed): nothing to keep */
        dm_fail(t->st, DM_JOB_INTERRUPTED, "interrupted before the first step; %s is left "
                "as it was", t->a->out);
    t->bud.mark = t->run.ckpt_mark = train_clock(t);
    for (long step = t->start; step < t->cfg.steps && !t->st->code; step++) {
        one_step(t, step);
        if (train_agree(t) || train_log_eval(t, step + 1) ||
            (t->bud.budgeted && (train_budget_tick(t, step + 1), train_agree(t))) ||
            train_checkpoint(t, step + 1))
            break;
    }
}

/* One run of the job: resumed from a checkpoint of at most step upto (> 0), falling
 * back when it may (fall_to), or a fallback's own run (fell_back). */
static dm_status train_run(const dm_train_args *a, const dm_job_io *io, long upto,
                           long *fall_to, int fell_back) {
    dm_status st = {DM_JOB_OK, ""};
    train_ctx t = {.a = a, .io = io, .st = &st};
    t.ranks = (train_ranks_state){.comm = a->comm, .rank = dm_comm_rank(a->comm),
                                  .n = dm_comm_size(a->comm)};
    t.run = (train_rundir_state){.last_ckpt = -1, .fallback = -1, .first_saved = -1,
                                 .upto = upto, .fall_to = fall_to, .fell_back = fell_back};
    t.rep.metrics.fd = -1;
    t.bud.t_job = train_clock(&t);
    if (!prepare(&t)) {
        loop(&t);
        int falls = fall_to && *fall_to >= 0;
        if ((st.code != DM_JOB_INTERRUPTED || t.run.saved) && !falls) train_finish(&t);
        if (t.ranks.n > 1) train_agree(&t);
    }
    train_report_close(&t);
    train_close_run(&t); /* a failed command leaves the directory as it found it (rank 0) */
    dm_stepper_free(&t.stepper);
    dm_optim_free(t.opt);
    dm_model_free(t.m);
    dm_corpus_free(&t.corpus);
    return st;
}

dm_status dm_train(const dm_train_args *a, const dm_job_io *io) {
    long fall_to = -1;
    dm_status st = train_run(a, io, 0, &fall_to, 0);
    if (fall_to < 0) return st;
    dm_job_warn(io, "note: %s\n", st.msg);
    return train_run(a, io, fall_to, NULL, 1);
}
