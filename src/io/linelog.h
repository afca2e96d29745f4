/* linelog.h — lines appended to a log file (a run's metrics.jsonl) that are never lost
 * without a word: every write is checked; a line that cannot be written (a full disk, an
 * I/O error) is kept in memory, with any part of it that was written, and each later
 * line, flush or close tries again, so the file gets every line, in order, once the disk
 * takes them. The caller decides when to stop waiting (dm_linelog_flush). */
#ifndef DM_LINELOG_H
#define DM_LINELOG_H

#include <stddef.h>

typedef struct {
    int fd;          /* -1: closed */
    char *pend;      /* bytes not written yet (whole lines, the first maybe partly written) */
    size_t n, cap;
    size_t lines;    /* lines among them */
    int err;         /* errno of the last write that failed; 0 when nothing is pending */
} dm_linelog;

/* Open path for appending (created when absent). 0 ok, else err. */
int dm_linelog_open(dm_linelog *l, const char *path, char *err, size_t errlen);
/* Append line (one line, with its newline): written now when it can be, else kept.
 * 0: everything is written; 1: lines are pending (l->err says why); -1: out of memory
 * keeping it (the line is lost: the caller must stop). */
int dm_linelog_add(dm_linelog *l, const char *line);
/* Write what is pending, trying up to `tries` times, wait_ms apart. 0: nothing pending. */
int dm_linelog_flush(dm_linelog *l, int tries, int wait_ms);
/* Close (after one more try); 0 when nothing was left unwritten. */
int dm_linelog_close(dm_linelog *l);

#endif
