/* eval.c — bits per byte on a window; the eval job. */
#include "jobs/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "io/data.h"
#include "io/files.h"
#include "jobs/load.h"
#include "model/host.h"
#include "model/model.h" /* the precision record */
#include "ops/backend.h"

/* The summed cross-entropy in nats of the n-1 predictions of ids[0, n) (dm_eval_bpb's
 * cut into sequences and forwards; ids of the model's width: bytes for the byte
 * vocabulary); NAN on a failure. */
static double window_nats(dm_model *m, const void *ids, size_t n, int B, int T,
                          dm_comm *comm) {
    if (n < 2 || B < 1 || T < 1) return NAN;
    const uint8_t *bytes = ids;
    size_t w = (size_t)dm_id_width(dm_model_config(m)->vocab);
    size_t preds = n - 1, full = preds / (size_t)T, rest = preds % (size_t)T;
    /* forward i: sequences [i B, i B + b) of the full ones, then the remainder */
    size_t nf = (full + (size_t)B - 1) / (size_t)B + (rest ? 1 : 0);
    int N = dm_comm_size(comm), me = dm_comm_rank(comm);
    uint8_t *buf = malloc((size_t)B * (T + 1) * w);
    double *nats = calloc(nf ? nf : 1, sizeof *nats);
    size_t *off = malloc(sizeof(size_t) * (size_t)(N + 1));
    int ok = buf && nats && off;
    if (off) { /* rank r holds the nats of forwards r, r + N, ... in order */
        off[0] = 0;
        for (int r = 0; r < N; r++) off[r + 1] = off[r] + (nf > (size_t)r ? (nf - r + N - 1) / N : 0);
    }
    if (ok) {
        for (size_t i = me, k = off[me]; i < nf; i += (size_t)N, k++) {
            size_t s = i * (size_t)B;
            if (s < full) {
                /* consecutive windows share a byte (the last target of one is the first
                 * input of the next), so gather b windows of T+1 bytes at stride T */
                int b = full - s < (size_t)B ? (int)(full - s) : B;
                for (int j = 0; j < b; j++)
                    memcpy(buf + (size_t)j * (T + 1) * w, bytes + (s + j) * (size_t)T * w,
                           ((size_t)T + 1) * w);
                nats[k] = (double)dm_model_forward(m, buf, b, T, NULL) * b * T;
            } else {
                nats[k] = (double)dm_model_forward(m, bytes + full * (size_t)T * w, 1, (int)rest,
                                                   NULL) * rest;
            }
        }
    }
    /* a rank out of memory still takes part, with NaN for its share */
    if (!ok && nats && off) for (size_t k = off[me]; k < off[me + 1]; k++) nats[k] = NAN;
    double total = NAN;
    if (nats && off && !dm_comm_allgather(comm, nats, off, sizeof(double))) {
        total = 0;
        for (size_t i = 0; i < nf; i++) total += nats[off[i % (size_t)N] + i / (size_t)N];
    }
    free(buf);
    free(nats);
    free(off);
    return total;
}

double dm_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, int B, int T, dm_comm *comm) {
    if (n < 2 || B < 1 || T < 1) return NAN;
    return window_nats(m, bytes, n, B, T, comm) / (double)(n - 1) / log(2.0);
}

int dm_eval_check(const dm_corpus *c, long w, long windows, char *err, size_t errlen) {
    if (windows < 2 || (c->val_n / (size_t)windows) >= (size_t)w) return 0;
    snprintf(err, errlen, "eval_windows=%ld: %ld windows of eval_window=%ld bytes need a "
             "validation set of at least %ld bytes; it has %zu%s (eval_windows=all scores all "
             "of it)", windows, windows, w, windows * w, c->val_n, c->val_bytes ? ""
             : c->mapped ? " (val.bin of the data directory: prepare it with --val-bytes "
             "N x eval_window or more)" : " (the last eval_window bytes of the corpus: prepare "
             "a data directory with `dormouse prepare --val-bytes N`, or pass --val)");
    return 1;
}

/* A long evaluation's progress (several windows; more than 2 s in): a line at most every
 * second, then every twentieth of the time so far, so an eval of hours writes a few
 * dozen lines to a log. */
typedef struct {
    const dm_job_io *io;
    double t0, last;
    size_t total;
} eval_progress;

