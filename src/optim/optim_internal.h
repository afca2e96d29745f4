/* optim_internal.h — the optimizer's state, shared by optim.c (groups, AdamW, schedule)
 * and optim/muon.c (Muon, head-wise NS, retraction). */
#ifndef DM_OPTIM_INTERNAL_H
#define DM_OPTIM_INTERNAL_H

#include "base/comm.h"
#include "model/model.h"
#include "ops/atlas.h"
#include "ops/optim_ops.h"
#include "optim/optim.h"

/* The op layer the optimizer's computations run on: the model's (counted, timed and
 * verified with the model's ops). */
static inline dm_ops *dm_optim_ops(dm_model *m) { return &m->ops; }

/* A unit of Muon's work: one matrix Newton-Schulz orthogonalizes (a head slice of W_q /
 * W_k, or a whole matrix), updated and retracted by the rank that owns it (muon.c). */
typedef struct {
    int tensor;       /* model tensor */
    int slice;        /* head slice of a head-wise tensor; -1: the whole matrix */
    int rows, cols;   /* the matrix NS sees */
    size_t off, len;  /* floats, in the parameter layout */
    int stacked;      /* 1: NS's stack path (single-threaded GEMMs, units in parallel);
                         0: alone, its GEMMs tiled over the threads (a big whole matrix
                         with no other unit of its shape) */
    double cost;      /* NS FLOPs */
    int owner;        /* rank */
    size_t uoff;      /* a stacked unit this rank owns: where its update lies in upd */
} dm_muon_unit;

struct dm_optim {
    dm_config cfg;
    int n_tensors;
    dm_group *groups;
    size_t n;          /* parameters */
    float *m1, *m2;    /* AdamW moments, parameter layout (unused entries stay 0) */
    /* Muon */
    float *mom;        /* momentum, parameter layout (every rank updates all of it) */
    float *upd;        /* the updates being orthogonalized: this rank's stacked units (at
                          their uoff, each batch of one shape contiguous), then one slot for
                          its lone units, one at a time */
    size_t upd_alone;  /* where that slot starts in upd */
    size_t upd_n;      /* floats in upd */
    float *ns_work;    /* NS / Stiefel scratch */
    size_t ns_work_n;  /* floats in ns_work */
    int n_units;
    dm_muon_unit *units; /* in tensor order, slices in order */
    float *consts;     /* [n_units] a batch's Stiefel scales */
    dm_comm *comm;     /* the ranks sharing the work (NULL: one process) */
    int rank, nranks;
    size_t *pack_off;  /* [nranks+1] each rank's units in pack (floats) */
    size_t *pack_cur;  /* [nranks] cursors while packing */
    float *pack;       /* the updated units, rank by rank, for the all-gather */
    int ns_bf16;       /* 1: NS in bf16 (ns_precision; the op ns_bf16), 0: fp32 */
    int *slice_off;    /* [n_tensors] first slice of each Muon tensor in radius/scale */
    int n_slices;
    float *radius;     /* [n_slices] retraction radius ||W0||_F per slice */
    float *scale;      /* [n_slices] Stiefel scale per slice */
    dm_atlas *atlas;   /* the all-gather's timing, or NULL (the ops are timed by the op
                          layer) */
};

int dm_muon_init(dm_optim *o, dm_model *m, char *err, size_t errlen);
void dm_muon_free(dm_optim *o);
/* Assign the units to the ranks of comm (the fixed rule in muon.c). 0 ok. */
int dm_muon_shard(dm_optim *o, dm_comm *comm, char *err, size_t errlen);
/* The Muon update of every Muon tensor at lr factor f (the schedule's), then retraction
 * on its cadence: momentum on every rank, Newton-Schulz, update and retraction of this
 * rank's units, then the units all-gathered. 0 ok; 1 when the all-gather failed. */
int dm_muon_step(dm_optim *o, dm_model *m, float f, float gscale, long step);
int dm_muon_state(const dm_optim *o, dm_optim_buf *out, int max);
/* Bytes of Muon's scratch (upd, ns_work) and of its all-gather buffer (pack). */
void dm_muon_memory(const dm_optim *o, size_t *scratch, size_t *gather);
void dm_muon_shard_text(const dm_optim *o, char *buf, size_t n);

#endif
