/* train.c — the training job: the config of the run, set-up, then per step the batch,
 * forward, backward and optimizer update, the log line and evaluation, the checkpoint;
 * then the finish (counters, atlas, summary). Exact resume; a clean stop when asked.
 *
 * Under mpirun (a->comm with N ranks, docs/scaling.md) every rank runs this job: rank 0
 * alone reads and writes the run directory (config, checkpoints, metrics, summary) and
 * sends the config, the parameters and the optimizer state to the others at the start;
 * each step runs its share of the micro-batches (jobs/step.h) and the evaluation its share
 * of the window. The ranks agree after set-up, after every step and after every
 * checkpoint (dm_comm_agree): a failure on any rank, or a stop asked of any, stops them
 * all at the same point with the first failing rank's message. */
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
#include "io/linelog.h"
#include "io/metrics.h"  /* a resumed run's wall time so far */
#include "io/rundir.h"
#include "jobs/budget.h"
#include "jobs/eval.h"
#include "jobs/fair.h"
#include "jobs/load.h"
#include "jobs/plan.h"    /* the memory report */
#include "jobs/resume.h"
#include "jobs/step.h"
#include "model/host.h"
#include "model/model.h"   /* the precision record */
#include "ops/atlas.h"    /* the atlas */
#include "ops/backend.h"
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
    dm_linelog metrics;   /* metrics.jsonl, appended (rank 0; fd -1 when not open) */
    int metrics_behind;   /* lines wait in memory for the disk (noted once) */
    long metrics_lost;    /* the step whose line could not even be kept; 0: none */
    dm_comm *comm;        /* the ranks of the run (NULL: one process) */
    int rank, nranks;
    dm_stepper stepper;   /* the step over micro-batches and ranks */
    int stop;             /* a stop asked for, agreed by every rank */
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
    /* the time budget and ckpt_time, on the clock of the args (clock_of) */
    double t_job;         /* when the job began (time_budget counts from it) */
    int budgeted;         /* a fresh run with a time_budget */
    long fit_at;          /* time_budget: steps are fixed after this step (0: not pending) */
    double fit_dt[DM_BUDGET_MEASURE]; /* the measured steps' times, seconds */
    double mark, excluded; /* the last step's end; evaluation and checkpoint time since */
    double recent[DM_BUDGET_WINDOW]; /* the last steps' times (a ring) */
    int n_recent;
    double eval_s;        /* the last evaluation's time */
    double ckpt_mark, ckpt_s; /* the last checkpoint's end; the time spent saving them */
    int n_ckpt;
    double wall_before;   /* a resumed run's wall time before this invocation */
    double t_start, t_train, last_bpb, verify_worst, last_tick;
    long val_step;        /* the step last_bpb was measured at */
    dm_probe probe;       /* was the machine busy while we trained (history.h) */
    char verify_what[64];
    /* the run directory (rank 0): locked while we write it; undone when we fail before
     * saving a checkpoint */
    dm_rundir rd;
    int rd_open;
    long last_ckpt;       /* the step of the newest checkpoint in the run; -1: none */
    int saved;            /* this invocation saved a checkpoint */
    /* A resume is on probation (docs/robustness.md) from the checkpoint it loaded (step
     * `start`) until a step after the first checkpoint it saves is finite. Meanwhile the
     * checkpoint before the loaded one is not pruned, and a non-finite step falls back to
     * it (one process) or stops with it kept. */
    int probation;
    long fallback;        /* the step of the checkpoint before the loaded one; -1: none */
    long first_saved;     /* the first checkpoint this invocation saved; -1: none yet */
    long upto;            /* > 0: resume from a checkpoint of at most this step */
    long *fall_to;        /* set to `fallback` when a step falls back; NULL: none may */
    int fell_back;        /* this invocation is a fallback's */
    int eval_cut;         /* the last evaluation was cut short by a stop */
} train_ctx;

/* now on the job's clock: the args' (a test's) or the monotonic one */
static double clock_of(const train_ctx *t) {
    return t->a->clock ? t->a->clock(t->a->clock_ctx) : dm_now();
}

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

/* ---- the run directory -------------------------------------------------------------- */

/* Create (a fresh run) and lock the run directory: a second writer is refused. */
static int lock_run(train_ctx *t, int create) {
    char err[8192];
    int rc = dm_rundir_open(&t->rd, t->a->out, create, t->a->locked, err, sizeof err);
    if (rc == DM_RUNDIR_OK) t->rd_open = 1;
    return rc == DM_RUNDIR_OK ? 0
         : dm_fail(t->st, rc == DM_RUNDIR_BUSY ? DM_JOB_BAD_INPUT : DM_JOB_FAILED, "%s", err);
}

/* What a failure keeps, for its message. */
static const char *kept(const train_ctx *t, char *buf, size_t n) {
    if (t->last_ckpt >= 0)
        snprintf(buf, n, "the checkpoint of step %ld in %s is kept", t->last_ckpt, t->a->out);
    else
        snprintf(buf, n, "no checkpoint was saved, so %s is left as it was", t->a->out);
    return buf;
}

/* The corpus as the user knows it, with its files' real sizes: "the corpus PATH (N
 * bytes)", with --val "... and the validation corpus VAL (M bytes)". */
static void corpus_text(const train_ctx *t, char *buf, size_t n) {
    const dm_corpus *c = &t->corpus;
    if (c->val_bytes)
        snprintf(buf, n, "the corpus %s (%zu bytes) with the validation corpus %s (%zu bytes)",
                 t->data, c->train_n, t->val, c->val_n);
    else
        snprintf(buf, n, "the corpus %s (%zu bytes)", t->data, c->n);
}

/* The step of the k-th checkpoint of a run directory, newest first; -1 when none. */
static long ckpt_step_at(const char *dir, int k) {
    char p[4200], err[256];
    long step = -1;
    if (dm_ckpt_candidate(dir, k, p, sizeof p, err, sizeof err)) return -1;
    char *slash = strrchr(p, '/');
    if (!slash) return -1;
    *slash = 0; /* RUN/ckpt-NNNNNNNN */
    slash = strrchr(p, '/');
    return sscanf(slash ? slash + 1 : p, "ckpt-%ld", &step) == 1 ? step : -1;
}

