/* train_report.c — what a training run tells: the notes of its set-up, a metrics line and
 * a step event per step with the validation BPB on its cadence, metrics.jsonl kept whole
 * when the disk refuses for a while, and at the end the counters, the atlas and the
 * summary (summary.json, params.txt, dispatch.txt). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/budget.h"
#include "jobs/eval.h"
#include "jobs/train_budget.h"
#include "jobs/train_ranks.h"
#include "jobs/train_report.h"
#include "model/host.h"
#include "model/model.h" /* the precision record */
#include "ops/backend.h"
#include "ops/ops.h"     /* DM_VERIFY_BOUND */

/* ---- the set-up ---------------------------------------------------------------------- */

/* what the corpus is, the validation, the batch, the steps and the threads: one note */
static void corpus_note(const train_ctx *t, const char *acc, const char *steps) {
    const dm_config *c = &t->cfg;
    char what[256], vw[300];
    size_t vscored = c->eval_windows == 0 ? t->corpus.val_n
                   : (size_t)c->eval_window * (size_t)c->eval_windows;
    dm_eval_what(c, vscored, what, sizeof what);
    if (t->corpus.mapped)
        dm_job_note(t->io, "data %s (prepared, mapped): train.bin %zu bytes, val.bin %zu bytes, "
                    "validation: %s of val.bin; batch %d x %d%s; %s; %d thread%s\n", t->data,
                    t->corpus.train_n, t->corpus.val_n, what, c->batch_size, c->seq_len, acc,
                    steps, t->nthreads, t->nthreads == 1 ? "" : "s");
    else if (t->val[0])
        dm_job_note(t->io, "corpus %s: %zu bytes, all train; validation: %s of %s (%zu bytes); "
                    "batch %d x %d%s; %s; %d thread%s\n", t->data, t->corpus.train_n, what,
                    t->val, t->corpus.val_n, c->batch_size, c->seq_len, acc, steps,
                    t->nthreads, t->nthreads == 1 ? "" : "s");
    else {
        snprintf(vw, sizeof vw, "the last %ld validation", c->eval_window);
        dm_job_note(t->io, "corpus %s: %zu bytes (%zu train, %s); batch %d x %d%s; %s; %d "
                    "thread%s\n", t->data, t->corpus.n, t->corpus.train_n, vw, c->batch_size,
                    c->seq_len, acc, steps, t->nthreads, t->nthreads == 1 ? "" : "s");
    }
}

/* the model, the data, the machine, the run directory, the memory, the ranks */
static void setup_notes(const train_ctx *t) {
    const dm_config *c = &t->cfg;
    char acc[96] = "";
    if (c->grad_accum > 1)
        snprintf(acc, sizeof acc, ", grad_accum %d (%d sequences per step)", c->grad_accum,
                 c->batch_size * c->grad_accum);
    char steps[160];
    if (t->bud.fit_at) {
        char bud[32];
        dm_fmt_duration(bud, sizeof bud, (double)c->time_budget);
        snprintf(steps, sizeof steps, "steps: as many as fit %s (time_budget), fixed after "
                 "step %ld", bud, t->bud.fit_at);
    } else snprintf(steps, sizeof steps, "%d steps", c->steps);
    char from[4400] = ""; /* a fine-tuning run: the model it started from */
    if (t->parent.path[0])
        snprintf(from, sizeof from, ", fine-tuned from %.4000s (step %ld, model crc32 %08x)",
                 t->parent.path, t->parent.step, (unsigned)t->parent.crc);
    dm_job_note(t->io, "dormouse train: %s mixer, d_model %d, %d layer%s, %d head%s x %d, %zu "
                "parameters%s\n", c->mixer == DM_MIXER_KDA ? "kda" : "gdn", c->d_model,
                c->n_layer, c->n_layer == 1 ? "" : "s", c->n_head, c->n_head == 1 ? "" : "s",
                c->head_dim, dm_model_num_params(t->m), from);
    corpus_note(t, acc, steps);
    char over[256], chose[512];
    if (dm_step_oversubscribed(c->threads, over, sizeof over)[0]) dm_job_note(t->io, "%s", over);
    if (dm_backend_choice(c->backend, c->device, chose, sizeof chose)[0])
        dm_job_note(t->io, "%s\n", chose);
    char pol[512];
    dm_policy_describe(dm_model_policy(t->m), pol, sizeof pol);
    dm_job_note(t->io, "policy: %s\n", pol);
    if (dm_backend_queues(dm_model_backend(t->m))) { /* a device's queue: graphs or not */
        char gt[256];
        dm_stepper_graph_text(&t->stepper, gt, sizeof gt);
        dm_job_note(t->io, "%s\n", gt);
    }
    dm_job_note(t->io, "run directory %s: config.json, %smetrics.jsonl, checkpoints "
                "ckpt-NNNNNNNN/, summary.json, the tables params.txt and dispatch.txt (-v "
                "prints them)\n", t->a->out, t->parent.path[0] ? "parent.json, " : "");
}

