/* train.c — the training job: the config of the run, set-up, then per step the batch,
 * forward, backward and optimizer update, the log line and evaluation, the checkpoint;
 * then the finish (counters, atlas, summary). Exact resume; a clean stop when asked. */
#include "jobs/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt.h"
#include "io/data.h"
#include "io/files.h"
#include "io/history.h"  /* the contention probe */
#include "jobs/eval.h"
#include "jobs/plan.h"    /* the memory report */
#include "ops/atlas.h"    /* dm_now, the atlas */
#include "ops/ops.h"    /* DM_VERIFY_BOUND */
#include "optim/optim.h"

typedef struct {
    const dm_train_args *a;
    const dm_job_io *io;
    dm_status *st;
    dm_config cfg;
    char data[4096];      /* the corpus path */
    char val[4096];       /* the validation corpus ("": the tail of data) */
    int nthreads;
    dm_corpus corpus;
    dm_model *m;
    dm_optim *opt;
    FILE *metrics;        /* metrics.jsonl, appended */
    uint8_t *batch;       /* [batch_size, seq_len + 1] */
    dm_atlas *atlas;      /* atlas=1, else NULL */
    dm_memory mem;        /* the memory of a training step (batch_size x seq_len) */
    long start;           /* steps done before this invocation (resume) */
    long atlas_from;      /* the atlas counts from this step (after two warm-up steps) */
    /* this step */
    float loss, lr;
    double gnorm, vrel;   /* vrel: the verify difference, -1 when not verified */
    double t0;            /* its start */
    /* since the last metrics line */
    double interval_t, loss_sum;
    int interval_n;
    /* the whole run */
    double t_start, t_train, last_bpb, verify_worst, last_tick;
    long val_step;        /* the step last_bpb was measured at */
    dm_probe probe;       /* was the machine busy while we trained (history.h) */
    char verify_what[64];
} train_ctx;

/* dir/name <- text, atomically */
static int write_run_file(const char *dir, const char *name, const char *text, char *err,
                          size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return dm_write_file_atomic(path, text, err, errlen);
}

/* Keep the lines of metrics.jsonl whose step is <= last (a resumed run continues it). */
static int trim_metrics(const char *dir, long last, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t cap = 1 << 16, len = 0;
    char *keep = malloc(cap), line[8192];
    keep[0] = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        int ok = cJSON_IsNumber(s) && s->valuedouble <= (double)last;
        cJSON_Delete(o);
        if (!ok) continue;
        size_t l = strlen(line);
        if (len + l + 1 > cap) keep = realloc(keep, cap = 2 * (len + l + 1));
        memcpy(keep + len, line, l + 1);
        len += l;
    }
    fclose(f);
    int rc = write_run_file(dir, "metrics.jsonl", keep, err, errlen);
    free(keep);
    return rc;
}

/* ---- the config of the run ---------------------------------------------------------- */

/* The config (defaults or the run's config.json, then the file, then the sets), checked;
 * and the corpus: --data, else the run's data_path, else the bundled one. */