/* The corpus must be the one the run trained on: same size, same CRC-32, split into the
 * same training bytes (a run of an older dormouse, without them, gets them recorded now).
 * The identity covers the training bytes and the validation window; the message gives
 * the files' own sizes. */
static int check_run_corpus(train_ctx *t) {
    char err[8192], path[4096], now[8400], was[256];
    size_t n, train;
    uint32_t crc, have = dm_corpus_crc32(&t->corpus);
    int has_id;
    if (dm_rundir_read_data(t->a->out, path, sizeof path, &n, &crc, &train, &has_id, err,
                            sizeof err))
        has_id = 0;
    if (has_id && (n != t->corpus.n || crc != have)) {
        corpus_text(t, now, sizeof now);
        long w = t->cfg.eval_window;
        if (t->val[0] && n > (size_t)w)
            snprintf(was, sizeof was, "%zu bytes of corpus and a %ld-byte validation window, "
                     "crc32 %08x", n - (size_t)w, w, (unsigned)crc);
        else
            snprintf(was, sizeof was, "%zu bytes, crc32 %08x", n, (unsigned)crc);
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s is not the one %s trained on (%s); resume "
                       "with that corpus", now, t->a->out, was);
    }
    if (has_id && train && train != t->corpus.train_n) { /* the same bytes, split elsewhere */
        corpus_text(t, now, sizeof now);
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s holds the bytes %s trained on, split into "
                       "%zu training bytes where the run had %zu (another split: prepare's "
                       "--val-bytes or --val-fraction, or eval_window); resume with the run's "
                       "split", now, t->a->out, t->corpus.train_n, train);
    }
    if (!has_id)
        dm_job_note(t->io, "note: %s/data_path had no corpus size and CRC (a run of an older "
                    "dormouse); recording those of %s\n", t->a->out, t->data);
    if (has_id && train && !strcmp(path, t->data)) return 0;
    char *abs = realpath(t->data, NULL);
    int wr = dm_rundir_write_data(t->a->out, abs ? abs : t->data, t->corpus.n, have,
                                  t->corpus.train_n, err, sizeof err);
    free(abs);
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
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
        if (lock_run(t, 0)) return t->st->code;
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
    if (a->resume && t->cfg.time_budget != saved.time_budget)
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "time_budget fixes the steps of a fresh run; "
                       "%s keeps the steps it recorded (steps=%d; change them with --set "
                       "steps=N)", a->out, saved.steps);

    /* the corpus: --data, else the resumed run's own, else the bundled one */
    snprintf(t->data, sizeof t->data, "%s", a->data ? a->data : "");
    snprintf(t->val, sizeof t->val, "%s", a->val ? a->val : "");
    if (!a->data && a->resume) {
        size_t n, train;
        uint32_t crc;
        int has_id;
        if (dm_rundir_read_data(a->out, t->data, sizeof t->data, &n, &crc, &train, &has_id, err,
                                sizeof err))
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "cannot resume: %s (name the corpus with "
                           "--data)", err);
    }
    if (!t->data[0] && !dm_data_path(NULL, t->data, sizeof t->data, t->st)) return t->st->code;
    if (!a->val && a->resume) {
        snprintf(path, sizeof path, "%s/val_path", a->out);
        dm_read_line(path, t->val, sizeof t->val);
    }
    return 0;
}

/* ---- the ranks ---------------------------------------------------------------------- */

/* The status of every rank agreed (the first failing rank's), and a stop asked of any
 * (the signal that asked, which every rank then carries in io->stop: they all exit as
 * the one that was signalled); one process: its own. Returns the status code. */
static int agree(train_ctx *t) {
    int code = (int)t->st->code, failed;
    t->stop = dm_job_agree(t->io, t->comm, &code, t->st->msg, sizeof t->st->msg, &failed) != 0;
    t->st->code = (dm_job_code)code;
    return code;
}

/* A failed exchange between ranks as the status (0 when none failed). */
static int comm_failed(train_ctx *t) {
    const char *e = dm_comm_error(t->comm);
    return e[0] ? dm_fail(t->st, DM_JOB_FAILED, "%s", e) : 0;
}

/* Rank 0's config to every rank, and its corpus paths unless --data / --val name them
 * (rank 0 read the run directory). */
static int share_config(train_ctx *t) {
    if (t->nranks == 1) return 0;
    if (dm_comm_bcast(t->comm, &t->cfg, sizeof t->cfg, 1, 0) ||
        (!t->a->data && dm_comm_bcast(t->comm, t->data, sizeof t->data, 1, 0)) ||
        (!t->a->val && dm_comm_bcast(t->comm, t->val, sizeof t->val, 1, 0)))
        return comm_failed(t);
    dm_comm_set_timeout(t->comm, (double)t->cfg.comm_timeout); /* rank 0's, on every rank */
    if (t->a->data) snprintf(t->data, sizeof t->data, "%s", t->a->data);
    if (t->a->val) snprintf(t->val, sizeof t->val, "%s", t->a->val);
    return 0;
}

/* After set-up: rank 0's step count, parameters and optimizer state (a resumed run's, or
 * the fresh init every rank also made) to every rank. */
static int share_state(train_ctx *t) {
    if (t->nranks == 1) return 0;
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS + 1];
    int nb = dm_optim_state(t->opt, bufs + 1, DM_OPTIM_MAX_BUFS);
    bufs[0] = (dm_optim_buf){"params", dm_model_param_mem(t->m), dm_model_num_params(t->m)};
    int rc = dm_comm_bcast(t->comm, &t->start, 1, sizeof t->start, 0);
    dm_backend *be = dm_model_backend(t->m);
    for (int i = 0; i <= nb && !rc; i++) { /* each through host memory */
        size_t bytes = bufs[i].n * sizeof(float);
        float *h = dm_backend_map(be, bufs[i].data, bytes, t->rank == 0);
        if (!h) return dm_fail(t->st, DM_JOB_FAILED, "out of memory sharing the state");
        rc = dm_comm_bcast(t->comm, h, bufs[i].n, sizeof(float), 0);
        dm_backend_unmap(be, bufs[i].data, h, bytes, t->rank != 0);
    }
    return rc ? comm_failed(t) : 0;
}

