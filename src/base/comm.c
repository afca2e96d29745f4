/* comm.c — the comm of comm.h: one process without a transport, the counting, the failed
 * state; the bytes between ranks move in comm_mpi.c (or comm_nompi.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/comm.h"
#include "base/comm_xport.h"

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dm_comm_launcher_size(void) {
    /* Open MPI's mpirun, MPICH / Intel MPI's Hydra, a PMIx launcher (srun --mpi=pmix) */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                       "MPI_LOCALNRANKS", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int dm_comm_start(int *argc, char ***argv, dm_comm **out, char *err, size_t errlen) {
    dm_comm *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    c->size = c->local_size = 1;
    c->timeout_s = DM_COMM_TIMEOUT;
    if (dm_comm_launcher_size() > 0 && dm_xport_start(argc, argv, c, err, errlen)) {
        free(c);
        return 1;
    }
    *out = c;
    return 0;
}

void dm_comm_end(dm_comm *c, int status) {
    if (!c) return;
    if (c->mpi) dm_xport_end(c, status);
    free(c);
}

void dm_comm_set_timeout(dm_comm *c, double seconds) {
    if (c) c->timeout_s = seconds > 0 ? seconds : 0;
}

int dm_comm_rank(const dm_comm *c) { return c ? c->rank : 0; }
int dm_comm_size(const dm_comm *c) { return c ? c->size : 1; }
int dm_comm_local_size(const dm_comm *c) { return c ? c->local_size : 1; }
int dm_comm_is_mpi(const dm_comm *c) { return c ? c->mpi : 0; }
const char *dm_comm_error(const dm_comm *c) { return c && c->failed ? c->error : ""; }
dm_comm_stats dm_comm_get_stats(const dm_comm *c) {
    dm_comm_stats none = {0, 0, 0};
    return c ? c->st : none;
}

/* Account one collective that started at t0 and sent `bytes`; record a failure. */
static int done(dm_comm *c, double t0, double bytes, int rc, const char *why) {
    c->st.sec += mono_now() - t0;
    c->st.bytes += bytes;
    c->st.calls++;
    if (rc && !c->failed) {
        c->failed = 1;
        snprintf(c->error, sizeof c->error, "rank %d: %s", c->rank, why);
    }
    return rc ? 1 : 0;
}

int dm_comm_allgather(dm_comm *c, void *buf, const size_t *off, size_t elem) {
    if (!c || c->size == 1) return 0;
    if (c->failed) return 1;
    char why[400] = "";
    double t0 = mono_now();
    int rc = dm_xport_allgather(c, buf, off, elem, why, sizeof why);
    double mine = (double)(off[c->rank + 1] - off[c->rank]) * (double)elem;
    return done(c, t0, mine * (c->size - 1), rc, why);
}

int dm_comm_alltoall_shards(dm_comm *c, const float *send, float *recv, const size_t *off) {
    if (!c || c->size == 1) {
        if (recv != send) memcpy(recv, send + off[0], (off[1] - off[0]) * sizeof(float));
        return 0;
    }
    if (c->failed) return 1;
    char why[400] = "";
    double t0 = mono_now();
    int rc = dm_xport_alltoall_shards(c, send, recv, off, why, sizeof why);
    double others = (double)(off[c->size] - (off[c->rank + 1] - off[c->rank]));
    return done(c, t0, others * sizeof(float), rc, why);
}

int dm_comm_bcast(dm_comm *c, void *buf, size_t count, size_t elem, int root) {
    if (!c || c->size == 1) return 0;
    if (c->failed) return 1;
    char why[400] = "";
    double t0 = mono_now();
    int rc = dm_xport_bcast(c, buf, count, elem, root, why, sizeof why);
    double sent = c->rank == root ? (double)count * elem * (c->size - 1) : 0;
    return done(c, t0, sent, rc, why);
}

int dm_comm_agree(dm_comm *c, int *code, char *msg, size_t n, int *stop) {
    if (!c || c->size == 1) return 0;
    if (!c->failed) {
        char why[400] = "";
        double t0 = mono_now();
        /* both minima: the lowest failing rank, and 1000 - the largest stop request */
        int v[2] = {*code ? c->rank : c->size, *stop > 0 && *stop < 1000 ? 1000 - *stop : 1000};
        int rc = dm_xport_min2(c, v, why, sizeof why);
        done(c, t0, 2.0 * sizeof(int), rc, why);
        if (!rc) {
            *stop = 1000 - v[1];
            if (v[0] == c->size) return 0; /* no rank failed */
            int root = v[0];
            /* the failing rank's code and message, as one buffer */
            char box[2048 + sizeof(int)];
            memset(box, 0, sizeof box);
            if (c->rank == root) {
                memcpy(box, code, sizeof(int));
                snprintf(box + sizeof(int), sizeof box - sizeof(int), "%s", msg);
            }
            if (!dm_comm_bcast(c, box, sizeof box, 1, root)) {
                memcpy(code, box, sizeof(int));
                if (root > 0) snprintf(msg, n, "rank %d: %s", root, box + sizeof(int));
                else snprintf(msg, n, "%s", box + sizeof(int));
                return 0;
            }
        }
    }
    if (!*code) *code = 1;
    snprintf(msg, n, "%s; stopping every rank", c->error);
    return 1;
}
