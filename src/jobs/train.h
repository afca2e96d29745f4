/* train.h — the training job (DESIGN.md section 6). */
#ifndef DM_TRAIN_H
#define DM_TRAIN_H

#include "ops/atlas.h" /* dm_now */
#include "dormouse.h"

typedef struct {
    const char *data; /* corpus: file or directory */
    const char *out;  /* run directory */
    int resume;       /* continue the run in `out` from its newest checkpoint */
    long until;       /* > 0: stop (with a checkpoint) once this many steps are done */
} dm_train_args;

/* Train with cfg (already validated). Returns the process exit code:
 * 0 done, 1 runtime failure (NaN loss, I/O), 2 bad input (corpus, checkpoint),
 * 130 interrupted (a checkpoint was saved first). */
int dm_train(const dm_config *cfg, const dm_train_args *a);


#endif