static void progress(eval_progress *p, size_t done) {
    if (!p->io || !p->io->fn) return;
    double now = dm_now(), el = now - p->t0;
    if (el < 2 || now - p->last < (el / 20 > 1 ? el / 20 : 1)) return;
    p->last = now;
    double rate = (double)done / el;
    char eta[32], line[256];
    dm_fmt_duration(eta, sizeof eta, rate > 0 ? (double)(p->total - done) / rate : -1);
    int len = snprintf(line, sizeof line, "eval: %.1f of %.1f MB scored (%.0f%%) | %.1f kB/s | "
                       "ETA %s", done / 1e6, p->total / 1e6, 100.0 * (double)done /
                       (double)p->total, rate / 1e3, eta);
    dm_event ev = {.kind = DM_EV_PROGRESS, .text = line, .len = (size_t)len};
    dm_job_emit(p->io, &ev);
}

/* Between windows: 1 when a stop was asked for on any rank (then set on every one, as
 * the job's agreement does) or the exchange failed (dm_comm_error says so). */
static int stop_asked(const dm_job_io *io, dm_comm *comm) {
    int code = 0, failed;
    char msg[64] = "";
    int stop = dm_job_agree(io, comm, &code, msg, sizeof msg, &failed);
    return failed || stop != 0;
}

/* The nats of the byte window val[a, a + len) and, in *preds, the bytes they predict: of
 * bytes, its len-1 predictions; of tokens (docs/tokens.md), the tokens covering it, the
 * first the context, and the bytes the others cover. */
static double span_nats(dm_model *m, const dm_corpus *c, size_t a, size_t len, int B, int T,
                        dm_comm *comm, size_t *preds) {
    if (!c->tok || dm_model_config(m)->vocab != c->vocab) { /* a model of bytes */
        *preds = len - 1;
        return window_nats(m, c->val + a, len, B, T, comm);
    }
    dm_cover cv;
    if (dm_tokstream_cover(&c->ts[1], a, a + len, &cv)) return NAN;
    *preds = (size_t)cv.scored_bytes;
    if (cv.t1 - cv.t0 < 2) return 0; /* one token: nothing scored */
    const uint8_t *ids = c->ts[1].ids + cv.t0 * (size_t)c->ts[1].width;
    return window_nats(m, ids, cv.t1 - cv.t0, B, T, comm);
}

double dm_eval_val(dm_model *m, const dm_corpus *c, long w, long windows, int B, int T,
                   dm_comm *comm, const dm_job_io *io, size_t *scored) {
    size_t W = (size_t)w;
    *scored = 0;
    if (c->tok && dm_model_config(m)->vocab == c->vocab && windows == 1) { /* the last eval_window bytes, scored by their tokens */
        size_t preds = 0;
        *scored = W;
        double nats = span_nats(m, c, c->val_n - W, W, B, T, comm, &preds);
        return preds ? nats / (double)preds / log(2.0) : NAN;
    }
    if (windows == 1) { /* the fixed window: the last eval_window bytes */
        *scored = W;
        double bpb = dm_eval_bpb(m, c->val + (c->val_n - W), W, B, T, comm);
        dm_corpus_release(c, c->val + (c->val_n - W), W);
        return bpb;
    }
    double nats = 0;
    size_t preds = 0;
    eval_progress pr = {io, dm_now(), 0,
                        windows == 0 ? c->val_n : W * (size_t)windows};
    if (windows == 0) { /* all: windows of W bytes, each sharing its first byte with the
                           last of the one before, so every byte but the first is predicted */
        for (size_t s = 0; s + 1 < c->val_n && !isnan(nats);) {
            if (s && stop_asked(io, comm)) {
                *scored = s + 1;
                return NAN;
            }
            size_t len = c->val_n - s < W ? c->val_n - s : W;
            size_t p = 0;
            nats += span_nats(m, c, s, len, B, T, comm, &p);
            dm_corpus_release(c, c->val + s, len);
            preds += p;
            s += len - 1;
            progress(&pr, s + 1);
        }
        *scored = c->val_n;
    } else {
        size_t *off = malloc(sizeof *off * (size_t)windows);
        if (!off || dm_corpus_eval_offsets(c->val_n, W, windows, DM_EVAL_WINDOW_SEED, off)) {
            free(off);
            return NAN;
        }
        for (long k = 0; k < windows && !isnan(nats); k++) {
            if (k && stop_asked(io, comm)) {
                *scored = W * (size_t)k;
                free(off);
                return NAN;
            }
            size_t p = 0;
            nats += span_nats(m, c, off[k], W, B, T, comm, &p);
            dm_corpus_release(c, c->val + off[k], W);
            preds += p;
            progress(&pr, W * (size_t)(k + 1));
        }
        free(off);
        *scored = W * (size_t)windows;
    }
    return preds ? nats / (double)preds / log(2.0) : NAN;
}

