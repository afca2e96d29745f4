/* print.c — how the command prints the jobs' progress and their status (see cli.h). */
#include "cli/cli.h"

/* End a step line drawn without its newline: keep a run's last step, clear a label's. */
static void close_line(dm_printer *p) {
    if (!p->open) return;
    fputs(p->transient ? "\r\033[K" : "\n", stdout);
    fflush(stdout);
    p->open = 0;
}

dm_printer *dm_cli_printer(void) {
    static dm_printer printer;
    return &printer;
}

void dm_cli_progress(void *user, const dm_event *ev) {
    dm_printer *p = user;
    if (ev->kind == DM_EV_DETAIL && !p->verbose) return;
    if (ev->kind == DM_EV_STEP && p->tty) {
        char line[512];
        dm_step_text(ev, line, sizeof line);
        printf("\r\033[K%s", line);
        fflush(stdout);
        p->open = 1;
        p->transient = ev->text != NULL;
        return;
    }
    if (ev->kind != DM_EV_STEP) close_line(p);
    dm_event_write(stdout, stderr, ev);
}

int dm_cli_exit(const dm_job_io *io, const dm_status *st) {
    const dm_printer *p = io->user;
    close_line(io->user);
    if (!p->quiet) dm_status_write(stderr, st);
    switch (st->code) {
    case DM_JOB_OK: return EXIT_OK;
    case DM_JOB_BAD_INPUT: return EXIT_USAGE;
    case DM_JOB_INTERRUPTED: /* 128 + the signal that asked: 130 SIGINT, 143 SIGTERM */
        return io->stop && *io->stop > 0 && *io->stop < 64 ? 128 + *io->stop : EXIT_INTERRUPTED;
    default: return EXIT_FAIL;
    }
}