/* Every rank's corpus against rank 0's (size and CRC-32): the same on every rank. */
static int check_corpus(train_ctx *t) {
    if (t->nranks == 1) return 0;
    int N = t->nranks, rc;
    uint64_t *fp = calloc((size_t)N * 2, sizeof *fp);
    size_t *off = malloc(sizeof(size_t) * (size_t)(N + 1));
    if (!fp || !off) {
        free(fp);
        free(off);
        return dm_fail(t->st, DM_JOB_FAILED, "out of memory");
    }
    for (int r = 0; r <= N; r++) off[r] = (size_t)r * 2 * sizeof *fp;
    fp[2 * t->rank] = t->corpus.n;
    fp[2 * t->rank + 1] = dm_corpus_crc32(&t->corpus);
    rc = dm_comm_allgather(t->comm, fp, off, 1);
    for (int r = 1; r < N && !rc && !t->st->code; r++)
        if (fp[2 * r] != fp[0] || fp[2 * r + 1] != fp[1])
            dm_fail(t->st, DM_JOB_BAD_INPUT, "the corpus %s differs between ranks: rank 0 has "
                    "%llu bytes (CRC-32 %08llx), rank %d %llu bytes (CRC-32 %08llx); every "
                    "machine needs the same corpus at that path", t->data,
                    (unsigned long long)fp[0], (unsigned long long)fp[1], r,
                    (unsigned long long)fp[2 * r], (unsigned long long)fp[2 * r + 1]);
    free(fp);
    free(off);
    return rc ? comm_failed(t) : (int)t->st->code;
}

/* ---- set-up ------------------------------------------------------------------------- */

/* The run directory: a fresh run's files, or the resumed run's newest checkpoint that
 * loads and its metrics trimmed to it; then config.json. Nothing is written before the
 * inputs are good, and what is written is undone if the command fails before it saves a
 * checkpoint (dm_rundir_remember). */
static int open_run(train_ctx *t) {
    const dm_train_args *a = t->a;
    char err[8192], p[4200];
    struct stat sb;
    if (!a->resume) {
        if (stat(a->out, &sb) == 0 && !S_ISDIR(sb.st_mode))
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "--out %s is not a directory", a->out);
        if (lock_run(t, 1)) return t->st->code;
        if (dm_ckpt_resolve(a->out, p, sizeof p, err, sizeof err) == 0)
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s already holds a run (%s); continue it "
                           "with --resume or choose another --out", a->out, p);
    }
    if (dm_rundir_remember(&t->rd, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    if (a->resume) {
        dm_ckpt_iter it = {.path = a->out, .with_optim = 1, .upto = t->upto};
        dm_ckpt *ck;
        dm_config saved;
        int rc = DM_CKPT_DAMAGED;
        while (rc != DM_CKPT_OK && (ck = dm_ckpt_next(&it, t->st))) {
            rc = dm_ckpt_into(ck, t->m, t->opt, err, sizeof err);
            t->start = dm_ckpt_step(ck);
            saved = *dm_ckpt_config(ck);
            dm_ckpt_close(ck);
            if (rc == DM_CKPT_MISMATCH) return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
            if (rc != DM_CKPT_OK) dm_ckpt_skip(&it, err);
        }
        if (rc != DM_CKPT_OK) {
            char why[sizeof t->st->msg];
            snprintf(why, sizeof why, "%s", t->st->msg);
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "cannot resume: %s", why);
        }
        dm_ckpt_loaded(&it, t->io);
        if (dm_resume_config(&saved, &t->cfg, a->sets, a->n_sets, a->out, t->start, t->io, t->st))
            return t->st->code;
        t->last_ckpt = t->start;
        t->probation = 1;
        t->fallback = ckpt_step_at(a->out, it.k); /* the candidates after it are older */
        if (t->start >= t->cfg.steps)
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s is at step %ld, steps=%d: nothing to "
                           "train (raise steps with --set steps=N, N > %ld)", a->out, t->start,
                           t->cfg.steps, t->start);
        if (a->until > 0 && a->until <= t->start)
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "--until %ld: %s is already at step %ld",
                           a->until, a->out, t->start);
        if (check_run_corpus(t)) return t->st->code;
        if (trim_metrics(a->out, t->start, err, sizeof err))
            return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
        dm_metrics mt;
        snprintf(p, sizeof p, "%s/metrics.jsonl", a->out);
        if (dm_metrics_read(p, &mt, err, sizeof err) == 0) {
            t->wall_before = dm_metrics_wall(&mt);
            dm_metrics_free(&mt);
        }
        dm_job_note(t->io, "resuming %s at step %ld of %d\n", a->out, t->start, t->cfg.steps);
    } else { /* a fresh run never mixes with an old one's files */
        snprintf(p, sizeof p, "%s/metrics.jsonl", a->out);
        unlink(p);
        snprintf(p, sizeof p, "%s/val_path", a->out);
        unlink(p);
        /* absolute paths: eval finds them anywhere; the corpus with its size and CRC-32 */
        char *abs = realpath(t->data, NULL);
        int wr = dm_rundir_write_data(a->out, abs ? abs : t->data, t->corpus.n,
                                      dm_corpus_crc32(&t->corpus), t->corpus.train_n, err,
                                      sizeof err);
        free(abs);
        if (!wr && t->val[0]) {
            abs = realpath(t->val, NULL);
            snprintf(p, sizeof p, "%s\n", abs ? abs : t->val);
            free(abs);
            wr = write_run_file(a->out, "val_path", p, err, sizeof err);
        }
        if (wr) return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    }
    char *cj = dm_config_to_json(&t->cfg);
    int wr = write_run_file(a->out, "config.json", cj, err, sizeof err);
    free(cj);
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
}

