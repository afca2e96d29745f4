/* ab.c — the two A/B jobs: run a sweep (`dormouse ab`) and report one (`dormouse ab
 * --report`), over the spec, the cells, the statistics and the table (see ab.h). */
#include <stdlib.h>
#include <string.h>

#include "jobs/ab.h"

/* The table as one note. */
static void note_table(const dm_ab_spec *s, const dm_ab_results *r, const dm_job_io *io) {
    dm_note_buf nb;
    FILE *f = dm_note_open(&nb);
    if (f) dm_ab_print(s, r, f);
    dm_note_close(&nb, io);
}

/* The history rows of a finished sweep, when asked for (--history FILE), unless there is
 * nothing new to append. */
static void append_history(const dm_ab_spec *s, const dm_ab_results *r, int ran,
                           const char *path, const dm_job_io *io, dm_status *st) {
    char err[8192];
    if (!path) return;
    if (ran == 0) {
        dm_job_note(io, "\nhistory: every cell was cached; nothing appended\n");
        return;
    }
    if (dm_ab_history(s, r, path, err, sizeof err)) {
        dm_fail(st, DM_JOB_FAILED, "%s", err);
        return;
    }
    dm_job_note(io, "\nhistory: appended %d rows to %s\n", 2 * s->n_arms, path);
}

dm_status dm_ab_run(const dm_ab_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    dm_ab_spec *s = malloc(sizeof *s); /* large: not on the stack */
    dm_ab_results *r = malloc(sizeof *r);
    int ran = 0;
    if (!s || !r) dm_fail(&st, DM_JOB_FAILED, "out of memory");
    else if (!dm_ab_make_spec(a, s, &st) &&
             dm_ab_run_cells(s, r, &ran, io, &st) != DM_JOB_BAD_INPUT) {
        note_table(s, r, io);
        if (st.code == DM_JOB_OK) append_history(s, r, ran, a->history, io, &st);
    }
    free(s);
    free(r);
    return st;
}

dm_status dm_ab_report(const char *dir, long warmup, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    dm_ab_spec *s = malloc(sizeof *s);
    dm_ab_results *r = malloc(sizeof *r);
    char err[8192];
    int lrc = s && r ? dm_ab_load_spec(dir, s, err, sizeof err) : -1;
    if (lrc < 0) dm_fail(&st, DM_JOB_FAILED, "out of memory");
    else if (lrc) dm_fail(&st, lrc == 2 ? DM_JOB_BAD_INPUT : DM_JOB_FAILED, "%s", err);
    else {
        if (warmup >= 0) s->warmup = (int)warmup;
        dm_ab_load_results(s, r);
        note_table(s, r, io);
    }
    free(s);
    free(r);
    return st;
}
