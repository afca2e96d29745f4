/* train_report.h — what a training run tells (train_report.c): the notes of its set-up,
 * metrics.jsonl and the step events with the evaluations on their cadence, the summary. */
#ifndef DM_TRAIN_REPORT_H
#define DM_TRAIN_REPORT_H

#include "jobs/train_ctx.h"

/* The notes of the set-up, the atlas, the clocks (every rank, after the state is shared). */
void train_report_start(train_ctx *t);
/* metrics.jsonl opened for appending (rank 0). */
int train_metrics_open(train_ctx *t);
/* Before a checkpoint (rank 0): every metrics line written, else the run stops `when`. */
int train_metrics_flush(train_ctx *t, const char *when);
/* After `done` steps: the validation BPB on its cadence, the metrics line, the step event. */
int train_log_eval(train_ctx *t, long done);
/* The counters, the atlas and, for a run that reached its steps, the summary. */
void train_finish(train_ctx *t);
/* metrics.jsonl closed (the status set when its last lines are lost), the atlas freed. */
void train_report_close(train_ctx *t);

#endif
