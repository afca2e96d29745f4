/* comm_xport.h — the transport under comm.c: comm_mpi.c (a build with MPI) or
 * comm_nompi.c (without), never both. comm.c handles one process, counting and the
 * failed state; these move the bytes between ranks (size > 1 only) and start / end MPI. */
#ifndef DM_COMM_XPORT_H
#define DM_COMM_XPORT_H

#include "base/comm.h"

struct dm_comm {
    int rank, size, local_size;
    int mpi;           /* MPI was initialized (finalize / abort at the end) */
    int failed;
    char error[512];
    double timeout_s;  /* a collective that waits longer fails (dm_comm_set_timeout); 0: none */
    long ping;         /* the transport's channel to ask a rank whether it is alive */
    dm_comm_stats st;
};

/* The launcher's world size from its environment (Open MPI, MPICH / Hydra, PMIx);
 * 0 when the process was not started by an MPI launcher. */
int dm_comm_launcher_size(void);

/* Start MPI when launched (comm.c calls this only then); fill rank, size, local_size,
 * mpi. 0 ok, else err. */
int dm_xport_start(int *argc, char ***argv, dm_comm *c, char *err, size_t errlen);
/* Finalize (status == 0 or agreed) or abort every rank with status (c->failed). */
void dm_xport_end(dm_comm *c, int status);
/* The collectives of comm.h for size > 1; 0 ok, else why (the MPI call and its error). */
int dm_xport_allgather(dm_comm *c, void *buf, const size_t *off, size_t elem, char *why,
                       size_t n);
int dm_xport_alltoall_shards(dm_comm *c, const float *send, float *recv, const size_t *off,
                             char *why, size_t n);
int dm_xport_bcast(dm_comm *c, void *buf, size_t count, size_t elem, int root, char *why,
                   size_t n);
/* v[0..2) <- the minimum of each over the ranks */
int dm_xport_min2(dm_comm *c, int v[2], char *why, size_t n);

#endif
