/* ckpt.h — checkpoints of a run (docs/architecture.md section 6).
 *
 * A checkpoint is a directory RUN_DIR/ckpt-NNNNNNNN (NNNNNNNN = steps done, at least 8
 * digits) holding
 *   model.safetensors  the parameters, by tensor name; metadata: format, config (JSON), step
 *   optim.safetensors  optimizer state (flat buffers in the parameter layout); format, step
 * It is written as ckpt-NNNNNNNN.tmp, every file fsynced, then renamed; older ones are
 * pruned by renaming them to ckpt-NNNNNNNN.del before deleting them. So a directory
 * named ckpt-NNNNNNNN is complete or absent at every moment, even under kill -9; the
 * .tmp and .del leftovers of a killed writer are never read and are removed by the next
 * save. The two newest are kept (and, on request, the one a resume may fall back to:
 * dm_ckpt_save_keeping), and none beyond the step saved (a damaged one a resume
 * skipped); a save prunes before it writes and after, so at most three exist at any
 * moment, also when writers are killed while pruning, one after another.
 *
 * Loading checks everything (io/safetensors.h for the files): the checksums of every
 * tensor and of the metadata (both files must carry them), the format "dormouse-1",
 * the step (an integer >= 0, the same in both files and in the directory's name), the
 * config (a valid config JSON), exactly the model's tensors with the model's shapes, and
 * exactly the optimizer's buffers with their sizes (adam_v never negative). */
#ifndef DM_CKPT_H
#define DM_CKPT_H

#include <stddef.h>

#include "dormouse.h"

/* The optimizer whose state a checkpoint holds (optim/optim.h): a checkpoint only passes
 * it to the optimizer's own state readers and writers, so its layout stays there. */
typedef struct dm_optim dm_optim;

/* Save model (+ optimizer when opt != NULL) at `step` under run_dir. 0 ok. */
int dm_ckpt_save(const char *run_dir, dm_model *m, const dm_optim *opt, long step, char *err,
                 size_t errlen);
/* The same, and the checkpoint of step `keep` (when >= 0) is not pruned. */
int dm_ckpt_save_keeping(const char *run_dir, dm_model *m, const dm_optim *opt, long step,
                         long keep, char *err, size_t errlen);

/* The k-th checkpoint of a user path, newest first: a run directory's ckpt-* directories
 * (their model files), or the one model file of a checkpoint directory or a model file
 * given as such (k = 0 only). The model file's path into out. 0 ok; 1 when there is no
 * k-th (with err for k = 0: nothing is there). */
int dm_ckpt_candidate(const char *path, int k, char *out, size_t outlen, char *err,
                      size_t errlen);
/* dm_ckpt_candidate with k = 0: the newest. */
int dm_ckpt_resolve(const char *path, char *out, size_t outlen, char *err, size_t errlen);

/* A checkpoint read and checked: its model file (and optim.safetensors beside it when
 * asked for), with the config and step of its metadata. */
typedef struct dm_ckpt dm_ckpt;
struct dm_st_file;
dm_ckpt *dm_ckpt_open(const char *model_path, int with_optim, char *err, size_t errlen);
/* The same from files already read (owned by the result from then on, also on failure;
 * optim may be NULL); name stands for the model file's path in errors. */
dm_ckpt *dm_ckpt_from_files(struct dm_st_file *model, struct dm_st_file *optim,
                            const char *name, char *err, size_t errlen);
const dm_config *dm_ckpt_config(const dm_ckpt *c);
long dm_ckpt_step(const dm_ckpt *c);
/* 1 when a file of it carries no checksums (written before dormouse kept them): read
 * without that check. A file with any checksum must have them all, matching. */
int dm_ckpt_unverified(const dm_ckpt *c);
void dm_ckpt_close(dm_ckpt *c);

enum { DM_CKPT_OK = 0, DM_CKPT_DAMAGED = 1, DM_CKPT_MISMATCH = 2 };
/* Parameters into m, and the optimizer state into opt when opt != NULL (the checkpoint
 * must have been opened with its optimizer file). DM_CKPT_MISMATCH when m's model keys
 * are not the checkpoint's (the one-line refusal of dm_config_check_model in err);
 * DM_CKPT_DAMAGED when the files do not hold what they must. */
int dm_ckpt_into(const dm_ckpt *c, dm_model *m, dm_optim *opt, char *err, size_t errlen);

/* Read the config and step stored in a model file (as resolved). 0 ok. */
int dm_ckpt_read_config(const char *model_path, dm_config *cfg, long *step, char *err,
                        size_t errlen);
/* Open and load in one call: DM_CKPT_* as dm_ckpt_into (a file that cannot be read or
 * checked is DM_CKPT_DAMAGED). */
int dm_ckpt_load(const char *model_path, dm_model *m, dm_optim *opt, char *err, size_t errlen);

#endif