/* An fp32 copy of m: its config with fp32 products, its parameters copied. NULL when it
 * cannot be made. */
static dm_model *fp32_copy(dm_model *m) {
    dm_config c = *dm_model_config(m);
    c.precision = DM_PRECISION_FP32;
    c.ns_precision = DM_PRECISION_FP32;
    char err[DM_ERRLEN];
    dm_model *f = dm_model_create_threads(&c, dm_model_policy(m)->threads, err, sizeof err);
    if (!f) return NULL;
    size_t bytes = dm_model_num_params(m) * sizeof(float);
    dm_backend *be = dm_model_backend(m);
    float *h = dm_backend_map(be, dm_model_param_mem(m), bytes, 1);
    if (!h) {
        dm_model_free(f);
        return NULL;
    }
    dm_backend_from_host(dm_model_backend(f), dm_model_param_mem(f), h, bytes);
    dm_backend_unmap(be, dm_model_param_mem(m), h, bytes, 0);
    return f;
}

double dm_eval_val_fp32(dm_model *m, const dm_corpus *c, long w, long windows, int B, int T,
                        dm_comm *comm, const dm_job_io *io, size_t *scored) {
    if (!dm_model_precision(m)->matmul_bf16)
        return dm_eval_val(m, c, w, windows, B, T, comm, io, scored);
    dm_model *f = fp32_copy(m);
    /* every rank takes part in the exchanges: one that cannot copy scores with NaN */
    double bpb = dm_eval_val(f ? f : m, c, w, windows, B, T, comm, io, scored);
    if (!f) bpb = NAN;
    dm_model_free(f);
    return bpb;
}

void dm_eval_what(const dm_config *cfg, size_t scored, char *buf, size_t n) {
    if (cfg->eval_windows == 1)
        snprintf(buf, n, "the last %ld bytes", cfg->eval_window);
    else if (cfg->eval_windows == 0)
        snprintf(buf, n, "all %zu bytes (eval_windows=all)", scored);
    else
        snprintf(buf, n, "%ld fixed windows of %ld bytes (eval_windows=%ld)", cfg->eval_windows,
                 cfg->eval_window, cfg->eval_windows);
}

