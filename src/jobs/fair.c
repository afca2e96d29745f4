/* fair.c — a fair share of the cores (see fair.h). */
#include "jobs/fair.h"

#include <dirent.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jobs/step.h"

#define MAX_SEEN 64

/* /proc/PID/stat: the command name, the parent and the CPU ticks (user + system); 0 ok */
static int read_stat(long pid, char *comm, size_t n, long *ppid, unsigned long long *ticks,
                     char *state) {
    char p[64], line[1024];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC); /* read(2), not stdio: no heap */
    if (fd < 0) return 1;
    ssize_t got = read(fd, line, sizeof line - 1);
    close(fd);
    if (got <= 0) return 1;
    line[got] = 0;
    char *lp = strchr(line, '('), *rp = strrchr(line, ')');
    if (!lp || !rp || rp < lp) return 1;
    snprintf(comm, n, "%.*s", (int)(rp - lp - 1), lp + 1);
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime stime */
    unsigned long long ut, st;
    if (sscanf(rp + 2, "%c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state, ppid,
               &ut, &st) != 4)
        return 1;
    *ticks = ut + st;
    return 0;
}

static int is_ancestor(long pid, const long *anc, int n_anc) {
    for (int i = 0; i < n_anc; i++)
        if (anc[i] == pid) return 1;
    return 0;
}

int dm_busy_dormice(char *buf, size_t n) {
    buf[0] = 0;
    long anc[64];
    int n_anc = 0;
    char comm[64], state, run0[MAX_SEEN];
    unsigned long long tk;
    for (long p = (long)getpid(); p > 1 && n_anc < 64;) { /* this process and its ancestors */
        long pp;
        anc[n_anc++] = p;
        if (read_stat(p, comm, sizeof comm, &pp, &tk, &state)) break;
        p = pp;
    }
    long pid[MAX_SEEN];
    unsigned long long t0[MAX_SEEN];
    int seen = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) && seen < MAX_SEEN) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        long pp;
        if (*end || p <= 0 || is_ancestor(p, anc, n_anc)) continue;
        if (read_stat(p, comm, sizeof comm, &pp, &tk, &state) || strcmp(comm, "dormouse"))
            continue;
        pid[seen] = p;
        run0[seen] = state == 'R';
        t0[seen++] = tk;
    }
    if (d) closedir(d);
    if (!seen) return 0;
    double hz = (double)sysconf(_SC_CLK_TCK), dt = 0.2;
    struct timespec ts = {0, 200000000L};
    nanosleep(&ts, NULL);
    int busy = 0;
    size_t used = 0;
    for (int i = 0; i < seen; i++) {
        long pp;
        if (read_stat(pid[i], comm, sizeof comm, &pp, &tk, &state) || tk < t0[i]) continue;
        double cores = (double)(tk - t0[i]) / hz / dt;
        /* running (or waiting for a core) at either look, or a tick of CPU between them:
         * one that sleeps (a sweep waiting for its cell, a finished sample) is not busy */
        if (!run0[i] && state != 'R' && tk == t0[i]) continue;
        busy++;
        if (used < n)
            used += (size_t)snprintf(buf + used, n - used, "%spid %ld at %.1f core%s",
                                     used ? ", " : "", pid[i], cores, cores == 1 ? "" : "s");
    }
    return busy;
}

int dm_fair_threads(const dm_config *c, const dm_comm *comm, const dm_job_io *io,
                    int to_stderr, int *shared) {
    if (shared) *shared = 0;
    if (c->threads != 0 || dm_comm_local_size(comm) > 1 || getenv("OMPI_COMM_WORLD_SIZE") ||
        getenv("PMI_SIZE") || getenv("PMIX_RANK"))
        return dm_step_threads(c, comm);
    char who[512];
    int busy = dm_busy_dormice(who, sizeof who), cores = omp_get_num_procs();
    if (!busy) return dm_step_threads(c, comm);
    int share = cores / (busy + 1) > 0 ? cores / (busy + 1) : 1;
    dm_config f = *c;
    f.threads = share;
    int n = dm_step_threads(&f, comm);
    if (shared) *shared = 1;
    char others[48] = "another dormouse is";
    if (busy > 1) snprintf(others, sizeof others, "%d other dormouse processes are", busy);
    char note[1024];
    snprintf(note, sizeof note, "note: threads=%d of %d core%s: %s busy here (%s), so this one "
             "takes a fair share; threads=N chooses\n", n, cores, cores == 1 ? "" : "s", others,
             who);
    if (to_stderr) dm_job_warn(io, "%s", note);
    else dm_job_note(io, "%s", note);
    return n;
}
