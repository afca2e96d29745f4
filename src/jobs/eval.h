/* eval.h — bits per byte on a window of bytes, and the eval job (`dormouse eval`,
 * docs/architecture.md section 6). */
#ifndef DM_EVAL_H
#define DM_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/comm.h"
#include "dormouse.h"
#include "jobs/job.h"

/* Mean cross-entropy, in bits, over every predicted byte of bytes[0, n): the window is
 * cut into consecutive sequences of T+1 bytes starting at 0, T, 2T, ... (each predicts T
 * bytes; the last one the remainder), B sequences per forward; n-1 predictions in all.
 * The forwards are shared among the ranks of comm (forward i on rank i % N; NULL: one
 * process) and their losses summed in forward order on every rank: identical on any
 * thread count and any N. Returns NAN if a forward fails or gives NaN, or an exchange
 * fails (dm_comm_error). */
double dm_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, int B, int T, dm_comm *comm);

typedef struct {
    const char *ckpt;          /* a run directory, a checkpoint directory or a model file */
    const char *data;          /* corpus whose last eval_window bytes are scored; NULL: see
                                  dm_eval */
    const char *val;           /* the same (a validation file or directory; not with data) */
    const char *const *sets;   /* "key=value" overrides of the checkpoint's config: model keys
                                  (unchanged) and DM_EVAL_KEYS (jobs/load.h) only */
    int n_sets;
    dm_comm *comm;             /* under mpirun the ranks share the forwards (NULL: one
                                  process); each reads the checkpoint and the corpus */
} dm_eval_args;

/* The BPB of the checkpoint on the last eval_window bytes of a corpus: --val or --data;
 * else the run's own (the checkpoint's run directory: its val_path when it trained with
 * --val, else its data_path), so `dormouse eval RUN` repeats the run's validation; else
 * (a model file outside a run) the bundled corpus. Reported as the note "val_bpb X on the
 * last N bytes of DATA (WHERE FROM; checkpoint step S)". Bad input: checkpoint, overrides,
 * both --data and --val, a corpus that is gone or shorter than eval_window (a window it
 * cannot fill; `--set eval_window=N` scores less); failed: a NaN. */
dm_status dm_eval(const dm_eval_args *a, const dm_job_io *io);

#endif
