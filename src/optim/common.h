/* common.h — what the optimizer's files share (optim.c, muon.c, gradsum.c): the parameter
 * groups, the state buffers a checkpoint stores, and the op layer their computations run
 * on. */
#ifndef DM_OPTIM_COMMON_H
#define DM_OPTIM_COMMON_H

#include <stddef.h>

#include "model/model.h"
#include "ops/optim_ops.h"

enum { DM_GROUP_ADAMW = 0, DM_GROUP_MUON = 1 };

typedef struct {
    int kind;    /* DM_GROUP_* */
    float lr;    /* peak lr of this tensor */
    float wd;    /* decoupled weight decay (times the scheduled base lr) */
    int slices;  /* Muon: matrices this tensor is orthogonalized as (n_head for head-wise) */
} dm_group;

/* The optimizer's state, as named flat float buffers (what a checkpoint stores; the
 * optimizer does not know the file format): adam_m, adam_v (the parameter layout), and
 * with Muon muon_momentum (the parameter layout), retract_radius, retract_scale (one per
 * Muon slice), and with muon_norm=neuron normuon_v (one per row of each Muon slice). data
 * is the backend's memory, inside the optimizer (valid while it lives): read and written
 * through the backend's copies. */
typedef struct {
    const char *name;
    dm_bf *data;
    size_t n;     /* floats */
    int optional; /* 1: a checkpoint without it loads, leaving it at zero (state a
                     config key turns on: a run resumed with the key newly set) */
} dm_optim_buf;
#define DM_OPTIM_MAX_BUFS 8

/* The op layer the optimizer's computations run on: the model's (counted, timed and
 * verified with the model's ops). */
static inline dm_ops *dm_optim_ops(dm_model *m) { return &m->ops; }

#endif
