/* job.c — status, progress events and config application shared by every job (job.h). */
#include "jobs/job.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/text.h"
#include "io/files.h"

/* ---- status ---- */

dm_job_code dm_fail(dm_status *st, dm_job_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    /* out of memory is a runtime failure (exit 1) wherever it is met: also where a step of
     * reading input (a model to build, a file to read) ran out of it */
    if (code == DM_JOB_BAD_INPUT && strstr(st->msg, "out of memory")) code = DM_JOB_FAILED;
    st->code = code;
    return code;
}

int dm_job_stopped(const dm_job_io *io) { return io && io->stop && *io->stop; }

int dm_job_agree(const dm_job_io *io, dm_comm *comm, int *code, char *msg, size_t n,
                 int *failed) {
    int stop = dm_job_stopped(io) ? (int)*io->stop : 0;
    *failed = dm_comm_agree(comm, code, msg, n, &stop);
    if (stop && io && io->stop && !*io->stop) *io->stop = stop;
    return stop;
}

const char *dm_job_prog(const dm_job_io *io, char *buf, size_t n) {
    return dm_shell_quote(io && io->prog && io->prog[0] ? io->prog : "dormouse", buf, n);
}

/* ---- progress ---- */

void dm_job_emit(const dm_job_io *io, const dm_event *ev) {
    if (io && io->fn) io->fn(io->user, ev);
}

static void emit_text(const dm_job_io *io, int kind, const char *text, size_t n) {
    dm_event ev = {0};
    ev.kind = kind;
    ev.text = text;
    ev.len = n;
    dm_job_emit(io, &ev);
}

/* printf into a malloc'd string and report it as an event of kind */
static void emit_vf(const dm_job_io *io, int kind, const char *fmt, va_list ap) {
    if (!io || !io->fn) return;
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return;
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    emit_text(io, kind, s, (size_t)n);
    free(s);
}

void dm_job_note(const dm_job_io *io, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit_vf(io, DM_EV_NOTE, fmt, ap);
    va_end(ap);
}

void dm_job_warn(const dm_job_io *io, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit_vf(io, DM_EV_WARN, fmt, ap);
    va_end(ap);
}

void dm_job_detail(const dm_job_io *io, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit_vf(io, DM_EV_DETAIL, fmt, ap);
    va_end(ap);
}

void dm_job_text(const dm_job_io *io, const char *bytes, size_t n) {
    emit_text(io, DM_EV_TEXT, bytes, n);
}

FILE *dm_note_open(dm_note_buf *nb) {
    nb->buf = NULL;
    nb->len = 0;
    nb->f = open_memstream(&nb->buf, &nb->len);
    return nb->f;
}

static void close_as(dm_note_buf *nb, const dm_job_io *io, int kind, char **text) {
    if (text) *text = NULL;
    if (!nb->f) return;
    fclose(nb->f);
    nb->f = NULL;
    if (nb->len) emit_text(io, kind, nb->buf, nb->len);
    if (text) *text = nb->buf;
    else free(nb->buf);
    nb->buf = NULL;
}
void dm_note_close(dm_note_buf *nb, const dm_job_io *io) { close_as(nb, io, DM_EV_NOTE, NULL); }
void dm_note_close_detail(dm_note_buf *nb, const dm_job_io *io, char **text) {
    close_as(nb, io, DM_EV_DETAIL, text);
}

void dm_fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(fmod(s, 3600) / 60));
    else snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

void dm_step_text(const dm_event *ev, char *buf, size_t n) {
    char of[32] = "?"; /* steps 0: not fixed yet (a time budget measuring its first steps) */
    if (ev->steps > 0) snprintf(of, sizeof of, "%ld", ev->steps);
    if (ev->text) {
        snprintf(buf, n, "%s: step %ld/%s", ev->text, ev->step, of);
        return;
    }
    char vb[32] = "-", eta[32];
    if (!isnan(ev->val_bpb)) snprintf(vb, sizeof vb, "%.4f bpb @%ld", ev->val_bpb, ev->val_step);
    dm_fmt_duration(eta, sizeof eta, ev->eta_s);
    snprintf(buf, n, "step %ld/%s | loss %.4f | val %s | %.0f ms/step | %.0f tok/s | ETA %s",
             ev->step, of, ev->loss, vb, ev->ms_per_step, ev->tokens_per_s, eta);
}

