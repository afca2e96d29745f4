/* comm_nompi.c — the transport of comm.h in a build without MPI: one process only. A
 * launch by mpirun (or another MPI launcher) is refused with what to install; the
 * collectives are never reached (comm.c answers them for one process). */
#include <stdio.h>

#include "base/comm_xport.h"

int dm_xport_start(int *argc, char ***argv, dm_comm *c, char *err, size_t errlen) {
    (void)argc;
    (void)argv;
    (void)c;
    int n = dm_comm_launcher_size();
    snprintf(err, errlen, "started by an MPI launcher (%d process%s), but this dormouse was "
             "built without MPI: install Debian's libopenmpi-dev and openmpi-bin (or run "
             "scripts/deps.sh), then rebuild (make build)", n, n == 1 ? "" : "es");
    return 1;
}

void dm_xport_end(dm_comm *c, int status) {
    (void)c;
    (void)status;
}

static int no_mpi(char *why, size_t n) {
    snprintf(why, n, "this build has no MPI");
    return 1;
}

int dm_xport_allgather(dm_comm *c, void *buf, const size_t *off, size_t elem, char *why,
                       size_t n) {
    (void)c, (void)buf, (void)off, (void)elem;
    return no_mpi(why, n);
}

int dm_xport_alltoall_shards(dm_comm *c, const float *send, float *recv, const size_t *off,
                             char *why, size_t n) {
    (void)c, (void)send, (void)recv, (void)off;
    return no_mpi(why, n);
}

int dm_xport_bcast(dm_comm *c, void *buf, size_t count, size_t elem, int root, char *why,
                   size_t n) {
    (void)c, (void)buf, (void)count, (void)elem, (void)root;
    return no_mpi(why, n);
}

int dm_xport_min2(dm_comm *c, int v[2], char *why, size_t n) {
    (void)c, (void)v;
    return no_mpi(why, n);
}