static int run_config(train_ctx *t) {
    const dm_train_args *a = t->a;
    char path[4200], err[8192];
    dm_config saved;
    if (a->resume) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/config.json", a->out);
        if (a->cfg)
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "a resumed run takes its config from %s",
                           path);
        if (stat(path, &sb) != 0)
            return dm_fail(t->st, DM_JOB_BAD_INPUT,
                           "cannot resume: %s is not a run directory (no config.json)", a->out);
        dm_config_default(&t->cfg);
        if (dm_config_apply_file(&t->cfg, path, t->st)) return t->st->code;
        saved = t->cfg;
    } else if (a->cfg) {
        t->cfg = *a->cfg;
    } else {
        dm_config_default(&t->cfg);
    }
    if ((a->config_file && dm_config_apply_file(&t->cfg, a->config_file, t->st)) ||
        dm_config_apply_sets(&t->cfg, "--set", a->sets, a->n_sets, t->st))
        return t->st->code;
    if (dm_config_validate(&t->cfg, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "invalid config: %s", err);
    if (a->resume && dm_config_check_model(&saved, &t->cfg, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);

    /* the corpus: --data, else the resumed run's own, else the bundled one */
    snprintf(t->data, sizeof t->data, "%s", a->data ? a->data : "");
    snprintf(t->val, sizeof t->val, "%s", a->val ? a->val : "");
    if (!a->data && a->resume) {
        snprintf(path, sizeof path, "%s/data_path", a->out);
        dm_read_line(path, t->data, sizeof t->data);
    }
    if (!t->data[0] && !dm_data_path(NULL, t->data, sizeof t->data, t->st)) return t->st->code;
    if (!a->val && a->resume) {
        snprintf(path, sizeof path, "%s/val_path", a->out);
        dm_read_line(path, t->val, sizeof t->val);
    }
    return 0;
}

/* ---- set-up ------------------------------------------------------------------------- */

/* The run directory: a fresh run's files, or the resumed run's checkpoint loaded and its
 * metrics trimmed to it; then config.json. Nothing is written before the inputs are good. */
static int open_run(train_ctx *t) {
    const dm_train_args *a = t->a;
    char err[8192], p[4200];
    if (!a->resume && dm_ckpt_resolve(a->out, p, sizeof p, err, sizeof err) == 0)
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s already holds a run (%s); continue it with "
                       "--resume or choose another --out", a->out, p);
    if (dm_mkdir_p(a->out) != 0)
        return dm_fail(t->st, DM_JOB_FAILED, "cannot create run directory %s: %s", a->out,
                       strerror(errno));
    if (a->resume) {
        char dir[4096];
        dm_config saved;
        if (dm_ckpt_resolve(a->out, dir, sizeof dir, err, sizeof err) ||
            dm_ckpt_read_config(dir, &saved, &t->start, err, sizeof err) ||
            dm_ckpt_load(dir, t->m, t->opt, err, sizeof err))
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "cannot resume: %s", err);
        if (trim_metrics(a->out, t->start, err, sizeof err))
            return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
        dm_job_note(t->io, "resuming %s at step %ld of %d\n", a->out, t->start, t->cfg.steps);
    } else { /* a fresh run never mixes with an old one's files */
        snprintf(p, sizeof p, "%s/metrics.jsonl", a->out);
        unlink(p);
        snprintf(p, sizeof p, "%s/val_path", a->out);
        unlink(p);
        const char *names[2] = {"data_path", "val_path"}, *paths[2] = {t->data, t->val};
        for (int i = 0; i < 2 && paths[i][0]; i++) { /* absolute: eval finds them anywhere */
            char *abs = realpath(paths[i], NULL);
            snprintf(p, sizeof p, "%s\n", abs ? abs : paths[i]);
            free(abs);
            if (write_run_file(a->out, names[i], p, err, sizeof err))
                return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
        }
    }
    char *cj = dm_config_to_json(&t->cfg);
    int wr = write_run_file(a->out, "config.json", cj, err, sizeof err);
    free(cj);
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
}