void dm_event_write(FILE *out, FILE *err, const dm_event *ev) {
    char line[512];
    switch (ev->kind) {
    case DM_EV_STEP:
        if (!ev->logged) return;
        dm_step_text(ev, line, sizeof line);
        fprintf(out, "%s\n", line);
        break;
    case DM_EV_PROGRESS: fprintf(out, "%.*s\n", (int)ev->len, ev->text); break;
    case DM_EV_WARN:
        fflush(out);
        fwrite(ev->text, 1, ev->len, err);
        fflush(err);
        return;
    default: fwrite(ev->text, 1, ev->len, out); break;
    }
    fflush(out);
}

void dm_event_log(void *user, const dm_event *ev) { dm_event_write(user, user, ev); }

void dm_status_write(FILE *f, const dm_status *st) {
    if (st->code == DM_JOB_OK) return;
    fprintf(f, "%s%s\n", st->code == DM_JOB_INTERRUPTED ? "" : "error: ", st->msg);
    fflush(f);
}

/* ---- the bundled corpus ---- */

#ifndef DM_DATADIR
#define DM_DATADIR "/usr/local/share"
#endif
#define DM_CORPUS_NAME "kjv.txt.gz"

const char *dm_data_path(const char *data, char *buf, size_t n, dm_status *st) {
    if (data) return data;
    char exe[4096], cand[3][4200];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(cand[0], sizeof cand[0], "%s/../share/dormouse/" DM_CORPUS_NAME, exe);
    snprintf(cand[1], sizeof cand[1], "%s", DM_DATADIR "/dormouse/" DM_CORPUS_NAME);
    snprintf(cand[2], sizeof cand[2], "%s", DM_SOURCE_DIR "/data/" DM_CORPUS_NAME);
    for (int i = len > 0 ? 0 : 1; i < 3; i++)
        if (access(cand[i], R_OK) == 0) {
            char *abs = realpath(cand[i], NULL); /* without the ../ */
            snprintf(buf, n, "%s", abs ? abs : cand[i]);
            free(abs);
            return buf;
        }
    dm_fail(st, DM_JOB_BAD_INPUT, "the bundled corpus " DM_CORPUS_NAME " is not installed "
            "(looked in %s/../share/dormouse, " DM_DATADIR "/dormouse and " DM_SOURCE_DIR
            "/data); pass --data PATH", exe);
    return NULL;
}

/* ---- configs ---- */

int dm_config_apply_file(dm_config *c, const char *path, dm_status *st) {
    char err[DM_ERRLEN + 64];
    size_t len;
    char *js = dm_read_file_n(path, &len, err, sizeof err);
    if (!js) return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    if (strlen(js) != len) { /* the JSON text would end there */
        dm_fail(st, DM_JOB_BAD_INPUT, "%s: a NUL byte at byte %zu (a config file is JSON text)",
                path, strlen(js));
        free(js);
        return st->code;
    }
    int rc = dm_config_from_json(c, js, err, sizeof err);
    free(js);
    return rc ? dm_fail(st, DM_JOB_BAD_INPUT, "%s: %s", path, err) : 0;
}

const char *dm_split_set(const char *kv, char *key, size_t n) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return NULL;
    size_t len = (size_t)(eq - kv) < n - 1 ? (size_t)(eq - kv) : n - 1;
    memcpy(key, kv, len);
    key[len] = 0;
    return eq + 1;
}

int dm_config_apply_sets(dm_config *c, const char *flag, const char *const *sets, int n,
                         dm_status *st) {
    for (int i = 0; i < n; i++) {
        char key[64], err[DM_ERRLEN], shown[128];
        const char *value = dm_split_set(sets[i], key, sizeof key);
        dm_printable(sets[i], shown, sizeof shown); /* the error stays one line */
        if (!value)
            return dm_fail(st, DM_JOB_BAD_INPUT, "%s expects key=value, got '%s'", flag, shown);
        if (dm_config_set(c, key, value, err, sizeof err))
            return dm_fail(st, DM_JOB_BAD_INPUT, "%s %s: %s", flag, shown, err);
    }
    return 0;
}
