/* comm.h — the processes of one run and what they exchange (docs/architecture.md section
 * 8, "many machines"; docs/scaling.md).
 *
 * A run is N processes, ranks 0 .. N-1. One process is the usual case: a NULL comm, a
 * build without MPI, or a process not started by an MPI launcher is rank 0 of 1, and
 * every collective below is then a no-op (the data are already where they belong). Under
 * `mpirun -np N` in a build with MPI (CMake found it: DM_HAVE_MPI) the ranks are the N
 * processes of MPI_COMM_WORLD; comm_mpi.c is the one file that includes <mpi.h>, and a
 * build without MPI has comm_nompi.c in its place, which refuses a launch by mpirun with
 * the packages to install.
 *
 * Every rank calls the collectives in the same order with the same sizes. Offsets and
 * counts are in elements of `elem` bytes (4: float, 8: double, 1: bytes). A collective
 * that fails (a peer gone, a transport error) returns 1 and leaves the comm failed: every
 * later collective returns 1 at once, and dm_comm_error says what happened. No collective
 * reorders arithmetic: they move data; every sum over ranks is done by the caller in a
 * fixed order (optim/gradsum.c, jobs/eval.c), so results do not depend on N.
 *
 * Costs are counted per rank: the bytes this rank sends in the exchange's logical pattern
 * (an all-gather sends its piece to each of the N-1 others; an all-to-all sends every
 * shard but its own; a broadcast's root sends the buffer N-1 times) and the seconds spent
 * inside collectives. */
#ifndef DM_COMM_H
#define DM_COMM_H

#include <stddef.h>

typedef struct dm_comm dm_comm;

/* Start the process's comm from its command line (before anything else reads argv).
 * Under an MPI launcher: MPI in a build with it; in a build without it, an error (1)
 * saying how to get it. Otherwise one process. 0 ok, *out set (free with dm_comm_end). */
int dm_comm_start(int *argc, char ***argv, dm_comm **out, char *err, size_t errlen);
/* The end of the process: a clean finish when status is 0 or every rank agreed on it;
 * when the comm failed, every other rank is stopped (MPI_Abort) with status. */
void dm_comm_end(dm_comm *c, int status);

int dm_comm_rank(const dm_comm *c);       /* 0 for NULL */
int dm_comm_size(const dm_comm *c);       /* 1 for NULL */
int dm_comm_local_size(const dm_comm *c); /* ranks on this machine (1 for NULL) */
/* 1 when the run was started by an MPI launcher (even with one rank) */
int dm_comm_is_mpi(const dm_comm *c);
/* The failure that left the comm failed ("" when none), e.g. "rank 1: MPI_Alltoallv: ..." */
const char *dm_comm_error(const dm_comm *c);

/* buf[off[r] .. off[r+1]) is rank r's piece (off has size+1 entries): each rank fills its
 * own; afterwards every rank holds every piece. */
int dm_comm_allgather(dm_comm *c, void *buf, const size_t *off, size_t elem);
/* The shards of a flat float buffer: shard s is [off[s], off[s+1]). Rank r sends shard s
 * of its `send` to rank s; rank s receives them in rank order: the piece of rank r at
 * recv + r * (off[s+1] - off[s]). */
int dm_comm_alltoall_shards(dm_comm *c, const float *send, float *recv, const size_t *off);
/* root's buf[0 .. count) to every rank. */
int dm_comm_bcast(dm_comm *c, void *buf, size_t count, size_t elem, int root);

/* Agreement at a point every rank reaches: *code is this rank's status (0 = fine), msg its
 * message, *stop its stop request (0: none; else a positive number, the signal that
 * asked, below 1000). Afterwards, on every rank: *code and msg are those of the lowest
 * failing rank (msg prefixed "rank R: " when R > 0), *stop is the largest stop request of
 * any rank (0 when none asked). Returns 1 only when the exchange itself failed (*code and
 * msg then say so). msg has room for n bytes. */
int dm_comm_agree(dm_comm *c, int *code, char *msg, size_t n, int *stop);

/* A collective that has not completed after `seconds` (> 0; 0: no limit; the default is
 * DM_COMM_TIMEOUT) fails with an error naming the rank that does not answer; the job then
 * ends as for any failed exchange. While it waits a rank sleeps between polls, using no
 * core. Every rank sets the same value. */
#define DM_COMM_TIMEOUT 600.0
void dm_comm_set_timeout(dm_comm *c, double seconds);

/* This rank's traffic since the comm started: bytes sent, seconds inside collectives,
 * collectives called. */
typedef struct {
    double bytes, sec;
    long calls;
} dm_comm_stats;
dm_comm_stats dm_comm_get_stats(const dm_comm *c);

#endif
