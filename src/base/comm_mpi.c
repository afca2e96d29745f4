/* comm_mpi.c — the transport of comm.h over MPI (built when CMake finds MPI: Debian's
 * libopenmpi-dev). The one file of dormouse that includes <mpi.h>. Errors return (the
 * communicator's handler is MPI_ERRORS_RETURN) and leave the comm failed; the process's
 * end then aborts every rank instead of waiting on a peer that is gone.
 *
 * Every collective is started non-blocking and waited for by polling (await_req, below):
 * MPI_Test a while, then with sleeps between tests that double up to a quarter of a
 * millisecond (a transfer moves only inside MPI calls: no longer, or it would slow), so a
 * rank waiting on a slow or stopped peer uses about 1% of a core, not all of it. Past the comm's timeout the wait
 * gives up: it asks every other rank for an answer on a communicator of its own (a rank
 * that waits in a collective answers while it polls) and names the ranks that give none. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/comm_xport.h"

#define TAG_ASK 1
#define TAG_ANSWER 2

static int mpi_failed(int rc, const char *call, char *why, size_t n) {
    if (rc == MPI_SUCCESS) return 0;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    snprintf(why, n, "%s failed: %s", call, text);
    return 1;
}

/* the ping channel of the comm (a duplicate of MPI_COMM_WORLD, kept as its handle) */
static MPI_Comm ping_comm(const dm_comm *c) { return MPI_Comm_f2c((MPI_Fint)c->ping); }

static const int ONE = 1; /* what is sent in a ping and in its answer */


static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Answer every rank that asked whether this one is alive. */
static void answer_pings(const dm_comm *c) {
    MPI_Comm pc = ping_comm(c);
    int flag = 1;
    while (flag) {
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ASK, pc, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        int x;
        MPI_Recv(&x, 1, MPI_INT, st.MPI_SOURCE, TAG_ASK, pc, MPI_STATUS_IGNORE);
        MPI_Request r;
        if (MPI_Isend(&ONE, 1, MPI_INT, st.MPI_SOURCE, TAG_ANSWER, pc, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

/* The ranks that do not answer within a few seconds, as "rank 1" or "ranks 1, 3" into
 * out; "" when all do. */
static void silent_ranks(dm_comm *c, char *out, size_t n) {
    MPI_Comm pc = ping_comm(c);
    int N = c->size, *got = calloc((size_t)N, sizeof *got);
    MPI_Request *rq = calloc((size_t)N, sizeof *rq);
    out[0] = 0;
    if (!got || !rq) {
        free(got);
        free(rq);
        return;
    }
    for (int r = 0; r < N; r++) {
        rq[r] = MPI_REQUEST_NULL;
        if (r == c->rank) continue;
        MPI_Request s;
        if (MPI_Isend(&ONE, 1, MPI_INT, r, TAG_ASK, pc, &s) == MPI_SUCCESS)
            MPI_Request_free(&s);
        MPI_Irecv(&got[r], 1, MPI_INT, r, TAG_ANSWER, pc, &rq[r]);
    }
    for (double t0 = dm_now(); dm_now() - t0 < 3.0;) {
        int all = 1;
        for (int r = 0; r < N; r++) {
            int done = 1;
            if (rq[r] != MPI_REQUEST_NULL) MPI_Test(&rq[r], &done, MPI_STATUS_IGNORE);
            all &= done;
        }
        answer_pings(c);
        if (all) break;
        nap(1000000);
    }
    size_t used = 0;
    int k = 0;
    for (int r = 0; r < N; r++)
        if (r != c->rank && !got[r]) k++;
    for (int r = 0; r < N && used < n; r++)
        if (r != c->rank && !got[r])
            used += (size_t)snprintf(out + used, n - used, "%s%d", used ? ", " : k > 1 ? "ranks "
                                     : "rank ", r);
    for (int r = 0; r < N; r++) /* the receives of ranks that never answered */
        if (rq[r] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rq[r]);
            MPI_Wait(&rq[r], MPI_STATUS_IGNORE);
        }
    free(got);
    free(rq);
}

/* Wait for a started collective: 0 done; 1 with why (its error, or the timeout). */
static int await_req(dm_comm *c, MPI_Request *req, const char *call, char *why, size_t n) {
    double t0 = dm_now();
    long ns = 1000;
    for (long polls = 0;; polls++) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_failed(rc, call, why, n);
        if (done) return 0;
        if (polls < 2000) continue; /* the usual exchange ends within these */
        answer_pings(c);
        nap(ns);
        if (ns < 256000) ns *= 2; /* at most ~4 polls a millisecond: under 1% of a core */
        double waited = dm_now() - t0;
        if (c->timeout_s > 0 && waited > c->timeout_s) {
            char who[256];
            silent_ranks(c, who, sizeof who);
            snprintf(why, n, "%s did not complete within comm_timeout (%.0f s): %s%s", call,
                     c->timeout_s, who[0] ? who : "every rank answers, but the exchange hangs",
                     who[0] ? " does not answer (stopped, hung or gone)" : "");
            return 1;
        }
    }
}


int dm_xport_start(int *argc, char ***argv, dm_comm *c, char *err, size_t errlen) {
    int provided = 0, rc;
    /* only the main thread calls MPI; OpenMP threads run between the calls */
    rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Init failed (code %d): the MPI launcher and this build's "
                 "MPI library may not match", rc);
        return 1;
    }
    c->mpi = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm pc;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &pc) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Comm_dup failed");
        return 1;
    }
    MPI_Comm_set_errhandler(pc, MPI_ERRORS_RETURN);
    c->ping = (long)MPI_Comm_c2f(pc);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    MPI_Comm node;
    c->local_size = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                            &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &c->local_size);
        MPI_Comm_free(&node);
    }
    return 0;
}