void train_report_start(train_ctx *t) {
    const dm_config *c = &t->cfg;
    setup_notes(t);
    char line[1024];
    if (!dm_memory_report(t->m, t->opt, t->stepper.gs, &t->rep.mem)) {
        dm_memory_line(&t->rep.mem, c->checkpointing, line, sizeof line);
        dm_job_note(t->io, "%s\n", line);
    }
    if (t->ranks.n > 1) {
        char shard[512];
        dm_optim_shard_text(t->opt, shard, sizeof shard);
        dm_job_note(t->io, "data parallel: %d processes (MPI) x %d thread%s; rank r runs "
                    "micro-batches r, r+%d, ... (%d of the %d of a step); rank 0 writes the "
                    "run; %s\n", t->ranks.n, t->nthreads, t->nthreads == 1 ? "" : "s",
                    t->ranks.n, c->grad_accum / t->ranks.n, c->grad_accum, shard);
    }
    dm_note_buf nb; /* the optimizer's table (-v; params.txt at the end) */
    FILE *f = dm_note_open(&nb);
    if (f) dm_optim_print_groups(t->opt, t->m, f);
    dm_note_close_detail(&nb, t->io, NULL);

    /* the atlas (atlas=1): every op and stage timed, after two warm-up steps */
    t->rep.atlas = c->atlas ? calloc(1, sizeof *t->rep.atlas) : NULL;
    if (t->rep.atlas) {
        dm_model_set_atlas(t->m, t->rep.atlas);
        dm_optim_set_atlas(t->opt, t->rep.atlas);
    }
    t->rep.atlas_from = t->start + (c->steps - t->start > 4 ? 2 : 0);
    t->rep.t_start = t->rep.last_tick = dm_now();
    dm_probe_begin(&t->rep.probe);
    t->rep.last_bpb = NAN;
    t->loss = NAN;
    t->rep.verify_worst = -1;
}

/* ---- metrics.jsonl: no line lost ------------------------------------------------------ */

#define METRICS_MAX_PENDING (64u << 20) /* bytes kept in memory while the disk refuses */

