/* optim_internal.h — the optimizer's state (optim.c): its groups, AdamW's moments and
 * Muon's state (muon.h). */
#ifndef DM_OPTIM_INTERNAL_H
#define DM_OPTIM_INTERNAL_H

#include "base/comm.h"
#include "model/model.h"
#include "ops/atlas.h"
#include "ops/backend.h"
#include "optim/muon.h"
#include "optim/optim.h"

struct dm_optim {
    dm_config cfg;
    dm_backend *be;    /* the model's: the state below is its memory */
    int n_tensors;
    dm_group *groups;
    size_t n;          /* parameters */
    dm_bf *m1, *m2;    /* AdamW moments, parameter layout (unused entries stay 0) */
    double *norm;      /* the last step's gradient norm and its clipping factor: the */
    dm_bf *gscale;     /* backend's memory (one double, one float), read when asked */
    dm_muon *muon;     /* Muon's state (muon.h); NULL when no tensor is Muon's */
    dm_atlas *atlas;   /* the all-gather's timing, or NULL */
    dm_bf *hyper;      /* [DM_ADAM_HYPER n_tensors] each AdamW tensor's values this step
                          (backend memory; dm_optim_prepare puts them) */
    float *hyper_h;    /* the same on the host */
};

#endif
