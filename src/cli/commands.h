/* commands.h — the commands of `dormouse` (cmd_*.c), called by main.c alone. Each scans
 * its arguments, runs its job and returns the exit code (cli/cli.h: dm_cli_exit). */
#ifndef DM_COMMANDS_H
#define DM_COMMANDS_H

#include "base/comm.h"
#include "jobs/job.h"

/* train, eval and bench run on every rank under mpirun (comm); the others in one process */
int dm_cmd_train(int argc, char **argv, const dm_job_io *io, dm_comm *comm);
int dm_cmd_eval(int argc, char **argv, const dm_job_io *io, dm_comm *comm);
int dm_cmd_sample(int argc, char **argv, const dm_job_io *io);
int dm_cmd_ab(int argc, char **argv, const dm_job_io *io);
int dm_cmd_bench(int argc, char **argv, const dm_job_io *io, dm_comm *comm);
int dm_cmd_plot(int argc, char **argv, const dm_job_io *io);
int dm_cmd_metrics(int argc, char **argv, const dm_job_io *io);
int dm_cmd_plan(int argc, char **argv, const dm_job_io *io);
int dm_cmd_prepare(int argc, char **argv, const dm_job_io *io);
/* `dormouse --version`: version, commit, the backends and libraries built in, the CPU. */
int dm_cmd_version(void);

#endif
