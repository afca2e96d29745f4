/* plan.h — memory you can see and plan (docs/architecture.md section 8): the plan job (`dormouse
 * plan`: the memory figures of a config and a measured ms/step, without training), and the
 * memory report every job shares (train prints it at the start and writes it, with the
 * peak resident memory, into summary.json). */
#ifndef DM_JOBS_PLAN_H
#define DM_JOBS_PLAN_H

#include <stddef.h>

#include "dormouse.h"
#include "jobs/job.h"

struct dm_optim;

struct dm_optim;
struct dm_gradsum;
/* Add what the optimizer o and the step's gradient sum gs allocate (either may be NULL):
 * optimizer state and scratch, and the exchange buffers (dm_optim_memory,
 * dm_gradsum_bytes). */
void dm_memory_add_step(dm_memory *mem, const struct dm_optim *o, const struct dm_gradsum *gs);
/* The figures of model m (its arena as laid out now) with dm_memory_add_step's. 1 when m
 * has no arena yet. */
int dm_memory_report(const dm_model *m, const struct dm_optim *o, const struct dm_gradsum *gs,
                     dm_memory *mem);
/* Everything, in bytes: parameters (and their bf16 copy), gradients, optimizer state and
 * scratch, the exchange buffers, the arena (saved + recompute + scratch) and verify mode's
 * room. */
size_t dm_memory_total(const dm_memory *mem);
/* One line (no newline): "memory: parameters 7.5 MiB (+3.8 bf16), gradients 7.5,
 * optimizer 22.6 (+5.1 scratch), saved activations 288.7 (checkpointing none), recompute
 * 0.0, scratch 44.0; total 379.2 MiB for batch 8 x 512" (", gradient sum and exchange N"
 * after the optimizer when there is one). */
void dm_memory_line(const dm_memory *mem, int checkpointing, char *buf, size_t n);
/* The JSON members of the figures, without braces: "\"parameters_bytes\": N, ...,
 * \"total_bytes\": N" (for a summary's "memory" object). */
void dm_memory_json(const dm_memory *mem, char *buf, size_t n);
/* The memory this process can have: what the machine has available now (MemAvailable),
 * less when a cgroup's memory.max or the address-space ulimit is lower; what it is, in
 * words, into what ("11.20 GiB available of 15.50 GiB, ..."). Bytes; 0 when unknown. */
size_t dm_machine_memory(char *what, size_t n);
/* 0 when the memory plan of c for batches of B x T on `threads` threads (dm_memory_plan,
 * with the optimizer's state at its least: one value per parameter, two under AdamW)
 * fits dm_machine_memory; else 1 and a failed status, "out of memory before starting:
 * the memory plan needs at least ... and this machine has ...". Nothing is allocated, so
 * a giant shape is refused at once rather than growing until the kernel kills it. The
 * plan into planned when not NULL. */
int dm_memory_fits(const dm_config *c, int B, int T, int threads, dm_memory *planned,
                   dm_status *st);
/* The peak resident memory of this process so far, in bytes (getrusage); 0 if unknown. */
size_t dm_peak_rss_bytes(void);

typedef struct {
    const char *config_file;  /* JSON object of config keys over the defaults (NULL: none) */
    const char *const *sets;  /* "key=value", applied last */
    int n_sets;
    int reps;                 /* timed steps after one warm-up step; 0: the figures only */
} dm_plan_args;

/* The memory figures of the config (the defaults, the file, the sets) for its batch_size x
 * seq_len — parameters, gradients, optimizer state, saved activations (also under each
 * checkpointing mode), recompute workspace, scratch, total — then, with reps > 0, reps
 * timed training steps (forward, backward, optimizer update) on bytes from the seeded
 * generator after a warm-up: ms/step (median and spread), tokens/s, the time of the
 * config's `steps`, and the peak resident memory. Reported as notes. Bad input: config,
 * reps; failed: out of memory (the figures are reported first), a non-finite loss. */
dm_status dm_plan_job(const dm_plan_args *a, const dm_job_io *io);

#endif
