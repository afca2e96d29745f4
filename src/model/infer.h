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
/* Feed one byte; logits[256] of the next byte. */
void dm_infer_step(dm_infer *s, uint8_t byte, float *logits);

#endif
