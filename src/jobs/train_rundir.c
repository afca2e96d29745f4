/* train_rundir.c — the run directory of a training run (rank 0 alone touches it): the
 * config of the run (a resumed run's from its config.json, a fine-tuning run's model keys
 * from the checkpoint it starts from), the lock, a fresh run's files (a fine-tuning run's
 * parent and its weights) or a resume from the newest checkpoint that loads (on
 * probation: docs/robustness.md), and the checkpoints on their cadence. Nothing is
 * written before the inputs are good, and what is written is undone if the command fails
 * before it saves a checkpoint. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt.h"
#include "io/dataset.h" /* dm_crc32: the parent's model file */
#include "io/files.h"
#include "io/metrics.h" /* a resumed run's wall time so far */
#include "jobs/load.h"
#include "jobs/resume.h"
#include "jobs/train_budget.h"
#include "jobs/train_ranks.h"
#include "jobs/train_report.h"
#include "jobs/train_rundir.h"

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
    int rc = train_write_file(dir, "metrics.jsonl", keep, err, errlen);
    free(keep);
    return rc;
}

/* ---- the run directory -------------------------------------------------------------- */

/* Create (a fresh run) and lock the run directory: a second writer is refused. */
static int lock_run(train_ctx *t, int create) {
    char err[8192];
    int rc = dm_rundir_open(&t->run.rd, t->a->out, create, t->a->locked, err, sizeof err);
    if (rc == DM_RUNDIR_OK) t->run.rd_open = 1;
    return rc == DM_RUNDIR_OK ? 0
         : dm_fail(t->st, rc == DM_RUNDIR_BUSY ? DM_JOB_BAD_INPUT : DM_JOB_FAILED, "%s", err);
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

/* ---- fine-tuning: the model a new run starts from (--init-from) ----------------------- */

/* The CRC-32 of the file at path into *crc; 0 ok, else err. */
static int crc_file(const char *path, uint32_t *crc, char *err, size_t errlen) {
    int fd = dm_open_regular(path, "model file", err, errlen);
    if (fd < 0) return 1;
    unsigned char buf[1 << 14];
    uint32_t c = 0;
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) c = dm_crc32(c, buf, (size_t)got);
    close(fd);
    if (got < 0) {
        snprintf(err, errlen, "cannot read %s", path);
        return 1;
    }
    *crc = c;
    return 0;
}

/* --init-from: its newest checkpoint that loads (dm_ckpt_next; one that went away since
 * it was found, as a training run prunes them, is passed over), kept open for its
 * weights, with its model file's CRC-32; the config's model keys set to its. */
static int open_parent(train_ctx *t) {
    train_parent_state *p = &t->parent;
    char err[8192], v[64];
    dm_ckpt_iter it = {.path = t->a->init_from};
    dm_ckpt *ck;
    while ((ck = dm_ckpt_next(&it, t->st)) && crc_file(it.model_path, &p->crc, err, sizeof err)) {
        dm_ckpt_close(ck);
        dm_ckpt_skip(&it, err);
    }
    if (!ck) {
        char why[sizeof t->st->msg];
        snprintf(why, sizeof why, "%s", t->st->msg);
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "--init-from %s: %s", t->a->init_from, why);
    }
    dm_ckpt_loaded(&it, t->io);
    p->ck = ck;
    p->step = dm_ckpt_step(ck);
    char *abs = realpath(it.model_path, NULL);
    snprintf(p->model, sizeof p->model, "%s", abs ? abs : it.model_path);
    free(abs);
    abs = realpath(t->a->init_from, NULL);
    snprintf(p->path, sizeof p->path, "%s", abs ? abs : t->a->init_from);
    free(abs);
    const dm_config *pc = dm_ckpt_config(ck);
    for (int i = 0; dm_config_key_name(i); i++) {
        const char *key = dm_config_key_name(i);
        if (dm_config_key_group(i) != DM_KEY_MODEL) continue;
        dm_config_get(pc, key, v, sizeof v);
        if (dm_config_set(&t->cfg, key, v, err, sizeof err))
            return dm_fail(t->st, DM_JOB_BAD_INPUT, "--init-from %s: %s", p->model, err);
    }
    return 0;
}

