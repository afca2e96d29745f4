/* eval.h — bits per byte on a window of bytes, and the eval job (`dormouse eval`,
 * docs/architecture.md section 6). */
#ifndef DM_EVAL_H
#define DM_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/comm.h"
#include "io/data.h"
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

/* The validation BPB of a split corpus (io/data.h) as eval_windows asks (docs/data.md):
 *   1    the fixed window: the last w bytes of the validation set (dm_eval_bpb of them)
 *   N    N windows of w bytes at the offsets of dm_corpus_eval_offsets with the fixed
 *        DM_EVAL_WINDOW_SEED: the same windows in every run and every eval of the data
 *   0    all of it ("all"): consecutive windows of w bytes, each starting at the last
 *        byte of the one before (the last one shorter), so every byte but the first is
 *        predicted once
 * several windows combined by their predictions: the summed nats over the summed
 * predictions, in bits. *scored: the bytes scored. NAN as dm_eval_bpb, and when a stop
 * is asked for (io->stop, on any rank: every rank then stops at the same window and
 * carries it in io->stop) between windows (*scored: the bytes scored before it). A long
 * evaluation of several windows sends its progress to io as DM_EV_PROGRESS lines (rank
 * 0's are printed). io may be NULL. */
double dm_eval_val(dm_model *m, const dm_corpus *c, long w, long windows, int B, int T,
                   dm_comm *comm, const dm_job_io *io, size_t *scored);
/* dm_eval_val with fp32 matrix products whatever m's precision (a model whose products
 * run bf16 is scored through an fp32 copy of its parameters): training's evaluations, so
 * that a run's validation BPB is the number `dormouse eval` gives on any machine
 * (docs/bf16.md). */
double dm_eval_val_fp32(dm_model *m, const dm_corpus *c, long w, long windows, int B, int T,
                        dm_comm *comm, const dm_job_io *io, size_t *scored);
/* 0 when the validation set holds `windows` windows of w bytes (see dm_eval_val), else a
 * one-line err. */
int dm_eval_check(const dm_corpus *c, long w, long windows, char *err, size_t errlen);
/* What dm_eval_val scored, for a note: "the last 81920 bytes", "all 1048576 bytes
 * (eval_windows=all)", "8 fixed windows of 81920 bytes (eval_windows=8)". */
void dm_eval_what(const dm_config *cfg, size_t scored, char *buf, size_t n);

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
    int verify_data;           /* a prepared data directory: check its .bin files' CRC-32s */
} dm_eval_args;

/* The BPB of the checkpoint on the validation set of a corpus (as eval_windows asks, by
 * default its last eval_window bytes; of --val, all of it): --val or --data;
 * else the run's own (the checkpoint's run directory: its val_path when it trained with
 * --val, else its data_path), so `dormouse eval RUN` repeats the run's validation; else
 * (a model file outside a run) the bundled corpus. Reported as the note "val_bpb X on the
 * last N bytes of DATA (WHERE FROM; N bytes scored; checkpoint step S)" (eval_windows:
 * what dm_eval_what says; a data directory: DATA/val.bin). Bad input: checkpoint, overrides,
 * both --data and --val, a corpus that is gone or shorter than eval_window (a window it
 * cannot fill; `--set eval_window=N` scores less); failed: a NaN. */
dm_status dm_eval(const dm_eval_args *a, const dm_job_io *io);

#endif