dm_status dm_eval(const dm_eval_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    if (a->data && a->val) {
        dm_fail(&st, DM_JOB_BAD_INPUT, "eval scores one window: give --data or --val, not both");
        return st;
    }
    dm_config cfg;
    dm_config_default(&cfg);
    long step = 0;
    char model[4096], run[4096], path[4200], data[4096] = "", from[4400] = "";
    int whole = 0; /* a validation corpus: all of it is the validation set (as in train) */
    /* every rank loads the checkpoint and the corpus; they agree before sharing the work */
    /* fp32 products by default, whatever the run trained with or this CPU has: the BPB of
     * a checkpoint is the same number on every machine (a --set precision comes after) */
    const char **sets = malloc(sizeof *sets * (size_t)(a->n_sets + 1));
    if (!sets) {
        dm_fail(&st, DM_JOB_FAILED, "out of memory");
        return st;
    }
    sets[0] = "precision=fp32";
    for (int i = 0; i < a->n_sets; i++) sets[i + 1] = a->sets[i];
    dm_model *m = dm_load_model(a->ckpt, sets, a->n_sets + 1, "eval", DM_EVAL_KEYS, &cfg, &step,
                                model, a->comm, io, &st);
    free(sets);
    /* the corpus: the flags, else the run's own, else the bundled one */
    if (!m) {
    } else if (a->val || a->data) {
        whole = a->val != NULL;
        snprintf(data, sizeof data, "%s", a->val ? a->val : a->data);
        snprintf(from, sizeof from, "%s", a->val ? "--val" : "--data");
    } else if (dm_load_run_dir(model, run, sizeof run) == 0) {
        const char *names[2] = {"val_path", "data_path"};
        int found = 0;
        for (int i = 0; i < 2 && !found; i++) {
            snprintf(path, sizeof path, "%s/%s", run, names[i]);
            found = dm_read_line(path, data, sizeof data) == 0;
            whole = found && i == 0; /* the run's --val: all of it validates */
            snprintf(from, sizeof from, "the run's %s, %s", i ? "corpus" : "validation corpus",
                     path);
            if (!found && access(path, F_OK) == 0) /* there, but names nothing */
                break;
        }
        if (!found && access(path, F_OK) == 0) {
            dm_fail(&st, DM_JOB_BAD_INPUT, "%s names no corpus (its first line is empty): pass "
                    "--data PATH, the corpus this run trained on", path);
        } else if (!found) { /* a run of an older dormouse, without data_path */
            found = dm_data_path(NULL, data, sizeof data, &st) != NULL;
            snprintf(from, sizeof from, "the bundled corpus: %s has no data_path", run);
        } else if (access(data, F_OK) != 0) {
            dm_fail(&st, DM_JOB_BAD_INPUT, "the corpus this run trained on, %s (%s), is not "
                    "there; pass --data PATH", data, path);
        }
    } else {
        dm_data_path(NULL, data, sizeof data, &st);
        snprintf(from, sizeof from, "the bundled corpus: the checkpoint is not in a run "
                 "directory");
    }
    dm_corpus c = {0};
    char err[8192];
    if (m && !st.code && dm_corpus_load(&c, data, err, sizeof err))
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s", err);
    if (m && !st.code && c.notes) dm_job_note(io, "%s", c.notes);
    if (m && !st.code && a->verify_data && dm_corpus_verify(&c, err, sizeof err))
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s: %s", data, err);
    /* as train does: never a smaller window than asked for */
    if (m && !st.code && dm_corpus_split_eval(&c, cfg.eval_window, whole, err, sizeof err))
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s: %s", data, err);
    if (m && !st.code && dm_eval_check(&c, cfg.eval_window, cfg.eval_windows, err, sizeof err))
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s: %s", data, err);
    if (m && !st.code && cfg.vocab > DM_VOCAB) { /* a model of tokens: its tokenizer's */
        size_t tn;
        const char *sum;
        const void *tb = dm_model_tokenizer(m, &tn, &sum);
        if (!tb) dm_fail(&st, DM_JOB_BAD_INPUT, "%s: a model of vocab %d without its tokenizer",
                         a->ckpt, cfg.vocab);
        else if (dm_corpus_use_tokenizer(&c, tb, tn, sum, cfg.vocab, err, sizeof err))
            dm_fail(&st, DM_JOB_BAD_INPUT, "%s: %s", data, err);
    }
    int code = st.code, failed;
    int stop = dm_job_agree(io, a->comm, &code, st.msg, sizeof st.msg, &failed);
    st.code = code;
    if (!st.code && stop) /* asked to stop while loading: do not start the window */
        dm_fail(&st, DM_JOB_INTERRUPTED, "interrupted before the evaluation");
    if (!st.code) {
        dm_comm_set_timeout(a->comm, (double)cfg.comm_timeout);
        size_t scored;
        char what[256];
        double bpb = dm_eval_val(m, &c, cfg.eval_window, cfg.eval_windows, cfg.batch_size,
                                 cfg.seq_len, a->comm, io, &scored);
        dm_eval_what(&cfg, cfg.eval_windows == 0 ? c.val_n : scored, what, sizeof what);
        if (dm_comm_error(a->comm)[0]) dm_fail(&st, DM_JOB_FAILED, "%s", dm_comm_error(a->comm));
        else if (isnan(bpb) && dm_job_stopped(io))
            dm_fail(&st, DM_JOB_INTERRUPTED, "interrupted during the evaluation of %s, %zu "
                    "bytes scored: no result", what, scored);
        else if (isnan(bpb)) dm_fail(&st, DM_JOB_FAILED, "evaluation gave NaN");
        else dm_job_note(io, "val_bpb %.6f on %s of %s%s (%s; %zu bytes scored; %s products; "
                         "checkpoint step %ld)\n", bpb, what, data, c.mapped ? "/val.bin" : "",
                         from, scored, dm_model_precision(m)->matmul_bf16 ? "bf16" : "fp32",
                         step);
    }
    dm_corpus_free(&c);
    dm_model_free(m);
    return st;
}
