/* train_ranks.h — the ranks of a training run under mpirun (train_ranks.c). One process:
 * every call is its own answer. */
#ifndef DM_TRAIN_RANKS_H
#define DM_TRAIN_RANKS_H

#include "jobs/train_ctx.h"

/* The status of every rank agreed (the first failing rank's) and a stop asked of any
 * (ranks.stop); one process: its own. Returns the status code. */
int train_agree(train_ctx *t);
/* A failed exchange between ranks as the status (0 when none failed). */
int train_comm_failed(train_ctx *t);
/* rank 0's value of *v on every rank */
int train_from_rank0(train_ctx *t, long *v);
/* Rank 0's config to every rank, and its corpus paths unless --data / --val name them. */
int train_share_config(train_ctx *t);
/* Every rank's corpus against rank 0's (size and CRC-32). */
int train_check_corpus(train_ctx *t);
/* Rank 0's step count, parameters and optimizer state to every rank. */
int train_share_state(train_ctx *t);

#endif
