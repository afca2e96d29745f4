/* job.h — what every job shares (docs/architecture.md section 2, layer 6).
 *
 * A job (train, eval, sample, bench, ab run / report) returns a status and reports its
 * progress through a callback: it never prints to stdout or stderr, never installs a
 * signal handler and never exits. The command (src/cli/) owns the process: it prints
 * the events, prints a failed status as `error: MSG` and maps the code to the exit code,
 * and its SIGINT / SIGTERM handlers set the flag a job reads as `stop`. Files a job
 * writes (metrics.jsonl, a sweep cell's train.log) are the job's own. */
#ifndef DM_JOB_H
#define DM_JOB_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "base/comm.h"
#include "base/text.h" /* dm_shell_quote */
#include "dormouse.h"

#ifndef DM_SOURCE_DIR
#define DM_SOURCE_DIR "."
#endif

typedef enum {
    DM_JOB_OK = 0,
    DM_JOB_FAILED,      /* runtime failure: NaN loss, I/O error, out of memory */
    DM_JOB_BAD_INPUT,   /* flags, config, corpus, checkpoint */
    DM_JOB_INTERRUPTED, /* stopped on request (a checkpoint saved where there is one) */
} dm_job_code;

typedef struct {
    dm_job_code code;
    char msg[2048]; /* one line, no "error: " prefix; "" when OK */
} dm_status;

/* Progress. */
enum {
    DM_EV_NOTE, /* text: complete lines for the user */
    DM_EV_WARN, /* text: a complete line on a failure the job goes on after (a sweep cell) */
    DM_EV_TEXT, /* text[0..len): bytes as they come (generated text; any byte, no lines) */
    DM_EV_STEP, /* a training step; with text = a label, a step of a labelled run (a sweep
                   cell), only step and steps set: a transient progress line */
    DM_EV_DETAIL, /* text: complete lines of detail (tables a job also keeps in its files,
                     rows a benchmark appends with --history): the command prints them
                     only when asked (-v), a log always */
    DM_EV_PROGRESS, /* text[0..len): a progress line without its newline (prepare): on a
                       terminal redrawn in place, elsewhere written as a line */
};

typedef struct {
    int kind;
    const char *text;
    size_t len;             /* bytes of text */
    long step, steps;       /* steps done, of */
    double loss, val_bpb;   /* this step's loss (nats); the last val BPB (NAN: none yet) */
    long val_step;          /* the step val_bpb was measured at */
    double ms_per_step, tokens_per_s, eta_s;
    int logged;             /* this step wrote a metrics line */
} dm_event;

typedef void (*dm_progress_fn)(void *user, const dm_event *ev);

typedef struct {
    dm_progress_fn fn;             /* NULL: no progress */
    void *user;
    volatile sig_atomic_t *stop;   /* set asynchronously (the CLI's signal handler, to the
                                      signal); the job stops cleanly after its current unit
                                      of work. A job of several processes sets it on every
                                      one to the signal one of them got, so all exit alike.
                                      NULL: never */
    const char *prog;              /* how the user runs dormouse (argv[0]), for the commands
                                      a job tells them to run next; NULL: "dormouse" */
} dm_job_io;

/* ---- status ---- */

/* Set st to code with a printf-formatted one-line message; returns code. A message of
 * running out of memory is a runtime failure (DM_JOB_FAILED), also when given as bad input. */
dm_job_code dm_fail(dm_status *st, dm_job_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 1 when a stop was asked for. io may be NULL. */
int dm_job_stopped(const dm_job_io *io);
/* The ranks' agreement at a point every rank reaches (dm_comm_agree: *code and msg, n
 * bytes, as there), with this process's stop request from io; afterwards io->stop holds
 * the largest request of any rank, so every rank exits as the signalled one. Returns
 * that request (0: none); 1 from dm_comm_agree (the exchange failed) into *failed. */
int dm_job_agree(const dm_job_io *io, dm_comm *comm, int *code, char *msg, size_t n,
                 int *failed);
/* The program name for printed commands: io->prog, else "dormouse"; shell-quoted. */
const char *dm_job_prog(const dm_job_io *io, char *buf, size_t n);

/* ---- progress (io may be NULL: nothing is reported) ---- */

void dm_job_emit(const dm_job_io *io, const dm_event *ev);
void dm_job_note(const dm_job_io *io, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dm_job_warn(const dm_job_io *io, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dm_job_detail(const dm_job_io *io, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dm_job_text(const dm_job_io *io, const char *bytes, size_t n);

/* A note written with stdio by a function that prints to a FILE (the optimizer's groups,
 * the atlas, the A/B table, history rows): dm_note_open gives the FILE (NULL when out of
 * memory), dm_note_close reports what was written as one note. */
typedef struct {
    char *buf;
    size_t len;
    FILE *f;
} dm_note_buf;
FILE *dm_note_open(dm_note_buf *nb);
void dm_note_close(dm_note_buf *nb, const dm_job_io *io);
/* The same as a detail (DM_EV_DETAIL); the text stays in *text when text is not NULL
 * (the caller frees it), for the job's own file. */
void dm_note_close_detail(dm_note_buf *nb, const dm_job_io *io, char **text);

/* The text of a step event, without a newline: "step 10/600 | loss 2.3456 | val - | 512
 * ms/step | 8000 tok/s | ETA 4m48s" (loss in nats; after an evaluation "val 1.5499 bpb
 * @200": the BPB and the step it was measured at), or "LABEL: step 10/600" for a labelled
 * one. */
void dm_step_text(const dm_event *ev, char *buf, size_t n);

/* A duration as "4m48s" or "2h05m" ("?" when negative or beyond 10^7 s). */
void dm_fmt_duration(char *buf, size_t n, double s);

/* The plain rendering of events, as a command prints them without a terminal: notes,
 * details, text and logged step lines (dm_step_text and a newline) to out, warnings to err; other
 * step events are not written. dm_event_log is the same as a progress function writing
 * everything to the FILE * in user (a sweep cell's train.log). */
void dm_event_write(FILE *out, FILE *err, const dm_event *ev);
void dm_event_log(void *user, const dm_event *ev);
/* A status as a line: "error: MSG" when failed or bad input, "MSG" when interrupted;
 * nothing when OK. */
void dm_status_write(FILE *f, const dm_status *st);

/* ---- the bundled corpus ---- */

/* The corpus to use: data when not NULL, else the bundled one (kjv.txt.gz), looked for
 * where an installed dormouse keeps it (EXE_DIR/../share/dormouse/, then the data
 * directory of the configured install prefix) and then in the source tree it was built
 * from (data/). Returns data or buf; NULL with a bad-input status (naming where it looked
 * and --data) when the bundled corpus is nowhere. */
const char *dm_data_path(const char *data, char *buf, size_t n, dm_status *st);

/* ---- configs from a file and key=value sets (the same for every job) ---- */

/* Apply the JSON object of keys in path onto c. 0 ok; else a bad-input status. */
int dm_config_apply_file(dm_config *c, const char *path, dm_status *st);
/* Apply "key=value" sets[0..n) onto c in order; flag names them in errors ("--set").
 * 0 ok; else a bad-input status. */
int dm_config_apply_sets(dm_config *c, const char *flag, const char *const *sets, int n,
                         dm_status *st);
/* Split "key=value" at the '=' into key (n bytes); NULL when kv is not of that form,
 * else the value. */
const char *dm_split_set(const char *kv, char *key, size_t n);

#endif