/* The run's model keys must be the parent's: the first that differs, with both values. */
static int check_parent(train_ctx *t) {
    char va[64], vb[64];
    const char *key = dm_config_diff(dm_ckpt_config(t->parent.ck), &t->cfg, DM_KEYS_MODEL, va,
                                     vb, sizeof va);
    if (!key) return 0;
    return dm_fail(t->st, DM_JOB_BAD_INPUT, "--init-from %s has %s=%s, the run asks for %s=%s "
                   "(a fine-tuning run keeps its parent's model keys: leave them out)",
                   t->a->init_from, key, va, key, vb);
}

/* A fresh run's parent.json: where its weights came from. */
static int write_parent(train_ctx *t) {
    const train_parent_state *p = &t->parent;
    char err[8192], crc[16];
    snprintf(crc, sizeof crc, "%08x", (unsigned)p->crc);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "init_from", p->path);
    cJSON_AddStringToObject(o, "model", p->model);
    cJSON_AddNumberToObject(o, "step", (double)p->step);
    cJSON_AddStringToObject(o, "crc32", crc);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    size_t n = text ? strlen(text) : 0;
    char *line = text ? realloc(text, n + 2) : NULL;
    if (!line) {
        free(text);
        return dm_fail(t->st, DM_JOB_FAILED, "out of memory writing parent.json");
    }
    memcpy(line + n, "\n", 2);
    int wr = train_write_file(t->a->out, "parent.json", line, err, sizeof err);
    free(line);
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
}

/* A fresh fine-tuning run (when it is one): parent.json, and the parent's weights into
 * the model (the optimizer and the schedule start fresh); the checkpoint closed. */
static int from_parent(train_ctx *t) {
    char err[8192];
    if (!t->parent.ck || write_parent(t)) return t->st->code;
    int rc = dm_ckpt_into(t->parent.ck, t->m, NULL, err, sizeof err);
    dm_ckpt_close(t->parent.ck);
    t->parent.ck = NULL;
    return rc ? dm_fail(t->st, DM_JOB_BAD_INPUT, "--init-from %s: %s", t->a->init_from, err)
              : 0;
}

/* A resumed run's parent (its parent.json), for its header; a run of its own has none. */
static void read_parent(train_ctx *t) {
    char p[4200], err[256];
    snprintf(p, sizeof p, "%s/parent.json", t->a->out);
    if (access(p, F_OK) != 0) return;
    char *text = dm_read_file(p, err, sizeof err);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    cJSON *from = cJSON_GetObjectItemCaseSensitive(o, "init_from"),
          *model = cJSON_GetObjectItemCaseSensitive(o, "model"),
          *step = cJSON_GetObjectItemCaseSensitive(o, "step"),
          *crc = cJSON_GetObjectItemCaseSensitive(o, "crc32");
    unsigned c;
    if (cJSON_IsString(from) && cJSON_IsString(model) && cJSON_IsNumber(step) &&
        cJSON_IsString(crc) && sscanf(crc->valuestring, "%8x", &c) == 1) {
        snprintf(t->parent.path, sizeof t->parent.path, "%s", from->valuestring);
        snprintf(t->parent.model, sizeof t->parent.model, "%s", model->valuestring);
        t->parent.step = (long)step->valuedouble;
        t->parent.crc = c;
    } else {
        dm_job_warn(t->io, "note: %s cannot be read; the run's parent goes unnamed\n", p);
    }
    cJSON_Delete(o);
    free(text);
}

/* ---- the config of the run ---------------------------------------------------------- */

/* The config (defaults or the run's config.json, then the file, then the sets), checked;
 * and the corpus: --data, else the run's data_path, else the bundled one. */
int train_config(train_ctx *t) {
    const dm_train_args *a = t->a;
    char path[4200], err[8192];
    dm_config saved;
    if (a->resume && a->init_from)
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "--init-from starts a new run and --resume "
                       "continues one: give one of them");
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
    if (a->init_from && open_parent(t)) return t->st->code;
    if ((a->config_file && dm_config_apply_file(&t->cfg, a->config_file, t->st)) ||
        dm_config_apply_sets(&t->cfg, "--set", a->sets, a->n_sets, t->st))
        return t->st->code;
    if (a->init_from && check_parent(t)) return t->st->code;
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

/* ---- a fresh run or a resume ---------------------------------------------------------- */

