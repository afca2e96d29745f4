/* eval.c — bits per byte on a window; the eval job. */
#include "jobs/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/data.h"
#include "io/files.h"
#include "jobs/load.h"
#include "jobs/step.h" /* dm_step_threads */

double dm_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, int B, int T, dm_comm *comm) {
    if (n < 2 || B < 1 || T < 1) return NAN;
    size_t preds = n - 1, full = preds / (size_t)T, rest = preds % (size_t)T;
    /* forward i: sequences [i B, i B + b) of the full ones, then the remainder */
    size_t nf = (full + (size_t)B - 1) / (size_t)B + (rest ? 1 : 0);
    int N = dm_comm_size(comm), me = dm_comm_rank(comm);
    uint8_t *buf = malloc((size_t)B * (T + 1));
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
                    memcpy(buf + (size_t)j * (T + 1), bytes + (s + j) * (size_t)T, (size_t)T + 1);
                nats[k] = (double)dm_model_forward(m, buf, b, T, NULL) * b * T;
            } else {
                nats[k] = (double)dm_model_forward(m, bytes + full * (size_t)T, 1, (int)rest,
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
        total = total / (double)preds / log(2.0);
    }
    free(buf);
    free(nats);
    free(off);
    return total;
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
    /* every rank loads the checkpoint and the corpus; they agree before sharing the work */
    dm_model *m = dm_load_model(a->ckpt, a->sets, a->n_sets, "eval", DM_EVAL_KEYS, &cfg, &step,
                                model, io, &st);
    /* the corpus: the flags, else the run's own, else the bundled one */
    if (!m) {
    } else if (a->val || a->data) {
        snprintf(data, sizeof data, "%s", a->val ? a->val : a->data);
        snprintf(from, sizeof from, "%s", a->val ? "--val" : "--data");
    } else if (dm_load_run_dir(model, run, sizeof run) == 0) {
        const char *names[2] = {"val_path", "data_path"};
        int found = 0;
        for (int i = 0; i < 2 && !found; i++) {
            snprintf(path, sizeof path, "%s/%s", run, names[i]);
            found = dm_read_line(path, data, sizeof data) == 0;
            snprintf(from, sizeof from, "the run's %s, %s", i ? "corpus" : "validation corpus",
                     path);
        }
        if (!found) { /* a run of an older dormouse, without data_path */
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
    size_t w = (size_t)cfg.eval_window;
    if (m && !st.code && c.n < w) /* as train does: never a smaller window than asked for */
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s has %zu bytes, fewer than eval_window=%zu; pass "
                "--set eval_window=%zu (or less) to score all of it", data, c.n, w, c.n);
    int code = st.code, stop = dm_job_stopped(io) ? (int)*io->stop : 0;
    dm_comm_agree(a->comm, &code, st.msg, sizeof st.msg, &stop);
    st.code = code;
    if (stop && io && io->stop && !*io->stop) *io->stop = stop; /* as the rank signalled */
    if (!st.code && stop) /* asked to stop while loading: do not start the window */
        dm_fail(&st, DM_JOB_INTERRUPTED, "interrupted before the evaluation");
    if (!st.code) {
        dm_comm_set_timeout(a->comm, (double)cfg.comm_timeout);
        dm_step_threads(&cfg, a->comm);
        double bpb = dm_eval_bpb(m, c.bytes + (c.n - w), w, cfg.batch_size, cfg.seq_len, a->comm);
        if (dm_comm_error(a->comm)[0]) dm_fail(&st, DM_JOB_FAILED, "%s", dm_comm_error(a->comm));
        else if (isnan(bpb)) dm_fail(&st, DM_JOB_FAILED, "evaluation gave NaN");
        else dm_job_note(io, "val_bpb %.6f on the last %zu bytes of %s (%s; checkpoint step "
                         "%ld)\n", bpb, w, data, from, step);
    }
    dm_corpus_free(&c);
    dm_model_free(m);
    return st;
}