void dm_xport_end(dm_comm *c, int status) {
    if (c->failed) MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
    MPI_Comm pc = ping_comm(c);
    MPI_Comm_free(&pc);
    MPI_Finalize();
}

/* MPI counts and displacements are ints */
static int fits(size_t x, const char *what, char *why, size_t n) {
    if (x <= (size_t)INT_MAX) return 1;
    snprintf(why, n, "%s of %zu elements is beyond MPI's int counts", what, x);
    return 0;
}

/* elem bytes as an MPI type: float, double or bytes */
static MPI_Datatype type_of(size_t elem) {
    return elem == 4 ? MPI_FLOAT : elem == 8 ? MPI_DOUBLE : MPI_BYTE;
}

int dm_xport_allgather(dm_comm *c, void *buf, const size_t *off, size_t elem, char *why,
                       size_t n) {
    int N = c->size, *cnt = malloc(2 * sizeof(int) * (size_t)N);
    if (!cnt) return snprintf(why, n, "out of memory"), 1;
    int *dsp = cnt + N, rc = 0;
    size_t scale = elem == 4 || elem == 8 ? 1 : elem;
    for (int r = 0; r < N && !rc; r++) {
        rc = !fits(off[r + 1] * scale, "an all-gather", why, n);
        cnt[r] = (int)((off[r + 1] - off[r]) * scale);
        dsp[r] = (int)(off[r] * scale);
    }
    MPI_Request rq;
    if (!rc)
        rc = mpi_failed(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp,
                                        type_of(elem), MPI_COMM_WORLD, &rq),
                        "MPI_Iallgatherv", why, n) ||
             await_req(c, &rq, "MPI_Allgatherv", why, n);
    free(cnt);
    return rc;
}

int dm_xport_alltoall_shards(dm_comm *c, const float *send, float *recv, const size_t *off,
                             char *why, size_t n) {
    int N = c->size, me = c->rank, *v = malloc(4 * sizeof(int) * (size_t)N);
    if (!v) return snprintf(why, n, "out of memory"), 1;
    int *scnt = v, *sdsp = v + N, *rcnt = v + 2 * N, *rdsp = v + 3 * N, rc = 0;
    size_t mine = off[me + 1] - off[me];
    rc = !fits(off[N], "a gradient exchange", why, n) ||
         !fits(mine * (size_t)N, "a gradient shard exchange", why, n);
    for (int s = 0; s < N && !rc; s++) {
        scnt[s] = (int)(off[s + 1] - off[s]);
        sdsp[s] = (int)off[s];
        rcnt[s] = (int)mine;
        rdsp[s] = (int)(mine * (size_t)s);
    }
    MPI_Request rq;
    if (!rc)
        rc = mpi_failed(MPI_Ialltoallv(send, scnt, sdsp, MPI_FLOAT, recv, rcnt, rdsp, MPI_FLOAT,
                                       MPI_COMM_WORLD, &rq),
                        "MPI_Ialltoallv", why, n) ||
             await_req(c, &rq, "MPI_Alltoallv", why, n);
    free(v);
    return rc;
}

int dm_xport_bcast(dm_comm *c, void *buf, size_t count, size_t elem, int root, char *why,
                   size_t n) {
    size_t scale = elem == 4 || elem == 8 ? 1 : elem;
    if (!fits(count * scale, "a broadcast", why, n)) return 1;
    MPI_Request rq;
    return mpi_failed(MPI_Ibcast(buf, (int)(count * scale), type_of(elem), root, MPI_COMM_WORLD,
                                 &rq),
                      "MPI_Ibcast", why, n) ||
           await_req(c, &rq, "MPI_Bcast", why, n);
}

int dm_xport_min2(dm_comm *c, int v[2], char *why, size_t n) {
    MPI_Request rq;
    return mpi_failed(MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &rq),
                      "MPI_Iallreduce", why, n) ||
           await_req(c, &rq, "MPI_Allreduce", why, n);
}
