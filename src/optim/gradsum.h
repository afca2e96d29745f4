/* gradsum.h — the gradient of a training step over micro-batches and ranks (grad_accum,
 * data parallelism; docs/scaling.md).
 *
 * A step has A = grad_accum micro-batches of batch_size sequences each. Micro-batch m
 * (0 <= m < A) runs on rank m % N as that rank's local micro-batch j = m / N (N ranks; N
 * divides A), and its backward leaves g_m = d(its mean loss)/d(params) in the model's
 * gradient buffer (zeroed before it). The step's gradient is their mean, summed in ONE
 * order whatever N is:
 *     acc = g_0;  acc = acc + g_1;  ...;  acc = acc + g_{A-1};  grad = acc * (1/A)
 * every element by the same additions in the same order, so one process with grad_accum A
 * and N ranks give the same bits.
 *   One process: acc is a buffer in the parameter layout; each micro-batch is added as it
 *   finishes.
 *   N ranks: the flat buffer is cut into N shards (contiguous, 64-byte aligned). After
 *   local micro-batch j every rank sends shard s of its gradient to rank s; rank s adds the
 *   N pieces it receives — micro-batches jN, jN+1, ..., jN+N-1, the next ones of the order —
 *   to its shard of acc; at the end each scales its shard and the shards are all-gathered
 *   into every rank's gradient buffer. Per step each rank sends (A/N)(N-1)/N of the
 *   gradient and then (N-1)/N of it again (about 2P floats for A = N, like a ring
 *   all-reduce), and holds N shard-sized receive slots plus its shard of acc.
 * With A = 1 and one process nothing is added or copied: the backward's gradient is the
 * step's. */
#ifndef DM_GRADSUM_H
#define DM_GRADSUM_H

#include <stddef.h>

#include "base/comm.h"
#include "dormouse.h"

typedef struct dm_gradsum dm_gradsum;

/* For the model's gradient buffer, grad_accum micro-batches, over comm (NULL: one
 * process). NULL with err when the size of comm does not divide grad_accum or memory
 * runs out. */
dm_gradsum *dm_gradsum_create(dm_model *m, int grad_accum, dm_comm *comm, char *err,
                              size_t errlen);
void dm_gradsum_free(dm_gradsum *g);

/* Bytes g allocates for the sum: its shard of acc and the receive slots (0 for one process
 * with grad_accum 1; g may be NULL: 0). */
size_t dm_gradsum_bytes(const dm_gradsum *g);

/* The shard [off[r], off[r+1]) of rank r of a flat buffer of n floats cut for N ranks:
 * contiguous, starts 16-float aligned. off has N+1 entries. */
void dm_shard_offsets(size_t n, int N, size_t *off);

/* After local micro-batch j's backward (j = 0, 1, ... A/N - 1, in order): add it. 0 ok; 1
 * when the exchange failed (dm_comm_error). */
int dm_gradsum_add(dm_gradsum *g, int j);
/* After the last local micro-batch: the model's gradient buffer holds the step's gradient
 * on every rank. 0 ok; 1 when the exchange failed. */
int dm_gradsum_finish(dm_gradsum *g);

#endif
