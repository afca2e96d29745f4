/* rundir.h — a run directory while a command writes it (docs/architecture.md section 6):
 * its lock, what the command must undo when it fails, and the identity of the corpus it
 * trains on.
 *
 * The lock. Every writer of a run directory (train, train --resume, an A/B sweep and its
 * cells) holds DIR/.lock, an flock(2) lock with the holder's pid written inside, for as
 * long as it writes. A second writer is refused at once: "DIR is in use by process N".
 * Why flock and not a pid file checked with kill(pid, 0): the kernel drops an flock lock
 * when its holder dies by any means (kill -9, a crash, a power cut of the machine), so a
 * stale lock is taken over by the next writer with nothing to judge and no race between
 * two takers; a pid file needs that judgement (and a reused pid would make a dead run
 * look alive). The pids in the file (the taker's, and those of the processes it shares the
 * lock with) only name the holders in the refusal: those alive. The file is
 * removed when the lock is released (a taker that opened it just before checks, under
 * the lock, that the path still names the file it locked, else tries again), and a file
 * left by a killed holder is simply locked again.
 *
 * Undo. A command that fails before it saved a checkpoint leaves the directory as it
 * found it: dm_rundir_remember keeps the run files' contents (config.json, data_path,
 * val_path, metrics.jsonl, summary.json, atlas.txt, parent.json) and dm_rundir_abandon puts them back
 * (removing the ones that did not exist), and removes the directories the command
 * created.
 *
 * The corpus. data_path holds the corpus path (first line) and its identity, "bytes N
 * crc32 XXXXXXXX" (second line): a resumed run must train on the same bytes. */
#ifndef DM_RUNDIR_H
#define DM_RUNDIR_H

#include <stddef.h>
#include <stdint.h>

#define DM_RUN_FILES 7 /* config.json data_path val_path metrics.jsonl summary.json atlas.txt
                          parent.json */

typedef struct {
    char dir[4096];
    int fd;                     /* the lock; -1: not held by this struct */
    char made[4096];            /* the topmost directory created by dm_rundir_open, or "" */
    int remembered;             /* dm_rundir_remember ran */
    char *orig[DM_RUN_FILES];   /* the run files as they were; NULL: absent */
} dm_rundir;

enum { DM_RUNDIR_OK = 0, DM_RUNDIR_FAILED = 1, DM_RUNDIR_BUSY = 2 };

/* Take the lock of dir (which must exist) into *fd. DM_RUNDIR_BUSY when another process
 * holds it ("DIR is in use by process N" in err), DM_RUNDIR_FAILED on an error. */
int dm_lock_dir(const char *dir, int *fd, char *err, size_t errlen);
/* Name the processes that hold the lock of fd (the taker first, then those it shares the
 * lock with: an A/B cell's training process, which inherits it); the refusal names the
 * ones alive. 0 ok. */
int dm_lock_set_holders(int fd, const long *pids, int n);
/* Release a lock of dm_lock_dir and remove its file. */
void dm_unlock_dir(const char *dir, int fd);

/* Open dir for writing: create it and its parents when create (remembering what was
 * created), then take its lock unless the caller holds it already (locked: an A/B cell,
 * locked by its sweep). DM_RUNDIR_* as dm_lock_dir. */
int dm_rundir_open(dm_rundir *r, const char *dir, int create, int locked, char *err,
                   size_t errlen);
/* Keep the run files' contents for dm_rundir_abandon. 0 ok. */
int dm_rundir_remember(dm_rundir *r, char *err, size_t errlen);
/* Undo the command: the remembered run files back as they were, the directories it
 * created removed. */
void dm_rundir_abandon(dm_rundir *r);
/* Release the lock (when this struct took it) and free what it holds. */
void dm_rundir_close(dm_rundir *r);

/* data_path of run dir: write the corpus path and identity (its size and CRC-32, and
 * the training bytes of its split: the same bytes split elsewhere train otherwise).
 * 0 ok. */
int dm_rundir_write_data(const char *dir, const char *path, size_t bytes, uint32_t crc,
                         size_t train, char *err, size_t errlen);
/* Read them back: path into path (pathlen bytes); *has_id = 0 when the file has no
 * identity line, *train = 0 when the line has no training bytes (runs of older
 * dormice). 0 ok; 1 when data_path is missing, unreadable or names no corpus (err). */
int dm_rundir_read_data(const char *dir, char *path, size_t pathlen, size_t *bytes,
                        uint32_t *crc, size_t *train, int *has_id, char *err, size_t errlen);

#endif
