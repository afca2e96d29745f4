/* cli.h — the `dormouse` command (layer 7 of docs/architecture.md section 2): what every
 * command uses: argument scanning and numbers for flags (args.c), the printing of the
 * jobs' progress and exit codes (print.c). The commands themselves are cli/commands.h;
 * main.c dispatches to them and owns the process and its signals. The jobs (src/jobs/)
 * do the work. */
#ifndef DM_CLI_H
#define DM_CLI_H

#include <stdio.h>

#include "base/comm.h"
#include "dormouse.h"
#include "jobs/job.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/* Option scanner over argv: --name value or --name=value; positional args returned with
 * name == NULL; -v / --verbose, taken by every command, sets the printer's verbose and is
 * not returned. Returns 0 at the end, 1 for an item, -1 on a usage error (printed, with
 * the nearest option when one is close). */
typedef struct {
    int argc, i;
    char **argv;
    const char *const *with_value; /* options that take a value (NULL-terminated) */
    const char *const *flags;      /* options without a value */
    const char *name, *value;
} dm_args;
int dm_args_next(dm_args *a, const char *cmd);

/* Numbers for flags: print an error naming the flag on failure. */
int dm_cli_long(const char *flag, const char *v, long lo, long hi, long *out);
int dm_cli_double(const char *flag, const char *v, double lo, double hi, double *out);

/* Print the config keys by group with their defaults and help (for --help). */
void dm_cli_print_keys(FILE *f);

/* The printer of the jobs' events (the user of the dm_job_io main gives the commands):
 * notes and text to stdout, warnings to stderr; a step on a terminal redraws one line
 * (`\r\033[K`), elsewhere only logged steps, one line each. */
typedef struct {
    int quiet;     /* a rank other than 0 under mpirun: rank 0 prints the agreed status */
    int tty;       /* stdout is a terminal */
    int open;      /* a step line is drawn without its newline */
    int transient; /* ... and it is a labelled one: cleared, not kept, when text follows */
    int verbose;   /* -v / --verbose: print the jobs' details (DM_EV_DETAIL) too */
} dm_printer;
/* The printer of this process (the one main hands the jobs); -v sets its verbose. */
dm_printer *dm_cli_printer(void);
void dm_cli_progress(void *user, const dm_event *ev);
/* The end of a job: close the step line, print a failed status on stderr (`error: MSG`;
 * an interrupted one as MSG) and return the exit code: 0 OK, 1 failed, 2 bad input,
 * interrupted 128 + the signal in io->stop (130 SIGINT, 143 SIGTERM; 130 without one). */
int dm_cli_exit(const dm_job_io *io, const dm_status *st);

#endif