static int set_up(train_ctx *t) {
    const dm_config *c = &t->cfg;
    char err[8192];
    t->nthreads = dm_set_threads(c->threads);
    if (dm_corpus_load(&t->corpus, t->data, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    if (t->val[0]) { /* the validation window from a corpus of its own */
        dm_corpus v;
        if (dm_corpus_load(&v, t->val, err, sizeof err))
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "--val: %s", err);
        int rc = dm_corpus_split_val(&t->corpus, &v, c->eval_window, c->seq_len, err, sizeof err);
        dm_corpus_free(&v);
        if (rc) return dm_fail(t->st, DM_JOB_BAD_INPUT, "--val %s: %s", t->val, err);
    } else if (dm_corpus_split(&t->corpus, c->eval_window, c->seq_len, err, sizeof err)) {
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    }
    t->m = dm_model_create(c, err, sizeof err);
    if (!t->m) return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    t->opt = dm_optim_create(t->m, c, err, sizeof err);
    if (!t->opt) return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    if (open_run(t)) return t->st->code;
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->a->out);
    t->metrics = fopen(mpath, "a");
    if (!t->metrics) return dm_fail(t->st, DM_JOB_FAILED, "cannot open metrics.jsonl");
    t->batch = malloc((size_t)c->batch_size * (c->seq_len + 1));
    if (!t->batch) return dm_fail(t->st, DM_JOB_FAILED, "out of memory");
    if (dm_model_reserve(t->m, c->batch_size, c->seq_len, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);

    dm_job_note(t->io, "dormouse train: %s mixer, d_model %d, %d layer%s, %d head%s x %d, %zu "
                "parameters\n", c->mixer == DM_MIXER_KDA ? "kda" : "gdn", c->d_model,
                c->n_layer, c->n_layer == 1 ? "" : "s", c->n_head, c->n_head == 1 ? "" : "s",
                c->head_dim, dm_model_num_params(t->m));
    if (t->val[0])
        dm_job_note(t->io, "corpus %s: %zu bytes, all train; validation: the last %ld bytes of "
                    "%s; batch %d x %d; %d steps; %d thread%s\n", t->data, t->corpus.train_n,
                    c->eval_window, t->val, c->batch_size, c->seq_len, c->steps, t->nthreads,
                    t->nthreads == 1 ? "" : "s");
    else
        dm_job_note(t->io, "corpus %s: %zu bytes (%zu train, the last %ld validation); batch %d "
                    "x %d; %d steps; %d thread%s\n", t->data, t->corpus.n, t->corpus.train_n,
                    c->eval_window, c->batch_size, c->seq_len, c->steps, t->nthreads,
                    t->nthreads == 1 ? "" : "s");
    dm_job_note(t->io, "run directory %s: config.json, metrics.jsonl, checkpoints "
                "ckpt-NNNNNNNN/, summary.json\n", t->a->out);
    char line[1024];
    if (!dm_memory_report(t->m, t->opt, &t->mem)) {
        dm_memory_line(&t->mem, c->checkpointing, line, sizeof line);
        dm_job_note(t->io, "%s\n", line);
    }
    dm_note_buf nb;
    FILE *f = dm_note_open(&nb);
    if (f) dm_optim_print_groups(t->opt, t->m, f);
    dm_note_close(&nb, t->io);

    /* the atlas (atlas=1): every op and stage timed, after two warm-up steps */
    t->atlas = c->atlas ? calloc(1, sizeof *t->atlas) : NULL;
    if (t->atlas) {
        dm_model_set_atlas(t->m, t->atlas);
        dm_optim_set_atlas(t->opt, t->atlas);
    }
    t->atlas_from = t->start + (c->steps - t->start > 4 ? 2 : 0);
    t->t_start = t->last_tick = dm_now();
    dm_probe_begin(&t->probe);
    t->last_bpb = NAN;
    t->loss = NAN;
    t->verify_worst = -1;
    return 0;
}

/* ---- one step ----------------------------------------------------------------------- */

/* Batch, forward, backward, optimizer update (and verify on its cadence) of 0-based step. */
static int one_step(train_ctx *t, long step) {
    const dm_config *c = &t->cfg;
    if (t->atlas && step == t->atlas_from) dm_atlas_reset(t->atlas);
    /* verify_fused=N: fused and reference paths both run on every N-th step */
    int verify = c->verify_fused > 0 && (step + 1) % c->verify_fused == 0;
    dm_model_set_verify(t->m, verify);
    double t0 = t->t0 = dm_now();
    dm_corpus_batch(&t->corpus, c->seed, step, c->batch_size, c->seq_len, t->batch);
    double t1 = dm_now();
    t->loss = dm_model_forward(t->m, t->batch, c->batch_size, c->seq_len, NULL);
    double t2 = dm_now();
    if (!isfinite(t->loss))
        return dm_fail(t->st, DM_JOB_FAILED, "loss is %g at step %ld; stopping (the last "
                       "checkpoint in %s is kept)", t->loss, step + 1, t->a->out);
    dm_model_zero_grad(t->m);
    dm_model_backward(t->m);
    dm_model_set_verify(t->m, 0);
    double t3 = dm_now();
    t->lr = c->lr * dm_lr_factor(c, step);
    t->gnorm = dm_optim_step(t->opt, t->m, step);
    if (t->atlas) {
        dm_atlas_stage(t->atlas, DM_ST_DATA, t1 - t0);
        dm_atlas_stage(t->atlas, DM_ST_FORWARD, t2 - t1);
        dm_atlas_stage(t->atlas, DM_ST_BACKWARD, t3 - t2);
        dm_atlas_stage(t->atlas, DM_ST_OPTIMIZER, dm_now() - t3);
        t->atlas->steps++;
    }
    if (!isfinite(t->gnorm))
        return dm_fail(t->st, DM_JOB_FAILED, "gradient norm is %g at step %ld; stopping (the "
                       "last checkpoint in %s is kept)", t->gnorm, step + 1, t->a->out);
    t->vrel = -1;
    if (verify) {
        char what[64];
        t->vrel = dm_model_verify_take(t->m, what, sizeof what);
        if (t->vrel > t->verify_worst) {
            t->verify_worst = t->vrel;
            snprintf(t->verify_what, sizeof t->verify_what, "%s", what);
        }
        if (!(t->vrel <= DM_VERIFY_BOUND))
            return dm_fail(t->st, DM_JOB_FAILED, "verify at step %ld: fused and reference "
                           "differ by %.3g (relative RMS, %s) > %.0e", step + 1, t->vrel, what,
                           DM_VERIFY_BOUND);
    }
    return 0;
}

/* ---- log and evaluation ------------------------------------------------------------- */

/* After `done` steps: the validation BPB on its cadence, the metrics line, the step event. */
static int log_eval(train_ctx *t, long done) {
    const dm_config *c = &t->cfg;
    double dt = dm_now() - t->t0;
    t->t_train += dt;
    t->interval_t += dt;
    t->interval_n++;
    t->loss_sum += t->loss;
    int last = done == c->steps;
    int do_eval = last || (c->eval_every > 0 && done % c->eval_every == 0);
    if (do_eval) {
        double te = dm_now();
        dm_model_set_atlas(t->m, NULL); /* the op table is per training step */
        t->last_bpb = dm_eval_bpb(t->m, t->corpus.bytes + t->corpus.train_n,
                                  t->corpus.n - t->corpus.train_n, c->batch_size, c->seq_len);
        dm_model_set_atlas(t->m, t->atlas);
        if (t->atlas) dm_atlas_stage(t->atlas, DM_ST_EVAL, dm_now() - te);
        if (!isfinite(t->last_bpb))
            return dm_fail(t->st, DM_JOB_FAILED, "validation BPB is %g at step %ld",
                           t->last_bpb, done);
        t->val_step = done;
    }
    if (dm_now() - t->last_tick >= 1) { /* the probe samples the load about once a second */
        dm_probe_tick(&t->probe);
        t->last_tick = dm_now();
    }
    double ms = 1e3 * t->interval_t / t->interval_n;
    double tps = (double)c->batch_size * c->seq_len / (t->interval_t / t->interval_n);
    int logged = done % c->log_every == 0 || last || do_eval;
    if (logged) {
        fprintf(t->metrics,
                "{\"step\": %ld, \"loss\": %.9g, \"loss_avg\": %.6f, \"lr\": %.6g, "
                "\"grad_norm\": %.6g, \"ms_per_step\": %.2f, \"tokens_per_s\": %.1f, "
                "\"elapsed_s\": %.2f",
                done, t->loss, t->loss_sum / t->interval_n, t->lr, t->gnorm, ms, tps,
                dm_now() - t->t_start);
        if (do_eval) fprintf(t->metrics, ", \"val_bpb\": %.6f", t->last_bpb);
        if (t->vrel >= 0) fprintf(t->metrics, ", \"verify_max_rel\": %.3g", t->vrel);
        fprintf(t->metrics, "}\n");
        fflush(t->metrics);
    }
    dm_event ev = {0};
    ev.kind = DM_EV_STEP;
    ev.step = done;
    ev.steps = c->steps;
    ev.loss = t->loss;
    ev.val_bpb = t->last_bpb;
    ev.val_step = t->val_step;
    ev.ms_per_step = ms;
    ev.tokens_per_s = tps;
    ev.eta_s = (c->steps - done) * (t->t_train / (done - t->start));
    ev.logged = logged;
    dm_job_emit(t->io, &ev);
    if (done % c->log_every == 0 || last) {
        t->interval_t = 0;
        t->interval_n = 0;
        t->loss_sum = 0;
    }
    return 0;
}

/* ---- checkpoint --------------------------------------------------------------------- */

/* The checkpoint after `done` steps when one is due (the end, ckpt_every, --until, a stop
 * asked for). Returns 1 when the run stops here (st set when not OK), else 0. */
static int checkpoint(train_ctx *t, long done) {
    const dm_config *c = &t->cfg;
    char err[8192];
    int last = done == c->steps, stop = dm_job_stopped(t->io);
    int until = t->a->until > 0 && done == t->a->until && !last;
    if (last || stop || until || (c->ckpt_every > 0 && done % c->ckpt_every == 0)) {
        if (dm_ckpt_save(t->a->out, t->m, t->opt, done, err, sizeof err)) {
            dm_fail(t->st, DM_JOB_FAILED, "%s", err);
            return 1;
        }
    }
    char prog[512], out[4200];
    dm_job_prog(t->io, prog, sizeof prog);
    dm_shell_quote(t->a->out, out, sizeof out);
    if (until) {
        dm_job_note(t->io, "stopped at step %ld (--until): checkpoint saved; continue with "
                    "`%s train --resume %s`\n", done, prog, out);
        return 1;
    }
    if (stop && !last) {
        dm_fail(t->st, DM_JOB_INTERRUPTED, "interrupted at step %ld: checkpoint saved; "
                "continue with `%s train --resume %s`", done, prog, out);
        return 1;
    }
    return 0;
}

/* ---- finish ------------------------------------------------------------------------- */

/* The dispatch counters, the verify bound, the atlas (also atlas.txt) and, for a run that
 * reached its steps, the summary (also summary.json). */
static void finish(train_ctx *t) {
    const dm_config *c = &t->cfg;
    const char *out = t->a->out;
    char disp[4096], table[8192], err[8192];
    dm_model_dispatch_report(t->m, disp, sizeof disp);
    dm_model_dispatch_table(t->m, table, sizeof table);
    dm_job_note(t->io, "dispatch: %s\n%s", disp, table);
    if (t->verify_worst >= 0)
        dm_job_note(t->io, "verify: largest fused-vs-reference relative difference %.3g (%s), "
                    "bound %.0e\n", t->verify_worst, t->verify_what, DM_VERIFY_BOUND);
    if (t->atlas && t->atlas->steps > 0) {
        dm_note_buf nb;
        FILE *f = dm_note_open(&nb);
        if (f) dm_atlas_print(t->atlas, f);
        dm_note_close(&nb, t->io);
        char ap[4200];
        snprintf(ap, sizeof ap, "%s/atlas.txt", out);
        FILE *af = fopen(ap, "w");
        if (af) {
            dm_atlas_print(t->atlas, af);
            fclose(af);
        }
    }
    if (t->st->code != DM_JOB_OK || (t->a->until > 0 && t->a->until < c->steps)) return;
    long steps_run = c->steps - t->start;
    double tps = steps_run > 0 ? steps_run * (double)c->batch_size * c->seq_len / t->t_train : 0;
    double wall = dm_now() - t->t_start;
    size_t np = dm_model_num_params(t->m);
    /* the loss in both units: cross-entropy in nats (as trained), and in bits per byte
     * like the validation BPB (nats / ln 2) */
    double bits = t->loss / log(2.0);
    dm_probe_result pr;
    dm_probe_end(&t->probe, t->nthreads, &pr);
    char words[64];
    dm_probe_flags_text(pr.flags, words, sizeof words);
    dm_job_note(t->io, "summary: %zu parameters | %d steps | final train loss %.4f nats = %.4f "
                "bits per byte | val %.4f bits per byte (step %ld) | %.0f tokens/s | %.1f s\n",
                np, c->steps, t->loss, bits, t->last_bpb, t->val_step, tps, wall);
    if (pr.flags)
        dm_job_note(t->io, "machine: busy while training (%s: load average up to %.2f, other "
                    "work on %.2f cores, steal %.1f%%); the timings are not comparable\n",
                    words, pr.load_max, pr.others_cores, 100 * pr.steal_frac);
    else
        dm_job_note(t->io, "machine: quiet while training (load average up to %.2f)\n",
                    pr.load_max);
    char prog[512], q[4200];
    dm_job_prog(t->io, prog, sizeof prog);
    dm_shell_quote(out, q, sizeof q);
    dm_job_note(t->io, "next: %s sample %s | %s plot %s | %s eval %s\n", prog, q, prog, q, prog,
                q);
    char js[8192], mj[1024];
    dm_memory_json(&t->mem, mj, sizeof mj);
    snprintf(js, sizeof js,
             "{\n  \"parameters\": %zu,\n  \"steps\": %d,\n  \"final_train_loss\": %.6f,\n"
             "  \"final_train_loss_bits\": %.6f,\n  \"val_bpb\": %.6f,\n  \"val_step\": %ld,\n"
             "  \"tokens_per_s\": %.1f,\n  \"wall_s\": %.2f,\n  \"threads\": %d,\n"
             "  \"contention\": \"%s\",\n  \"contention_bits\": %u,\n  \"load_max\": %.2f,\n"
             "  \"dispatch\": \"%s\",\n  \"verify_max_rel\": %.3g,\n  \"memory\": {%s},\n"
             "  \"peak_rss_bytes\": %zu\n}\n",
             np, c->steps, t->loss, bits, t->last_bpb, t->val_step, tps, wall, t->nthreads, words,
             pr.flags, pr.load_max, disp, t->verify_worst, mj, dm_peak_rss_bytes());
    if (write_run_file(out, "summary.json", js, err, sizeof err))
        dm_fail(t->st, DM_JOB_FAILED, "%s", err);
}

dm_status dm_train(const dm_train_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    train_ctx t = {.a = a, .io = io, .st = &st};
    if (!run_config(&t) && !set_up(&t)) {
        for (long step = t.start; step < t.cfg.steps; step++)
            if (one_step(&t, step) || log_eval(&t, step + 1) || checkpoint(&t, step + 1)) break;
        finish(&t);
    }
    if (t.m) dm_model_set_atlas(t.m, NULL);
    free(t.atlas);
    if (t.metrics) fclose(t.metrics);
    free(t.batch);
    dm_optim_free(t.opt);
    dm_model_free(t.m);
    dm_corpus_free(&t.corpus);
    return st;
}