/* Every rank: the corpus, the model, the optimizer, the step. Nothing is written. */
static int set_up(train_ctx *t) {
    const dm_config *c = &t->cfg;
    char err[8192];
    t->nthreads = dm_fair_threads(c, t->comm, t->io, 0, NULL);
    if (dm_memory_fits(c, c->batch_size, c->seq_len, t->nthreads, NULL, t->st))
        return t->st->code;
    if (dm_corpus_load(&t->corpus, t->data, err, sizeof err))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
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
    t->m = dm_model_create(c, err, sizeof err);
    if (!t->m) return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s", err);
    t->opt = dm_optim_create(t->m, c, err, sizeof err);
    if (!t->opt) return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    if (dm_stepper_init(&t->stepper, t->m, t->opt, c, t->comm, err, sizeof err))
        return dm_fail(t->st, c->grad_accum % t->nranks ? DM_JOB_BAD_INPUT : DM_JOB_FAILED,
                       "%s", err);
    if (dm_model_reserve(t->m, c->batch_size, c->seq_len, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    return 0;
}

/* Rank 0, once every rank is set up: the run directory (a resumed run's checkpoint
 * loaded) and metrics.jsonl. */
static int open_files(train_ctx *t) {
    if (t->rank != 0 || open_run(t)) return t->st->code;
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->a->out);
    char err[4400];
    if (dm_linelog_open(&t->metrics, mpath, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    return 0;
}

/* ---- the time budget ---------------------------------------------------------------- */

/* time_budget on a fresh run: the steps of the warmup (at most DM_BUDGET_MEASURE of them;
 * up to --until when that comes first) train as any run's, their times are measured, and
 * after them `steps` is fixed. The warmup's learning rates do not depend on `steps`
 * (optim.h: dm_lr_factor), so the run is, bit for bit, the run with the steps fixed here
 * (which config.json records). Until then `steps` is the key's largest value and nothing
 * is checkpointed. */
static void budget_begin(train_ctx *t) {
    dm_config *c = &t->cfg;
    t->budgeted = 1;
    t->fit_at = c->warmup_steps < DM_BUDGET_MEASURE ? c->warmup_steps : DM_BUDGET_MEASURE;
    if (t->a->until > 0 && t->a->until < t->fit_at) t->fit_at = t->a->until;
    c->steps = DM_BUDGET_UNFIXED;
    c->schedule_steps = 0;
    dm_optim_set_steps(t->opt, c->steps, 0);
}

/* config.json after the budget changed steps (rank 0) */
static int record_steps(train_ctx *t) {
    char err[8192];
    if (t->rank != 0) return 0;
    char *cj = dm_config_to_json(&t->cfg);
    int wr = write_run_file(t->a->out, "config.json", cj, err, sizeof err);
    free(cj);
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
}

/* rank 0's value of *v on every rank */
static int from_rank0(train_ctx *t, long *v) {
    return t->nranks > 1 && dm_comm_bcast(t->comm, v, 1, sizeof *v, 0) ? comm_failed(t) : 0;
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
    double step_s = mean_of(t->fit_dt, 1, done);
    double need = (now - t->t_job) + (double)(t->fit_at - done + 1) * step_s +
                  2 * dm_budget_eval_guess(step_s, val_bytes(t), c->batch_size, c->seq_len);
    if (t->rank == 0) early = need > (1.0 - DM_BUDGET_RESERVE) * (double)c->time_budget;
    if (from_rank0(t, &early)) return -1;
    return (int)early;
}

/* After step `done` (fit_at, or earlier when the budget cannot hold the measured steps;
 * every rank): one timed evaluation (not logged; early, the estimate instead, which costs
 * no time), then the steps that fit from the mean time of the measured steps after the
 * first; rank 0's figures decide for every rank. */
static int fit_budget(train_ctx *t, long done, int early) {
    dm_config *c = &t->cfg;
    /* the first step warms the caches up: left out when there are more */
    double step_s = mean_of(t->fit_dt, done > 1, done), now = clock_of(t);
    if (early) {
        t->eval_s = dm_budget_eval_guess(step_s, val_bytes(t), c->batch_size, c->seq_len);
    } else {
        double te = now;
        size_t scored;
        double bpb = dm_eval_val_fp32(t->m, &t->corpus, c->eval_window, c->eval_windows,
                                      c->batch_size, c->seq_len, t->comm, t->io, &scored);
        now = clock_of(t);
        t->eval_s = now - te;
        if (isnan(bpb) && dm_job_stopped(t->io)) /* cut short by a stop: its time says nothing */
            t->eval_s = dm_budget_eval_guess(step_s, val_bytes(t), c->batch_size, c->seq_len);
        t->excluded += t->eval_s;
        if (dm_comm_error(t->comm)[0]) return comm_failed(t);
        char err[8192]; /* the arena back to the step's shape (the evaluation's last was shorter) */
        if (dm_model_reserve(t->m, c->batch_size, c->seq_len, err, sizeof err))
            return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    }
    double elapsed = now - t->t_job;
    long steps = dm_budget_steps((double)c->time_budget, elapsed, done, step_s, t->eval_s,
                                 c->eval_every, DM_BUDGET_UNFIXED);
    if (from_rank0(t, &steps)) return t->st->code;
    char bud[32];
    dm_fmt_duration(bud, sizeof bud, (double)c->time_budget);
    if (steps <= done && t->stop) steps = done + 1; /* stopped: resumable, not finished */
    if (steps <= done) {
        char least[32];
        double per = (elapsed + (double)(c->warmup_steps - done) * step_s + t->eval_s) /
                     (1.0 - DM_BUDGET_RESERVE);
        dm_fmt_duration(least, sizeof least, 2 * per + 1);
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "time budget %s is too small here: the set-up "
                       "and %ld steps took %.1f s (%.0f ms a step), an evaluation %s %.1f s, "
                       "and no more steps fit; the %d warmup steps need about %s "
                       "(--time-budget); %s is left as it was", bud, done, elapsed,
                       1e3 * step_s, early ? "would take about" : "took", t->eval_s,
                       c->warmup_steps, least, t->a->out);
    }
    c->steps = (int)steps;
    dm_optim_set_steps(t->opt, c->steps, 0); /* the lr schedule follows the fitted steps */
    t->fit_at = 0;
    dm_job_note(t->io, "time budget %s: steps=%d fits, evaluation included (recorded in "
                "config.json; cut with a cooldown if the machine slows); measured over the "
                "first %ld: a step %.1f ms, an evaluation %.2f s%s, %.1f s since the start\n",
                bud, c->steps, done, 1e3 * step_s, t->eval_s, early ? " (estimated)" : "",
                elapsed);
    if (c->steps < c->warmup_steps)
        dm_job_note(t->io, "note: the budget holds %d steps, fewer than warmup_steps=%d: the "
                    "learning rate never reaches its peak (a longer budget trains better)\n",
                    c->steps, c->warmup_steps);
    return record_steps(t);
}

/* After each step's log line (every rank): its time (the clock since the last step's end,
 * less evaluations and checkpoints); with a time budget, the steps fixed once the measured
 * ones are done, and then, when the recent rate projects past the budget, the run cut
 * (budget.h: the design). */
static int budget_tick(train_ctx *t, long done) {
    dm_config *c = &t->cfg;
    double now = clock_of(t), dt = now - t->mark - t->excluded;
    t->mark = now;
    t->excluded = 0;
    if (!t->budgeted) return 0;
    if (done > 1) /* the first step warms the caches up */
        t->recent[t->n_recent++ % DM_BUDGET_WINDOW] = dt;
    if (t->fit_at) {
        t->fit_dt[done - 1] = dt;
        int early = done >= 2 && done < t->fit_at ? fit_now(t, done, now) : 0;
        if (early < 0) return t->st->code;
        return done == t->fit_at || early ? fit_budget(t, done, early) : 0;
    }
    int n = t->n_recent < DM_BUDGET_WINDOW ? t->n_recent : DM_BUDGET_WINDOW;
    if (n < DM_BUDGET_WINDOW / 2) return 0; /* too few steps for a rate */
    long steps = dm_budget_cut((double)c->time_budget, now - t->t_job, done, c->steps,
                               c->schedule_steps, mean_of(t->recent, 0, n), t->eval_s,
                               c->eval_every);
    if (from_rank0(t, &steps) || steps == c->steps) return t->st->code;
    if (!c->schedule_steps) c->schedule_steps = c->steps;
    int was = c->steps;
    c->steps = (int)steps;
    dm_optim_set_steps(t->opt, c->steps, c->schedule_steps);
    char bud[32], text[512];
    dm_fmt_duration(bud, sizeof bud, (double)c->time_budget);
    dm_budget_cut_text(bud, 1e3 * mean_of(t->recent, 0, n), n, was, c->steps,
                       c->schedule_steps, text, sizeof text);
    dm_job_note(t->io, "%s\n", text);
    return record_steps(t);
}

/* The notes of the set-up, the atlas, the clocks (every rank, after share_state). */
static void start(train_ctx *t) {
    const dm_config *c = &t->cfg;
    char acc[96] = "";
    if (c->grad_accum > 1)
        snprintf(acc, sizeof acc, ", grad_accum %d (%d sequences per step)", c->grad_accum,
                 c->batch_size * c->grad_accum);
    char steps[160];
    if (t->fit_at) {
        char bud[32];
        dm_fmt_duration(bud, sizeof bud, (double)c->time_budget);
        snprintf(steps, sizeof steps, "steps: as many as fit %s (time_budget), fixed after "
                 "step %ld", bud, t->fit_at);
    } else snprintf(steps, sizeof steps, "%d steps", c->steps);
    dm_job_note(t->io, "dormouse train: %s mixer, d_model %d, %d layer%s, %d head%s x %d, %zu "
                "parameters\n", c->mixer == DM_MIXER_KDA ? "kda" : "gdn", c->d_model,
                c->n_layer, c->n_layer == 1 ? "" : "s", c->n_head, c->n_head == 1 ? "" : "s",
                c->head_dim, dm_model_num_params(t->m));
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
    char over[256], chose[512];
    if (dm_step_oversubscribed(c->threads, over, sizeof over)[0]) dm_job_note(t->io, "%s", over);
    if (dm_backend_choice(c->backend, c->device, chose, sizeof chose)[0])
        dm_job_note(t->io, "%s\n", chose);
    dm_job_note(t->io, "run directory %s: config.json, metrics.jsonl, checkpoints "
                "ckpt-NNNNNNNN/, summary.json, the tables params.txt and dispatch.txt (-v "
                "prints them)\n", t->a->out);
    char line[1024];
    if (!dm_memory_report(t->m, t->opt, t->stepper.gs, &t->mem)) {
        dm_memory_line(&t->mem, c->checkpointing, line, sizeof line);
        dm_job_note(t->io, "%s\n", line);
    }
    if (t->nranks > 1) {
        char shard[512];
        dm_optim_shard_text(t->opt, shard, sizeof shard);
        dm_job_note(t->io, "data parallel: %d processes (MPI) x %d thread%s; rank r runs "
                    "micro-batches r, r+%d, ... (%d of the %d of a step); rank 0 writes the "
                    "run; %s\n", t->nranks, t->nthreads, t->nthreads == 1 ? "" : "s",
                    t->nranks, c->grad_accum / t->nranks, c->grad_accum, shard);
    }
    dm_note_buf nb; /* the optimizer's table (-v; params.txt at the end) */
    FILE *f = dm_note_open(&nb);
    if (f) dm_optim_print_groups(t->opt, t->m, f);
    dm_note_close_detail(&nb, t->io, NULL);

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
}

/* ---- one step ----------------------------------------------------------------------- */

/* A non-finite loss or gradient norm at 0-based step: the run stops; on probation the
 * checkpoint resumed from is named, and the run falls back to the one before it when it
 * may (the fallback's own run then names a divergence). */
static int nonfinite(train_ctx *t, long step) {
    char kb[4400], what[64];
    if (!isfinite(t->loss)) snprintf(what, sizeof what, "loss is %g", t->loss);
    else snprintf(what, sizeof what, "gradient norm is %g", t->gnorm);
    if (!t->probation)
        return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld; stopping (%s%s)", what, step + 1,
                       kept(t, kb, sizeof kb),
                       t->last_ckpt == step ? ": its weights gave this loss" : "");
    if (t->fell_back)
        return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld, also after falling back to "
                       "ckpt-%08ld: the training diverges there (no damaged checkpoint); "
                       "stopping (%s)", what, step + 1, t->start, kept(t, kb, sizeof kb));
    long after = step + 1 - t->start;
    if (t->fall_to && t->fallback >= 0 && t->nranks == 1) {
        *t->fall_to = t->fallback;
        return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld, %ld step%s after resuming from "
                       "ckpt-%08ld: taking that checkpoint as damaged, falling back to "
                       "ckpt-%08ld", what, step + 1, after, after == 1 ? "" : "s", t->start,
                       t->fallback);
    }
    char fb[96] = "";
    if (t->fallback >= 0)
        snprintf(fb, sizeof fb, "; ckpt-%08ld before it is kept", t->fallback);
    return dm_fail(t->st, DM_JOB_FAILED, "%s at step %ld, %ld step%s after resuming from "
                   "ckpt-%08ld (which may be damaged%s); stopping (%s)", what, step + 1, after,
                   after == 1 ? "" : "s", t->start, fb, kept(t, kb, sizeof kb));
}

