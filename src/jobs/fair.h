/* fair.h — the threads of a job on a machine that another dormouse keeps busy: with
 * threads=0 (all cores), a second process would take every core too, and both would
 * crawl (a sample beside a training run ran 11x slower). */
#ifndef DM_FAIR_H
#define DM_FAIR_H

#include <stddef.h>

#include "base/comm.h"
#include "dormouse.h"
#include "jobs/job.h"

/* The other dormouse processes of this machine that are busy now (running, or using CPU
 * over a fifth of a second: on a crowded machine a training process gets little of a
 * core, but it is there and wants it), leaving out this process's ancestors (an A/B
 * sweep waiting for its cell) and the ranks of an MPI launch: their number, and a text
 * naming them into buf ("pid 4242 at 1.9 cores"). */
int dm_busy_dormice(char *buf, size_t n);

/* dm_step_threads, and with threads=0 outside an MPI launch, when other dormouse
 * processes are busy here: the cores shared fairly, cores / (busy + 1) (at least 1), said
 * in a note (on stdout; on stderr with to_stderr: sample's stdout is its text)
 * ("threads=1 of 2 cores: another dormouse is busy here (...);
 * threads=N chooses"). Returns the threads for the job's model (dm_model_create_threads
 * sets them); *shared (when not NULL) is 1 when a share was taken. */
int dm_fair_threads(const dm_config *c, const dm_comm *comm, const dm_job_io *io,
                    int to_stderr, int *shared);

#endif