/* A fresh run: --out a directory (made if need be) that holds no run, locked. */
static int lock_fresh(train_ctx *t) {
    const dm_train_args *a = t->a;
    char err[8192], p[4200];
    struct stat sb;
    if (stat(a->out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "--out %s is not a directory", a->out);
    if (lock_run(t, 1)) return t->st->code;
    if (dm_ckpt_resolve(a->out, p, sizeof p, err, sizeof err) == 0)
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s already holds a run (%s); continue it "
                       "with --resume or choose another --out", a->out, p);
    return 0;
}

/* The newest checkpoint of the run that loads (of at most step run.upto), into the model
 * and the optimizer; the run on probation from it. */
static int load_newest(train_ctx *t) {
    char err[8192];
    dm_ckpt_iter it = {.path = t->a->out, .with_optim = 1, .upto = t->run.upto};
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
    if (dm_resume_config(&saved, &t->cfg, t->a->sets, t->a->n_sets, t->a->out, t->start, t->io,
                         t->st))
        return t->st->code;
    t->run.last_ckpt = t->start;
    t->run.probation = 1;
    t->run.fallback = ckpt_step_at(t->a->out, it.k); /* the candidates after it are older */
    return 0;
}

/* A resume: the checkpoint loaded, something left to train on the run's corpus, its
 * metrics trimmed to the checkpoint. */
static int resume_run(train_ctx *t) {
    const dm_train_args *a = t->a;
    char err[8192], p[4200];
    if (load_newest(t)) return t->st->code;
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
        t->run.wall_before = dm_metrics_wall(&mt);
        dm_metrics_free(&mt);
    }
    read_parent(t);
    dm_job_note(t->io, "resuming %s at step %ld of %d\n", a->out, t->start, t->cfg.steps);
    return 0;
}

/* A fresh run's files: never mixed with an old one's; the corpus with its size and
 * CRC-32, the validation corpus, as absolute paths (eval finds them anywhere). */