/* The step (jobs/step.h: its batch, this rank's micro-batches forward and backward, the
 * gradient sum, the optimizer update) and verify on its cadence, of 0-based step. Every
 * rank reaches its end (the exchanges are all made) before a failure is returned. */
static int one_step(train_ctx *t, long step) {
    const dm_config *c = &t->cfg;
    if (t->atlas && step == t->atlas_from) dm_atlas_reset(t->atlas);
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
    if (t->atlas) {
        dm_atlas_stage(t->atlas, DM_ST_DATA, so.t_data);
        dm_atlas_stage(t->atlas, DM_ST_FORWARD, so.t_fwd);
        dm_atlas_stage(t->atlas, DM_ST_BACKWARD, so.t_bwd);
        dm_atlas_stage(t->atlas, DM_ST_OPTIMIZER, so.t_opt);
        t->atlas->steps++;
    }
    if (rc) return comm_failed(t);
    if (!isfinite(t->loss) || !isfinite(t->gnorm)) return nonfinite(t, step);
    if (t->probation && t->first_saved >= 0 && step + 1 > t->first_saved) t->probation = 0;
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

/* ---- metrics.jsonl: no line lost ---------------------------------------------------- */

#define METRICS_MAX_PENDING (64u << 20) /* bytes kept in memory while the disk refuses */

/* Every line written, waiting up to 5 s for the disk: else the run stops `before` (a
 * checkpoint, the end), so that a resume from the last checkpoint writes the lines again
 * and the file never has a gap. Rank 0; 0 ok. */
static int metrics_catch_up(train_ctx *t, const char *before) {
    if (t->metrics.fd < 0 || !t->metrics.n) return 0;
    char kb[4400];
    if (dm_linelog_flush(&t->metrics, 50, 100))
        return dm_fail(t->st, DM_JOB_FAILED, "cannot write %s/metrics.jsonl: %s (%zu line%s "
                       "kept in memory for it); stopping %s (%s)", t->a->out,
                       strerror(t->metrics.err), t->metrics.lines,
                       t->metrics.lines == 1 ? "" : "s", before, kept(t, kb, sizeof kb));
    dm_job_warn(t->io, "note: metrics.jsonl written again: every line is in it\n");
    t->metrics_behind = 0;
    return 0;
}

/* A line lost, or too many waiting: the run stops `where` (rank 0; 0 ok). */
static int metrics_check(train_ctx *t, const char *where) {
    char kb[4400];
    if (t->metrics_lost)
        return dm_fail(t->st, DM_JOB_FAILED, "out of memory keeping the line of step %ld of "
                       "metrics.jsonl; stopping %s (%s)", t->metrics_lost, where,
                       kept(t, kb, sizeof kb));
    if (t->metrics.n > METRICS_MAX_PENDING) return metrics_catch_up(t, where);
    return 0;
}

/* One metrics line: written, or kept in memory and tried again with each later line and
 * before each checkpoint (a note when the writes start failing and when they catch up). */
static void metrics_line(train_ctx *t, const char *line, long done) {
    int rc = dm_linelog_add(&t->metrics, line);
    if (rc == 1 && !t->metrics_behind) {
        dm_job_warn(t->io, "note: cannot write metrics.jsonl at step %ld (%s): its lines are "
                    "kept in memory and written when the disk takes them\n", done,
                    strerror(t->metrics.err));
        t->metrics_behind = 1;
    } else if (rc == 0 && t->metrics_behind) {
        dm_job_warn(t->io, "note: metrics.jsonl written again at step %ld: every line is in "
                    "it\n", done);
        t->metrics_behind = 0;
    }
    /* a line that could not be kept, or too many waiting: one process stops here (under
     * mpirun the next checkpoint, where the ranks agree, stops them) */
    if (rc < 0 && !t->metrics_lost) t->metrics_lost = done;
    if (t->nranks == 1) metrics_check(t, "here");
}

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
        double te = dm_now(), tc = clock_of(t);
        dm_model_set_atlas(t->m, NULL); /* the op table is per training step */
        size_t scored;
        double bpb = dm_eval_val_fp32(t->m, &t->corpus, c->eval_window, c->eval_windows,
                                      c->batch_size, c->seq_len, t->comm, t->io, &scored);
        dm_model_set_atlas(t->m, t->atlas);
        if (t->atlas) dm_atlas_stage(t->atlas, DM_ST_EVAL, dm_now() - te);
        t->eval_s = clock_of(t) - tc;
        t->excluded += t->eval_s;
        /* a stop asked for between its windows cuts the evaluation short: the step has no
         * val_bpb, and the checkpoint after it ends the run */
        t->eval_cut = isnan(bpb) && dm_job_stopped(t->io);
        if (!comm_failed(t) && !t->eval_cut && !isfinite(bpb))
            dm_fail(t->st, DM_JOB_FAILED, "validation BPB is %g at step %ld", bpb, done);
        if (agree(t) != DM_JOB_OK) return t->st->code;
        do_eval = !t->eval_cut;
        if (do_eval) {
            t->last_bpb = bpb;
            t->val_step = done;
        }
    }
    if (dm_now() - t->last_tick >= 1) { /* the probe samples the load about once a second */
        dm_probe_tick(&t->probe);
        t->last_tick = dm_now();
    }
    double ms = 1e3 * t->interval_t / t->interval_n;
    double tps = (double)c->batch_size * c->grad_accum * c->seq_len /
                 (t->interval_t / t->interval_n);
    int logged = done % c->log_every == 0 || last || do_eval;
    if (logged && t->metrics.fd >= 0) {
        char line[1024];
        int k = snprintf(line, sizeof line,
                         "{\"step\": %ld, \"loss\": %.9g, \"loss_avg\": %.6f, \"lr\": %.6g, "
                         "\"grad_norm\": %.6g, \"ms_per_step\": %.2f, \"tokens_per_s\": %.1f, "
                         "\"elapsed_s\": %.2f",
                         done, t->loss, t->loss_sum / t->interval_n, t->lr, t->gnorm, ms, tps,
                         dm_now() - t->t_start);
        if (do_eval)
            k += snprintf(line + k, sizeof line - (size_t)k, ", \"val_bpb\": %.6f", t->last_bpb);
        if (t->vrel >= 0)
            k += snprintf(line + k, sizeof line - (size_t)k, ", \"verify_max_rel\": %.3g",
                          t->vrel);
        snprintf(line + k, sizeof line - (size_t)k, "}\n");
        metrics_line(t, line, done);
        if (t->nranks == 1 && t->st->code) return t->st->code;
    }
    dm_event ev = {0};
    ev.kind = DM_EV_STEP;
    ev.step = done;
    ev.steps = t->fit_at ? 0 : c->steps; /* 0: not fixed yet (time_budget) */
    ev.loss = t->loss;
    ev.val_bpb = t->last_bpb;
    ev.val_step = t->val_step;
    ev.ms_per_step = ms;
    ev.tokens_per_s = tps;
    ev.eta_s = t->fit_at ? NAN : (c->steps - done) * (t->t_train / (done - t->start));
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
 * asked for, agreed by the ranks): rank 0 writes it. Returns 1 when the run stops here (st
 * set when not OK), else 0. */
