/* step.h — one training step over micro-batches and ranks, the one `train` and `bench`
 * both run (docs/scaling.md).
 *
 * The step's batch is batch_size x grad_accum sequences drawn from (seed, step) as
 * dm_corpus_batch draws them (grad_accum 1: exactly the batch of a step before
 * grad_accum existed); micro-batch m is its sequences [m B, (m+1) B). This rank runs its
 * micro-batches m = j N + rank (j = 0 .. grad_accum/N - 1; N ranks): forward, backward,
 * and the gradient sum of optim/gradsum.h; then the optimizer update on every rank. The
 * step's loss is the mean of the micro-batches' losses, summed in double in micro-batch
 * order on every rank: the same on any N. */
#ifndef DM_STEP_H
#define DM_STEP_H

#include <stdint.h>

#include "base/comm.h"
#include "dormouse.h"
#include "io/data.h"
#include "optim/gradsum.h"
#include "optim/optim.h"

typedef struct {
    dm_model *m;
    dm_optim *opt;
    dm_comm *comm;
    dm_gradsum *gs;
    int B, T, A, N, rank, local; /* local: this rank's micro-batches, A / N */
    uint8_t *batch;              /* [A * B, T + 1] the step's sequences: ids of
                                    dm_id_width(vocab) bytes */
    uint8_t *next;               /* the same for the next step, drawn while a backend that
                                    queues (a GPU) runs this one (dm_stepper_run) */
    int next_ok;                 /* next holds the batch of (next_seed, next_step) */
    uint64_t next_seed;
    long next_step;
    float *losses;               /* [A] by rank, then local index (the all-gather's order) */
    double *dloss, *hloss;       /* [local + 1] this rank's micro-batch losses and the
                                    gradient norm: in the backend's memory as the step leaves
                                    them, then read once per step into the host's, by a read
                                    begun behind the step's work (dm_backend_read_begin) */
    size_t *loss_off;            /* [N + 1] */
    /* the step as graphs (step_graph=auto, a backend that has them, one micro-batch on one
     * process, no per-op timing): its forward, its backward and its update (two: with and
     * without Muon's retraction) each run as queued work once per layout of the model
     * (lazily grown memory grows then), are captured the next time, then replayed */
    int graphs;
    char graph_why[160];         /* when graphs is 0: why not */
    struct dm_step_graph *g;     /* [DM_STEP_GRAPHS] */
    long replays;                /* graphs launched so far */
} dm_stepper;

#define DM_STEP_GRAPHS 4 /* forward, backward, update, update with retraction */

typedef struct {
    float loss;                  /* the step's */
    double gnorm;                /* before clipping; NAN when an exchange failed */
    double t_data, t_fwd, t_bwd, t_opt; /* seconds: the batch, the forwards, the backwards
                                           with the gradient sum, the optimizer */
} dm_step_out;

/* The threads a job asks its model for (its share of the machine): the config's; for
 * threads = 0 all cores, or under mpirun with several ranks on this machine and no core
 * binding, the cores divided among them. The model's backend sets them
 * (dm_model_create_threads: the policy's pool). */
int dm_step_threads(const dm_config *c, const dm_comm *comm);
/* A note when `threads` (a config's, set) is more than the cores this process may run on
 * (buf, a line with its newline), else "". Returns buf. */
const char *dm_step_oversubscribed(int threads, char *buf, size_t n);

/* For model m and optimizer o (whose work this shares over comm: dm_optim_set_comm) with
 * the batch of config c. 0 ok; else err: grad_accum not a multiple of the ranks (naming a
 * config that is), out of memory. */
int dm_stepper_init(dm_stepper *s, dm_model *m, dm_optim *o, const dm_config *c, dm_comm *comm,
                    char *err, size_t errlen);
void dm_stepper_free(dm_stepper *s);
/* "step graphs: on (...)" or "step graphs: off (why)" into buf */
void dm_stepper_graph_text(const dm_stepper *s, char *buf, size_t n);

/* One step: the batch of (seed, batch_step), the optimizer's 0-based step opt_step.
 * Returns 0, or 1 when an exchange between ranks failed (dm_comm_error); a non-finite
 * loss or norm is the caller's to judge. The step waits for its backend once, for the read
 * of its losses and norm at its end (its phase times come from marks); on a backend that
 * queues, the next step's batch (batch_step + 1) is drawn while this one runs. */
int dm_stepper_run(dm_stepper *s, const dm_corpus *corpus, uint64_t seed, long batch_step,
                   long opt_step, dm_step_out *out);
/* The same step on a batch given as [A * B, T + 1] ids (bytes for the byte vocabulary;
 * t_data 0). */
int dm_stepper_step(dm_stepper *s, const void *batch, long opt_step, dm_step_out *out);

#endif
