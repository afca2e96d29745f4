/* rundir.c — see rundir.h. */
#include "io/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/num.h"
#include "io/files.h"

static const char *const RUN_FILES[DM_RUN_FILES] = {"config.json",   "data_path",
                                                    "val_path",      "metrics.jsonl",
                                                    "summary.json",  "atlas.txt",
                                                    "parent.json"};

/* ---- the lock ----------------------------------------------------------------------- */

/* The processes a lock file names (one pid a line: the taker, then the processes it
 * shares the lock with) that are alive, as "N" or "N and M" into who ("" when none). */
static void live_holders(int fd, char *who, size_t n) {
    char buf[256];
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    buf[got > 0 ? got : 0] = 0;
    size_t used = 0;
    who[0] = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line && used < n;
         line = strtok_r(NULL, "\n", &save)) {
        long long pid;
        if (dm_parse_int(line, 1, INT32_MAX, &pid) || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
            continue;
        used += (size_t)snprintf(who + used, n - used, "%s%lld", used ? " and " : "", pid);
    }
}

int dm_lock_set_holders(int fd, const long *pids, int n) {
    char buf[256];
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof buf; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%ld\n", pids[i]);
    if (used > sizeof buf) used = sizeof buf;
    return ftruncate(fd, 0) != 0 || pwrite(fd, buf, used, 0) != (ssize_t)used;
}

int dm_lock_dir(const char *dir, int *fd_out, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    *fd_out = -1;
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(err, errlen, "cannot lock %s: cannot create %s: %s", dir, path,
                     strerror(errno));
            return DM_RUNDIR_FAILED;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char who[128] = "";
            if (e == EWOULDBLOCK) live_holders(fd, who, sizeof who);
            close(fd);
            if (e != EWOULDBLOCK) {
                snprintf(err, errlen, "cannot lock %s: %s", path, strerror(e));
                return DM_RUNDIR_FAILED;
            }
            if (who[0])
                snprintf(err, errlen, "%s is in use by process %s (another dormouse writes "
                         "it); wait for it to finish or stop it", dir, who);
            else
                snprintf(err, errlen, "%s is in use by another process (another dormouse "
                         "writes it); wait for it to finish or stop it", dir);
            return DM_RUNDIR_BUSY;
        }
        /* locked; but the holder before us may have removed the file as we opened it */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            long me = (long)getpid();
            if (dm_lock_set_holders(fd, &me, 1)) {
                snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
                unlink(path);
                close(fd);
                return DM_RUNDIR_FAILED;
            }
            *fd_out = fd;
            return DM_RUNDIR_OK;
        }
        close(fd);
    }
    snprintf(err, errlen, "cannot lock %s: %s keeps changing", dir, path);
    return DM_RUNDIR_FAILED;
}

void dm_unlock_dir(const char *dir, int fd) {
    if (fd < 0) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    unlink(path); /* while still locked: see dm_lock_dir */
    close(fd);
}

/* ---- open, remember, abandon, close ------------------------------------------------- */

int dm_rundir_open(dm_rundir *r, const char *dir, int create, int locked, char *err,
                   size_t errlen) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    if (create && dm_mkdir_made(dir, r->made, sizeof r->made) != 0) {
        snprintf(err, errlen, "cannot create run directory %s: %s", dir, strerror(errno));
        if (r->made[0]) dm_rmtree(r->made);
        r->made[0] = 0;
        return DM_RUNDIR_FAILED;
    }
    if (locked) return DM_RUNDIR_OK;
    int rc = dm_lock_dir(dir, &r->fd, err, errlen);
    if (rc != DM_RUNDIR_OK) {
        /* not ours to remove: a directory made here may already be another writer's */
        if (rc == DM_RUNDIR_FAILED && r->made[0]) dm_rmtree(r->made);
        r->made[0] = 0;
    }
    return rc;
}

int dm_rundir_remember(dm_rundir *r, char *err, size_t errlen) {
    char path[4200];
    for (int i = 0; i < DM_RUN_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", r->dir, RUN_FILES[i]);
        struct stat st;
        if (lstat(path, &st) != 0 && errno == ENOENT) continue;
        r->orig[i] = dm_read_file(path, err, errlen);
        if (!r->orig[i]) return 1;
    }
    r->remembered = 1;
    return 0;
}

void dm_rundir_abandon(dm_rundir *r) {
    char path[4200], err[256];
    if (r->remembered)
        for (int i = 0; i < DM_RUN_FILES; i++) {
            snprintf(path, sizeof path, "%s/%s", r->dir, RUN_FILES[i]);
            if (r->orig[i]) dm_write_file_atomic(path, r->orig[i], err, sizeof err);
            else unlink(path);
        }
    r->remembered = 0;
    if (r->made[0]) dm_rmtree(r->made);
    r->made[0] = 0;
}

void dm_rundir_close(dm_rundir *r) {
    dm_unlock_dir(r->dir, r->fd);
    r->fd = -1;
    for (int i = 0; i < DM_RUN_FILES; i++) {
        free(r->orig[i]);
        r->orig[i] = NULL;
    }
}

/* ---- the corpus of the run ---------------------------------------------------------- */

int dm_rundir_write_data(const char *dir, const char *path, size_t bytes, uint32_t crc,
                         size_t train, char *err, size_t errlen) {
    char p[4200], text[4400];
    snprintf(p, sizeof p, "%s/data_path", dir);
    snprintf(text, sizeof text, "%s\nbytes %zu crc32 %08" PRIx32 " train %zu\n", path, bytes,
             crc, train);
    return dm_write_file_atomic(p, text, err, errlen);
}

int dm_rundir_read_data(const char *dir, char *path, size_t pathlen, size_t *bytes,
                        uint32_t *crc, size_t *train, int *has_id, char *err, size_t errlen) {
    char p[4200];
    snprintf(p, sizeof p, "%s/data_path", dir);
    char *text = dm_read_file(p, err, errlen);
    if (!text) return 1;
    char *nl = strchr(text, '\n');
    if (nl) *nl = 0;
    if (!text[0]) { /* a corpus never has an empty path: the file was emptied */
        snprintf(err, errlen, "%s names no corpus (its first line is empty)", p);
        free(text);
        return 1;
    }
    snprintf(path, pathlen, "%s", text);
    *has_id = 0;
    *train = 0;
    unsigned long long n, tr;
    unsigned int c;
    char tail;
    if (nl && sscanf(nl + 1, "bytes %llu crc32 %8x train %llu%c", &n, &c, &tr, &tail) == 4 &&
        tail == '\n') {
        *bytes = (size_t)n;
        *crc = (uint32_t)c;
        *train = (size_t)tr;
        *has_id = 1;
    } else if (nl && sscanf(nl + 1, "bytes %llu crc32 %8x%c", &n, &c, &tail) == 3 &&
               tail == '\n') {
        *bytes = (size_t)n;
        *crc = (uint32_t)c;
        *has_id = 1;
    }
    free(text);
    return 0;
}
