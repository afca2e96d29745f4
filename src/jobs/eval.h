/* eval.h — bits per byte on a window of bytes (DESIGN.md section 6). */
#ifndef DM_EVAL_H
#define DM_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"

/* Mean cross-entropy, in bits, over every predicted byte of bytes[0, n): the window is
 * cut into consecutive sequences of T+1 bytes starting at 0, T, 2T, ... (each predicts T
 * bytes; the last one the remainder), B sequences per forward; n-1 predictions in all.
 * Identical on any thread count. Returns NAN if a forward fails or gives NaN. */
double dm_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, int B, int T);

#endif