static int checkpoint(train_ctx *t, long done) {
    const dm_config *c = &t->cfg;
    char err[8192];
    int last = done == c->steps, stop = t->stop;
    int until = t->a->until > 0 && done == t->a->until && !last;
    if (t->fit_at) { /* measuring for time_budget: steps not fixed, so no checkpoint yet */
        if (!stop) return 0;
        if (fit_budget(t, done, 1)) return 1; /* a stop fixes them: the steps done are kept */
    }
    long due = last || stop || until || (c->ckpt_every > 0 && done % c->ckpt_every == 0);
    if (!due && c->ckpt_time > 0) { /* every ckpt_time of wall clock, on rank 0's clock */
        due = clock_of(t) - t->ckpt_mark >= (double)c->ckpt_time;
        if (from_rank0(t, &due)) return 1;
    }
    if (due) {
        char kb[4400];
        double ts = clock_of(t);
        long keep = t->probation ? t->fallback : -1;
        char when[96];
        snprintf(when, sizeof when, "before the checkpoint of step %ld", done);
        /* the lines up to this step are in metrics.jsonl before the checkpoint is */
        int bad = t->rank == 0 && (t->st->code || metrics_check(t, when) ||
                                   metrics_catch_up(t, when));
        if (!bad && t->rank == 0 &&
            dm_ckpt_save_keeping(t->a->out, t->m, t->opt, done, keep, err, sizeof err))
            dm_fail(t->st, DM_JOB_FAILED, "%s (%s)", err, kept(t, kb, sizeof kb));
        if (agree(t) != DM_JOB_OK) return 1;
        t->saved = 1;
        t->last_ckpt = done;
        if (t->first_saved < 0) t->first_saved = done;
        t->ckpt_mark = clock_of(t);
        t->ckpt_s += t->ckpt_mark - ts;
        t->excluded += t->ckpt_mark - ts;
        t->n_ckpt++;
    }
    char prog[512], out[4200];
    dm_job_prog(t->io, prog, sizeof prog);
    dm_shell_quote(t->a->out, out, sizeof out);
    if (until) {
        dm_job_note(t->io, "stopped at step %ld (--until): checkpoint saved; continue with "
                    "`%s train --resume %s`\n", done, prog, out);
        return 1;
    }
    if (stop && last && t->eval_cut) { /* trained to the end: nothing to resume */
        dm_fail(t->st, DM_JOB_INTERRUPTED, "interrupted during the final evaluation, after "
                "the last step (%ld): checkpoint saved; its validation BPB: `%s eval %s`",
                done, prog, out);
        return 1;
    }
    if (stop && !last) {
        dm_fail(t->st, DM_JOB_INTERRUPTED, "interrupted at step %ld%s: checkpoint saved; "
                "continue with `%s train --resume %s`", done,
                t->eval_cut ? " during its evaluation" : "", prog, out);
        return 1;
    }
    return 0;
}