static int fresh_files(train_ctx *t) {
    const dm_train_args *a = t->a;
    char err[8192], p[4200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", a->out);
    unlink(p);
    snprintf(p, sizeof p, "%s/val_path", a->out);
    unlink(p);
    snprintf(p, sizeof p, "%s/parent.json", a->out);
    unlink(p);
    char *abs = realpath(t->data, NULL);
    int wr = dm_rundir_write_data(a->out, abs ? abs : t->data, t->corpus.n,
                                  dm_corpus_crc32(&t->corpus), t->corpus.train_n, err,
                                  sizeof err);
    free(abs);
    if (!wr && t->val[0]) {
        abs = realpath(t->val, NULL);
        snprintf(p, sizeof p, "%s\n", abs ? abs : t->val);
        free(abs);
        wr = train_write_file(a->out, "val_path", p, err, sizeof err);
    }
    return wr ? dm_fail(t->st, DM_JOB_FAILED, "%s", err) : 0;
}

/* A model of tokens trains on data of its tokenizer: the checkpoint loaded (a resume's, a
 * parent's) must carry the data's; one that carries none takes it. */
static int same_tokenizer(train_ctx *t) {
    const dm_tokdata *td = t->corpus.tok;
    const char *sum;
    if (!td) return 0;
    if (!dm_model_tokenizer(t->m, NULL, &sum))
        return dm_model_set_tokenizer(t->m, td->model, td->model_n, td->checksum)
                   ? dm_fail(t->st, DM_JOB_FAILED, "out of memory") : 0;
    if (strcmp(sum, td->checksum) != 0)
        return dm_fail(t->st, DM_JOB_BAD_INPUT, "%s: the data's tokenizer (%s) is not the "
                       "checkpoint's (%s): a model of tokens reads only the tokens it was "
                       "trained on", t->data, td->checksum, sum);
    return 0;
}

/* The run directory: a fresh run's files (a fine-tuning run's parent.json, its weights
 * loaded), or the resumed run's newest checkpoint that loads and its metrics trimmed to
 * it; then config.json. What is written is undone if the command fails before it saves a
 * checkpoint (dm_rundir_remember). */
static int open_run(train_ctx *t) {
    char err[8192];
    if (!t->a->resume && lock_fresh(t)) return t->st->code;
    if (dm_rundir_remember(&t->run.rd, err, sizeof err))
        return dm_fail(t->st, DM_JOB_FAILED, "%s", err);
    if (t->a->resume ? resume_run(t) : (fresh_files(t) || from_parent(t))) return t->st->code;
    if (same_tokenizer(t)) return t->st->code;
    return train_write_config(t);
}

int train_open_run(train_ctx *t) {
    if (t->ranks.rank != 0 || open_run(t)) return t->st->code;
    return train_metrics_open(t);
}

void train_close_run(train_ctx *t) {
    dm_ckpt_close(t->parent.ck); /* a run that failed before it loaded its parent */
    t->parent.ck = NULL;
    if (!t->run.rd_open) return;
    if (t->st->code != DM_JOB_OK && !t->run.saved) dm_rundir_abandon(&t->run.rd);
    dm_rundir_close(&t->run.rd);
    t->run.rd_open = 0;
}

/* ---- the checkpoints -------------------------------------------------------------------- */

/* Whether a checkpoint is due after `done` steps besides the end, a stop and --until:
 * ckpt_every, or ckpt_time of wall clock on rank 0's clock; -1 when the ranks failed to
 * agree on it. */
static long due_by_cadence(train_ctx *t, long done) {
    const dm_config *c = &t->cfg;
    long due = c->ckpt_every > 0 && done % c->ckpt_every == 0;
    if (!due && c->ckpt_time > 0) {
        due = train_clock(t) - t->run.ckpt_mark >= (double)c->ckpt_time;
        if (train_from_rank0(t, &due)) return -1;
    }
    return due;
}

/* The checkpoint of step `done`: rank 0 writes it, the lines up to this step in
 * metrics.jsonl first; the ranks agree. 0 ok. */
static int save(train_ctx *t, long done) {
    char err[8192], kb[4400], when[96];
    double ts = train_clock(t);
    long keep = t->run.probation ? t->run.fallback : -1;
    snprintf(when, sizeof when, "before the checkpoint of step %ld", done);
    int bad = t->ranks.rank == 0 && (t->st->code || train_metrics_flush(t, when));
    if (!bad && t->ranks.rank == 0 &&
        dm_ckpt_save_keeping(t->a->out, t->m, t->opt, done, keep, err, sizeof err))
        dm_fail(t->st, DM_JOB_FAILED, "%s (%s)", err, train_kept(t, kb, sizeof kb));
    if (train_agree(t) != DM_JOB_OK) return 1;
    t->run.saved = 1;
    t->run.last_ckpt = done;
    if (t->run.first_saved < 0) t->run.first_saved = done;
    t->run.ckpt_mark = train_clock(t);
    t->run.ckpt_s += t->run.ckpt_mark - ts;
    train_budget_exclude(t, t->run.ckpt_mark - ts);
    t->run.n_ckpt++;
    return 0;
}

/* The checkpoint after `done` steps when one is due (the end, ckpt_every, ckpt_time,
 * --until, a stop asked for, agreed by the ranks). */
int train_checkpoint(train_ctx *t, long done) {
    const dm_config *c = &t->cfg;
    int last = done == c->steps, stop = t->ranks.stop;
    int until = t->a->until > 0 && done == t->a->until && !last;
    if (t->bud.fit_at) { /* measuring for time_budget: steps not fixed, so no checkpoint yet */
        if (!stop) return 0;
        if (train_budget_fit_now(t, done)) return 1; /* a stop fixes them: the steps are kept */
    }
    long due = last || stop || until;
    if (!due && (due = due_by_cadence(t, done)) < 0) return 1;
    if (due && save(t, done)) return 1;
    char prog[512], out[4200];
    dm_job_prog(t->io, prog, sizeof prog);
    dm_shell_quote(t->a->out, out, sizeof out);
    if (until) {
        dm_job_note(t->io, "stopped at step %ld (--until): checkpoint saved; continue with "
                    "`%s train --resume %s`\n", done, prog, out);
        return 1;
    }
    if (stop && last && t->rep.eval_cut) { /* trained to the end: nothing to resume */
        dm_fail(t->st, DM_JOB_INTERRUPTED, "interrupted during the final evaluation, after "
                "the last step (%ld): checkpoint saved; its validation BPB: `%s eval %s`",
                done, prog, out);
        return 1;
    }
    if (stop && !last) {
        dm_fail(t->st, DM_JOB_INTERRUPTED, "interrupted at step %ld%s: checkpoint saved; "
                "continue with `%s train --resume %s`", done,
                t->rep.eval_cut ? " during its evaluation" : "", prog, out);
        return 1;
    }
    return 0;
}
