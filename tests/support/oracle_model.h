/* oracle_model.h — the whole network's forward in double, composed from the oracle
 * kernels (oracle.h), reading parameters by NAME from the model's parameter table:
 * an independent check of network.c / mixer.c and of the table itself. */
#ifndef DM_ORACLE_MODEL_H
#define DM_ORACLE_MODEL_H

#include <stdint.h>

#include "dormouse.h"

/* Mean cross-entropy of tokens [B, T+1] under params (double, the layout of m's table).
 * logits [B,T,256] written when non-NULL. */
double o_model_loss(const dm_model *m, const double *params, const uint8_t *tokens, int B,
                    int T, double *logits);

#endif