/* ---- finish ------------------------------------------------------------------------- */

/* v as JSON: null when it is not a finite number (or, with absent_below_zero, negative:
 * a value that does not exist) */
static const char *jnum(char *buf, size_t n, const char *fmt, double v, int absent_below_zero) {
    if (!isfinite(v) || (absent_below_zero && v < 0)) snprintf(buf, n, "null");
    else snprintf(buf, n, fmt, v);
    return buf;
}

/* The dispatch counters, the verify bound, the atlas (also atlas.txt) and, for a run that
 * reached its steps, the summary (also summary.json). */
static void finish(train_ctx *t) {
    const dm_config *c = &t->cfg;
    const char *out = t->a->out;
    char disp[4096], table[8192], err[8192];
    dm_model_dispatch_report(t->m, disp, sizeof disp);
    dm_model_dispatch_table(t->m, table, sizeof table);
    dm_job_detail(t->io, "dispatch: %s\n%s", disp, table);
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
        FILE *af = t->rank == 0 ? fopen(ap, "w") : NULL;
        if (af) {
            dm_atlas_print(t->atlas, af);
            fclose(af);
        }
    }
    if (t->st->code != DM_JOB_OK || (t->a->until > 0 && t->a->until < c->steps)) return;
    long steps_run = c->steps - t->start;
    double tps = steps_run > 0 ? steps_run * (double)c->batch_size * c->grad_accum *
                                     c->seq_len / t->t_train : 0;
    double wall = dm_now() - t->t_start;
    size_t np = dm_model_num_params(t->m);
    /* the loss in both units: cross-entropy in nats (as trained), and in bits per byte
     * like the validation BPB (nats / ln 2) */
    double bits = t->loss / log(2.0);
    dm_probe_result pr;
    dm_probe_end(&t->probe, t->nthreads, &pr);
    char words[64];
    dm_probe_flags_text(pr.flags, words, sizeof words);
    dm_comm_stats cs = dm_comm_get_stats(t->comm);
    double per = steps_run > 0 ? 1.0 / steps_run : 0; /* set-up and evaluation included */
    char took[96];
    if (t->start > 0) /* a resume: this invocation's time and the run's */
        snprintf(took, sizeof took, "%.1f s (steps %ld-%d; %.1f s in all)", wall, t->start + 1,
                 c->steps, t->wall_before + wall);
    else snprintf(took, sizeof took, "%.1f s", wall);
    dm_job_note(t->io, "summary: %zu parameters | %d steps | final train loss %.4f nats = %.4f "
                "bits per byte | val %.4f bits per byte (step %ld) | %.0f tokens/s | %s\n",
                np, c->steps, t->loss, bits, t->last_bpb, t->val_step, tps, took);
    char prec[256];
    dm_precision_describe(dm_model_precision(t->m), prec, sizeof prec);
    dm_job_note(t->io, "precision: %s\n", prec);
    char cut[512];
    if (dm_budget_summary(c->steps, c->schedule_steps, (long)c->batch_size * c->grad_accum *
                          c->seq_len, cut, sizeof cut))
        dm_job_note(t->io, "%s\n", cut);
    if (t->nranks > 1)
        dm_job_note(t->io, "comm: %d processes; rank 0 sent %.2f MB and spent %.1f ms in "
                    "exchanges per step (the mean over the %ld steps of this command)\n",
                    t->nranks,
                    1e-6 * cs.bytes * per, 1e3 * cs.sec * per, steps_run);
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
    char js[8192], mj[1024], jl[32], jb[32], jv[32], jr[32];
    dm_memory_json(&t->mem, mj, sizeof mj);
    snprintf(js, sizeof js,
             "{\n  \"parameters\": %zu,\n  \"steps\": %d,\n  \"final_train_loss\": %s,\n"
             "  \"final_train_loss_bits\": %s,\n  \"val_bpb\": %s,\n  \"val_step\": %ld,\n"
             "  \"tokens_per_s\": %.1f,\n  \"wall_s\": %.2f,\n  \"wall_total_s\": %.2f,\n"
             "  \"checkpoints\": %d,\n  \"checkpoint_s\": %.3f,\n  \"threads\": %d,\n"
             "  \"processes\": %d,\n  \"grad_accum\": %d,\n  \"comm_mb_per_step\": %.3f,\n"
             "  \"comm_ms_per_step\": %.3f,\n"
             "  \"contention\": \"%s\",\n  \"contention_bits\": %u,\n  \"load_max\": %.2f,\n"
             "  \"dispatch\": \"%s\",\n  \"precision\": \"%s\",\n  \"verify_max_rel\": %s,\n"
             "  \"memory\": {%s},\n"
             "  \"peak_rss_bytes\": %zu\n}\n",
             np, c->steps, jnum(jl, sizeof jl, "%.6f", t->loss, 0),
             jnum(jb, sizeof jb, "%.6f", bits, 0), jnum(jv, sizeof jv, "%.6f", t->last_bpb, 0),
             t->val_step, tps, wall, t->wall_before + wall, t->n_ckpt, t->ckpt_s, t->nthreads, t->nranks, c->grad_accum,
             1e-6 * cs.bytes * per, 1e3 * cs.sec * per, words, pr.flags, pr.load_max, disp,
             prec, jnum(jr, sizeof jr, "%.3g", t->verify_worst, 1), mj, dm_peak_rss_bytes());
    if (t->rank == 0 && write_run_file(out, "summary.json", js, err, sizeof err))
        dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    /* the tables the console prints only with -v */
    char *pt = NULL, dt[sizeof disp + sizeof table + 16];
    size_t pn = 0;
    FILE *pf = t->rank == 0 ? open_memstream(&pt, &pn) : NULL;
    if (pf) {
        dm_optim_print_groups(t->opt, t->m, pf);
        fclose(pf);
    }
    snprintf(dt, sizeof dt, "dispatch: %s\n%s", disp, table);
    if (t->rank == 0 && !t->st->code && pt &&
        (write_run_file(out, "params.txt", pt, err, sizeof err) ||
         write_run_file(out, "dispatch.txt", dt, err, sizeof err)))
        dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    free(pt);
}