int train_metrics_open(train_ctx *t) {
    char mpath[4200], err[4400];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->a->out);
    if (dm_linelog_open(&t->rep.metrics, mpath, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    return 0;
}

/* Every line written, waiting up to 5 s for the disk: else the run stops `before` (a
 * checkpoint, the end), so that a resume from the last checkpoint writes the lines again
 * and the file never has a gap. Rank 0; 0 ok. */
static int metrics_catch_up(train_ctx *t, const char *before) {
    if (t->rep.metrics.fd < 0 || !t->rep.metrics.n) return 0;
    char kb[4400];
    if (dm_linelog_flush(&t->rep.metrics, 50, 100))
        return dm_fail(t->st, DM_JOB_FAILED, "cannot write %s/metrics.jsonl: %s (%zu line%s "
                       "kept in memory for it); stopping %s (%s)", t->a->out,
                       strerror(t->rep.metrics.err), t->rep.metrics.lines,
                       t->rep.metrics.lines == 1 ? "" : "s", before,
                       train_kept(t, kb, sizeof kb));
    dm_job_warn(t->io, "note: metrics.jsonl written again: every line is in it\n");
    t->rep.metrics_behind = 0;
    return 0;
}

/* A line lost, or too many waiting: the run stops `where` (rank 0; 0 ok). */
static int metrics_check(train_ctx *t, const char *where) {
    char kb[4400];
    if (t->rep.metrics_lost)
        return dm_fail(t->st, DM_JOB_FAILED, "out of memory keeping the line of step %ld of "
                       "metrics.jsonl; stopping %s (%s)", t->rep.metrics_lost, where,
                       train_kept(t, kb, sizeof kb));
    if (t->rep.metrics.n > METRICS_MAX_PENDING) return metrics_catch_up(t, where);
    return 0;
}

int train_metrics_flush(train_ctx *t, const char *when) {
    return metrics_check(t, when) || metrics_catch_up(t, when);
}

/* One metrics line: written, or kept in memory and tried again with each later line and
 * before each checkpoint (a note when the writes start failing and when they catch up). */
static void metrics_line(train_ctx *t, const char *line, long done) {
    int rc = dm_linelog_add(&t->rep.metrics, line);
    if (rc == 1 && !t->rep.metrics_behind) {
        dm_job_warn(t->io, "note: cannot write metrics.jsonl at step %ld (%s): its lines are "
                    "kept in memory and written when the disk takes them\n", done,
                    strerror(t->rep.metrics.err));
        t->rep.metrics_behind = 1;
    } else if (rc == 0 && t->rep.metrics_behind) {
        dm_job_warn(t->io, "note: metrics.jsonl written again at step %ld: every line is in "
                    "it\n", done);
        t->rep.metrics_behind = 0;
    }
    /* a line that could not be kept, or too many waiting: one process stops here (under
     * mpirun the next checkpoint, where the ranks agree, stops them) */
    if (rc < 0 && !t->rep.metrics_lost) t->rep.metrics_lost = done;
    if (t->ranks.n == 1) metrics_check(t, "here");
}

void train_report_close(train_ctx *t) {
    free(t->rep.step_ms);
    t->rep.step_ms = NULL;
    t->rep.n_step_ms = t->rep.cap_step_ms = 0;
    if (t->m) dm_model_set_atlas(t->m, NULL);
    free(t->rep.atlas);
    t->rep.atlas = NULL;
    if (t->rep.metrics.fd >= 0 && dm_linelog_close(&t->rep.metrics) && !t->st->code)
        dm_fail(t->st, DM_JOB_FAILED, "cannot write %s/metrics.jsonl: its last lines are lost",
                t->a->out);
}

/* ---- every step ------------------------------------------------------------------------ */

/* The validation BPB after `done` steps (every rank): into rep.last_bpb, with *scored set,
 * unless a stop cut the evaluation short. Returns the agreed status code. */
static int evaluate(train_ctx *t, long done, int *scored) {
    const dm_config *c = &t->cfg;
    double te = dm_now(), tc = train_clock(t);
    dm_model_set_atlas(t->m, NULL); /* the op table is per training step */
    size_t n;
    double bpb = dm_eval_val_fp32(t->m, &t->corpus, c->eval_window, c->eval_windows,
                                  c->batch_size, c->seq_len, t->ranks.comm, t->io, &n);
    dm_model_set_atlas(t->m, t->rep.atlas);
    if (t->rep.atlas) dm_atlas_stage(t->rep.atlas, DM_ST_EVAL, dm_now() - te);
    train_budget_evaluated(t, train_clock(t) - tc);
    /* a stop asked for between its windows cuts the evaluation short: the step has no
     * val_bpb, and the checkpoint after it ends the run */
    t->rep.eval_cut = isnan(bpb) && dm_job_stopped(t->io);
    if (!train_comm_failed(t) && !t->rep.eval_cut && !isfinite(bpb))
        dm_fail(t->st, DM_JOB_FAILED, "validation BPB is %g at step %ld", bpb, done);
    if (train_agree(t) != DM_JOB_OK) return t->st->code;
    *scored = !t->rep.eval_cut;
    if (*scored) {
        t->rep.last_bpb = bpb;
        t->rep.val_step = done;
    }
    return 0;
}

/* the metrics line of step `done` (with val_bpb when evaluated) into line[n] */
static void metrics_text(const train_ctx *t, long done, double ms, double tps, int evaluated,
                         char *line, size_t n) {
    int k = snprintf(line, n,
                     "{\"step\": %ld, \"loss\": %.9g, \"loss_avg\": %.6f, \"lr\": %.6g, "
                     "\"grad_norm\": %.6g, \"ms_per_step\": %.2f, \"tokens_per_s\": %.1f, "
                     "\"elapsed_s\": %.2f",
                     done, t->loss, t->rep.loss_sum / t->rep.interval_n, t->lr, t->gnorm, ms,
                     tps, dm_now() - t->rep.t_start);
    if (evaluated)
        k += snprintf(line + k, n - (size_t)k, ", \"val_bpb\": %.6f", t->rep.last_bpb);
    if (t->vrel >= 0)
        k += snprintf(line + k, n - (size_t)k, ", \"verify_max_rel\": %.3g", t->vrel);
    snprintf(line + k, n - (size_t)k, "}\n");
}

/* the step event of step `done` */
static void emit_step(const train_ctx *t, long done, double ms, double tps, int logged) {
    const dm_config *c = &t->cfg;
    dm_event ev = {0};
    ev.kind = DM_EV_STEP;
    ev.step = done;
    ev.steps = t->bud.fit_at ? 0 : c->steps; /* 0: not fixed yet (time_budget) */
    ev.loss = t->loss;
    ev.val_bpb = t->rep.last_bpb;
    ev.val_step = t->rep.val_step;
    ev.ms_per_step = ms;
    ev.tokens_per_s = tps;
    ev.eta_s = t->bud.fit_at ? NAN : (c->steps - done) * (t->rep.t_train / (done - t->start));
    ev.logged = logged;
    dm_job_emit(t->io, &ev);
}

/* a step's time kept for the drift (a failed allocation stops keeping them: the summary
 * then says nothing of the drift) */
static void keep_step_ms(train_ctx *t, double ms) {
    train_report_state *r = &t->rep;
    if (r->n_step_ms == r->cap_step_ms) {
        if (r->cap_step_ms < 0) return;
        long cap = r->cap_step_ms ? 2 * r->cap_step_ms : 1024;
        double *p = realloc(r->step_ms, (size_t)cap * sizeof *p);
        if (!p) {
            free(r->step_ms);
            r->step_ms = NULL;
            r->n_step_ms = 0;
            r->cap_step_ms = -1;
            return;
        }
        r->step_ms = p;
        r->cap_step_ms = cap;
    }
    r->step_ms[r->n_step_ms++] = ms;
}

int train_log_eval(train_ctx *t, long done) {
    const dm_config *c = &t->cfg;
    double dt = dm_now() - t->t0;
    keep_step_ms(t, 1e3 * dt);
    t->rep.t_train += dt;
    t->rep.interval_t += dt;
    t->rep.interval_n++;
    t->rep.loss_sum += t->loss;
    int last = done == c->steps;
    int do_eval = last || (c->eval_every > 0 && done % c->eval_every == 0);
    if (do_eval && evaluate(t, done, &do_eval)) return t->st->code;
    if (dm_now() - t->rep.last_tick >= 1) { /* the probe samples the load about once a second */
        dm_probe_tick(&t->rep.probe);
        t->rep.last_tick = dm_now();
    }
    double ms = 1e3 * t->rep.interval_t / t->rep.interval_n;
    double tps = (double)c->batch_size * c->grad_accum * c->seq_len /
                 (t->rep.interval_t / t->rep.interval_n);
    int logged = done % c->log_every == 0 || last || do_eval;
    if (logged && t->rep.metrics.fd >= 0) {
        char line[1024];
        metrics_text(t, done, ms, tps, do_eval, line, sizeof line);
        metrics_line(t, line, done);
        if (t->ranks.n == 1 && t->st->code) return t->st->code;
    }
    emit_step(t, done, ms, tps, logged);
    if (done % c->log_every == 0 || last) {
        t->rep.interval_t = 0;
        t->rep.interval_n = 0;
        t->rep.loss_sum = 0;
    }
    return 0;
}

/* ---- the end ---------------------------------------------------------------------------- */

#define DISP_N 4096  /* the dispatch counters' line */
#define TABLE_N 8192 /* their table */

/* v as JSON: null when it is not a finite number (or, with absent_below_zero, negative:
 * a value that does not exist) */
static const char *jnum(char *buf, size_t n, const char *fmt, double v, int absent_below_zero) {
    if (!isfinite(v) || (absent_below_zero && v < 0)) snprintf(buf, n, "null");
    else snprintf(buf, n, fmt, v);
    return buf;
}

/* the figures of a finished run */
typedef struct {
    long steps_run;
    double tps, wall, bits, per; /* per: 1 / steps_run (0 when none ran) */
    double bpt;                  /* bytes per training token (1: bytes) */
    size_t np;
    dm_probe_result pr;
    char words[64];              /* the probe's flags */
    dm_comm_stats cs;
    char prec[256];
    dm_drift drift;              /* the step time's drift (n 0: too few steps) */
} summary;

static void summarize(train_ctx *t, summary *s) {
    const dm_config *c = &t->cfg;
    s->steps_run = c->steps - t->start;
    s->tps = s->steps_run > 0 ? s->steps_run * (double)c->batch_size * c->grad_accum *
                                    c->seq_len / t->rep.t_train : 0;
    s->wall = dm_now() - t->rep.t_start;
    s->np = dm_model_num_params(t->m);
    /* the loss in both units: cross-entropy in nats (as trained), and in bits per byte
     * like the validation BPB (nats / ln 2; of tokens, over the training text's bytes per
     * token) */
    s->bpt = t->corpus.tok && t->corpus.ts[0].n
                 ? (double)t->corpus.train_n / (double)t->corpus.ts[0].n : 1;
    s->bits = t->loss / log(2.0) / s->bpt;
    dm_probe_end(&t->rep.probe, t->nthreads, &s->pr);
    dm_probe_flags_text(s->pr.flags, s->words, sizeof s->words);
    s->cs = dm_comm_get_stats(t->ranks.comm);
    s->per = s->steps_run > 0 ? 1.0 / s->steps_run : 0; /* set-up and evaluation included */
    dm_precision_describe(dm_model_precision(t->m), s->prec, sizeof s->prec);
    dm_step_drift(t->rep.step_ms, t->rep.n_step_ms, t->start + 1, &s->drift);
}

static void summary_notes(const train_ctx *t, const summary *s) {
    const dm_config *c = &t->cfg;
    char took[96];
    if (t->start > 0) /* a resume: this invocation's time and the run's */
        snprintf(took, sizeof took, "%.1f s (steps %ld-%d; %.1f s in all)", s->wall,
                 t->start + 1, c->steps, t->run.wall_before + s->wall);
    else snprintf(took, sizeof took, "%.1f s", s->wall);
    char bps[64] = ""; /* of tokens: the text's bytes a second too */
    if (t->corpus.tok) snprintf(bps, sizeof bps, " (%.0f bytes/s)", s->tps * s->bpt);
    dm_job_note(t->io, "summary: %zu parameters | %d steps | final train loss %.4f nats = %.4f "
                "bits per byte | val %.4f bits per byte (step %ld) | %.0f tokens/s%s | %s\n",
                s->np, c->steps, t->loss, s->bits, t->rep.last_bpb, t->rep.val_step, s->tps,
                bps, took);
    dm_job_note(t->io, "precision: %s\n", s->prec);
    char cut[512];
    if (dm_budget_summary(c->steps, c->schedule_steps, (long)c->batch_size * c->grad_accum *
                          c->seq_len, cut, sizeof cut))
        dm_job_note(t->io, "%s\n", cut);
    if (s->drift.n) {
        char line[1024];
        dm_drift_text(&s->drift, line, sizeof line);
        dm_job_note(t->io, "%s\n", line);
    }
    if (t->ranks.n > 1)
        dm_job_note(t->io, "comm: %d processes; rank 0 sent %.2f MB and spent %.1f ms in "
                    "exchanges per step (the mean over the %ld steps of this command)\n",
                    t->ranks.n,
                    1e-6 * s->cs.bytes * s->per, 1e3 * s->cs.sec * s->per, s->steps_run);
    if (s->pr.flags)
        dm_job_note(t->io, "machine: busy while training (%s: load average up to %.2f, other "
                    "work on %.2f cores, steal %.1f%%); the timings are not comparable\n",
                    s->words, s->pr.load_max, s->pr.others_cores, 100 * s->pr.steal_frac);
    else
        dm_job_note(t->io, "machine: quiet while training (load average up to %.2f)\n",
                    s->pr.load_max);
    char prog[512], q[4200];
    dm_job_prog(t->io, prog, sizeof prog);
    dm_shell_quote(t->a->out, q, sizeof q);
    dm_job_note(t->io, "next: %s sample %s | %s plot %s | %s eval %s\n", prog, q, prog, q, prog,
                q);
}

/* summary.json (rank 0) */
static void summary_json(train_ctx *t, const summary *s, const char *disp) {
    const dm_config *c = &t->cfg;
    char js[8192], mj[1024], jl[32], jb[32], jv[32], jr[32], err[8192], pol[2048];
    dm_policy_json(dm_model_policy(t->m), pol, sizeof pol); /* the backend's decision */
    pol[strcspn(pol, "\n")] = 0;
    dm_memory_json(&t->rep.mem, mj, sizeof mj);
    char dj[512] = "null"; /* the step time's drift */
    if (s->drift.n)
        snprintf(dj, sizeof dj, "{\"steps\": %ld, \"tenth\": %ld, \"early_from\": %ld, "
                 "\"late_from\": %ld, \"early_ms\": %.3f, \"late_ms\": %.3f, \"ratio\": "
                 "%.4f, \"slower\": %s}", s->drift.n, s->drift.tenth, s->drift.early_from,
                 s->drift.late_from, s->drift.early_ms, s->drift.late_ms, s->drift.ratio,
                 s->drift.slower ? "true" : "false");
    snprintf(js, sizeof js,
             "{\n  \"parameters\": %zu,\n  \"steps\": %d,\n  \"final_train_loss\": %s,\n"
             "  \"final_train_loss_bits\": %s,\n  \"val_bpb\": %s,\n  \"val_step\": %ld,\n"
             "  \"tokens_per_s\": %.1f,\n  \"wall_s\": %.2f,\n  \"wall_total_s\": %.2f,\n"
             "  \"checkpoints\": %d,\n  \"checkpoint_s\": %.3f,\n  \"threads\": %d,\n"
             "  \"processes\": %d,\n  \"grad_accum\": %d,\n  \"comm_mb_per_step\": %.3f,\n"
             "  \"comm_ms_per_step\": %.3f,\n"
             "  \"contention\": \"%s\",\n  \"contention_bits\": %u,\n  \"load_max\": %.2f,\n"
             "  \"dispatch\": \"%s\",\n  \"precision\": \"%s\",\n  \"policy\": %s,\n"
             "  \"verify_max_rel\": %s,\n"
             "  \"step_drift\": %s,\n"
             "  \"memory\": {%s},\n"
             "  \"peak_rss_bytes\": %zu\n}\n",
             s->np, c->steps, jnum(jl, sizeof jl, "%.6f", t->loss, 0),
             jnum(jb, sizeof jb, "%.6f", s->bits, 0),
             jnum(jv, sizeof jv, "%.6f", t->rep.last_bpb, 0), t->rep.val_step, s->tps, s->wall,
             t->run.wall_before + s->wall, t->run.n_ckpt, t->run.ckpt_s, t->nthreads,
             t->ranks.n, c->grad_accum, 1e-6 * s->cs.bytes * s->per, 1e3 * s->cs.sec * s->per,
             s->words, s->pr.flags, s->pr.load_max, disp, s->prec, pol,
             jnum(jr, sizeof jr, "%.3g", t->rep.verify_worst, 1), dj, mj,
             dm_peak_rss_bytes());
    if (t->ranks.rank == 0 && train_write_file(t->a->out, "summary.json", js, err, sizeof err))
        dm_fail(t->st, DM_JOB_FAILED, "%s", err);
}

/* the tables the console prints only with -v: params.txt, dispatch.txt (rank 0) */
static void write_tables(train_ctx *t, const char *disp, const char *table) {
    char *pt = NULL, err[8192];
    size_t pn = 0;
    FILE *pf = t->ranks.rank == 0 ? open_memstream(&pt, &pn) : NULL;
    if (pf) {
        dm_optim_print_groups(t->opt, t->m, pf);
        fclose(pf);
    }
    char dt[DISP_N + TABLE_N + 16];
    snprintf(dt, sizeof dt, "dispatch: %s\n%s", disp, table);
    if (t->ranks.rank == 0 && !t->st->code && pt &&
        (train_write_file(t->a->out, "params.txt", pt, err, sizeof err) ||
         train_write_file(t->a->out, "dispatch.txt", dt, err, sizeof err)))
        dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    free(pt);
}

/* the verify maximum and the atlas (also atlas.txt) */
static void verify_and_atlas(train_ctx *t) {
    if (t->rep.verify_worst >= 0)
        dm_job_note(t->io, "verify: largest fused-vs-reference relative difference %.3g (%s), "
                    "bound %.0e\n", t->rep.verify_worst, t->rep.verify_what, DM_VERIFY_BOUND);
    if (!t->rep.atlas || t->rep.atlas->steps <= 0) return;
    dm_step_drift(t->rep.step_ms, t->rep.n_step_ms, t->start + 1, &t->rep.atlas->drift);
    dm_note_buf nb;
    FILE *f = dm_note_open(&nb);
    if (f) dm_atlas_print(t->rep.atlas, f);
    dm_note_close(&nb, t->io);
    char ap[4200];
    snprintf(ap, sizeof ap, "%s/atlas.txt", t->a->out);
    FILE *af = t->ranks.rank == 0 ? fopen(ap, "w") : NULL;
    if (af) {
        dm_atlas_print(t->rep.atlas, af);
        fclose(af);
    }
}

void train_finish(train_ctx *t) {
    const dm_config *c = &t->cfg;
    char disp[DISP_N], table[TABLE_N];
    dm_model_dispatch_report(t->m, disp, sizeof disp);
    dm_model_dispatch_table(t->m, table, sizeof table);
    dm_job_detail(t->io, "dispatch: %s\n%s", disp, table);
    verify_and_atlas(t);
    if (t->st->code != DM_JOB_OK || (t->a->until > 0 && t->a->until < c->steps)) return;
    summary s;
    summarize(t, &s);
    summary_notes(t, &s);
    summary_json(t, &s, disp);
    write_tables(t, disp, table);
}
