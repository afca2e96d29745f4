/* comm_mpi.c — the transport of comm.h over MPI (built when CMake finds MPI: Debian's
 * libopenmpi-dev). The one file of dormouse that includes <mpi.h>. Errors return (the
 * communicator's handler is MPI_ERRORS_RETURN) and leave the comm failed; the process's
 * end then aborts every rank instead of waiting on a peer that is gone. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/comm_xport.h"

static int mpi_failed(int rc, const char *call, char *why, size_t n) {
    if (rc == MPI_SUCCESS) return 0;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    snprintf(why, n, "%s failed: %s", call, text);
    return 1;
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
    if (!rc)
        rc = mpi_failed(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp,
                                       type_of(elem), MPI_COMM_WORLD),
                        "MPI_Allgatherv", why, n);
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
    if (!rc)
        rc = mpi_failed(MPI_Alltoallv(send, scnt, sdsp, MPI_FLOAT, recv, rcnt, rdsp, MPI_FLOAT,
                                      MPI_COMM_WORLD),
                        "MPI_Alltoallv", why, n);
    free(v);
    return rc;
}

int dm_xport_bcast(dm_comm *c, void *buf, size_t count, size_t elem, int root, char *why,
                   size_t n) {
    (void)c;
    size_t scale = elem == 4 || elem == 8 ? 1 : elem;
    if (!fits(count * scale, "a broadcast", why, n)) return 1;
    return mpi_failed(MPI_Bcast(buf, (int)(count * scale), type_of(elem), root, MPI_COMM_WORLD),
                      "MPI_Bcast", why, n);
}

int dm_xport_min2(dm_comm *c, int v[2], char *why, size_t n) {
    (void)c;
    return mpi_failed(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
                      "MPI_Allreduce", why, n);
}