/* One run of the job: resumed from a checkpoint of at most step upto (> 0), falling
 * back when it may (fall_to), or a fallback's own run (fell_back). */
static dm_status train_run(const dm_train_args *a, const dm_job_io *io, long upto,
                           long *fall_to, int fell_back) {
    dm_status st = {DM_JOB_OK, ""};
    train_ctx t = {.a = a, .io = io, .st = &st, .comm = a->comm,
                   .rank = dm_comm_rank(a->comm), .nranks = dm_comm_size(a->comm),
                   .last_ckpt = -1, .fallback = -1, .first_saved = -1, .upto = upto,
                   .fall_to = fall_to, .fell_back = fell_back, .metrics = {.fd = -1}};
    t.t_job = clock_of(&t);
    /* rank 0 reads the config (a resumed run's is in its directory), every rank sets up,
     * rank 0 opens the run's files; they agree after each, so a failure anywhere stops all
     * of them there (and nothing is written before every rank is ready) */
    if (t.rank == 0) run_config(&t);
    if (!agree(&t) && !share_config(&t) && (set_up(&t), !agree(&t)) && !check_corpus(&t) &&
        (open_files(&t), !agree(&t)) && !share_state(&t)) {
        if (!a->resume && t.cfg.time_budget > 0) budget_begin(&t);
        start(&t);
        if (t.stop) /* asked to stop before a step ran (every rank agreed): nothing to keep */
            dm_fail(&st, DM_JOB_INTERRUPTED, "interrupted before the first step; %s is left "
                    "as it was", a->out);
        t.mark = t.ckpt_mark = clock_of(&t);
        for (long step = t.start; step < t.cfg.steps && !st.code; step++) {
            one_step(&t, step);
            if (agree(&t) || log_eval(&t, step + 1) ||
                (t.budgeted && (budget_tick(&t, step + 1), agree(&t))) ||
                checkpoint(&t, step + 1))
                break;
        }
        int falls = fall_to && *fall_to >= 0;
        if ((st.code != DM_JOB_INTERRUPTED || t.saved) && !falls) finish(&t);
        if (t.nranks > 1) agree(&t);
    }
    if (t.m) dm_model_set_atlas(t.m, NULL);
    free(t.atlas);
    if (t.metrics.fd >= 0 && dm_linelog_close(&t.metrics) && !st.code)
        dm_fail(&st, DM_JOB_FAILED, "cannot write %s/metrics.jsonl: its last lines are lost",
                a->out);
    if (t.rd_open) { /* a failed command leaves the directory as it found it (rank 0) */
        if (st.code != DM_JOB_OK && !t.saved) dm_rundir_abandon(&t.rd);
        dm_rundir_close(&t.rd);
    }
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
