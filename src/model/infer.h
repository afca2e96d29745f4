/* infer.h — recurrent (token-by-token) inference with O(1) state per token. */
#ifndef DM_INFER_H
#define DM_INFER_H

#include <stdint.h>

#include "dormouse.h"

typedef struct dm_infer dm_infer;

/* State for one sequence over m (m must outlive it). NULL when out of memory. */
dm_infer *dm_infer_create(const dm_model *m);
void dm_infer_free(dm_infer *s);
/* Back to the empty sequence (zero conv cache and delta-rule state). */
void dm_infer_reset(dm_infer *s);
/* Feed one token (a byte for the byte vocabulary; id < vocab); logits[vocab] of the next. */
void dm_infer_step(dm_infer *s, uint32_t id, float *logits);

#endif
