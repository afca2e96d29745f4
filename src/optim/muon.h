/* muon.h — Muon's state and step (muon.c): the units a step orthogonalizes, their owners
 * among the ranks, the momentum and the retraction constants. optim.c makes it for the
 * Muon groups and calls it; it knows nothing of the optimizer around it. */
#ifndef DM_OPTIM_MUON_H
#define DM_OPTIM_MUON_H

#include "base/comm.h"
#include "model/host.h"
#include "model/model.h"
#include "ops/atlas.h"
#include "ops/backend.h"
#include "ops/optim_ops.h"
#include "optim/common.h"

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
    size_t voff;      /* where its rows' second moments lie in nv (muon_norm=neuron) */
} dm_muon_unit;

typedef struct dm_muon dm_muon;
struct dm_muon {
    const dm_config *cfg; /* the optimizer's */
    dm_backend *be;    /* the model's: the state and scratch below are its memory */
    int n_tensors;
    const dm_group *groups; /* the optimizer's, [n_tensors] */
    size_t n;          /* parameters */
    dm_bf *mom;        /* momentum, parameter layout (every rank updates all of it) */
    dm_bf *upd;        /* the updates being orthogonalized: this rank's stacked units (at
                          their uoff, each batch of one shape contiguous), then one slot for
                          its lone units, one at a time */
    size_t upd_alone;  /* where that slot starts in upd */
    size_t upd_n;      /* floats in upd */
    dm_bf *ns_work;    /* NS / Stiefel scratch */
    size_t ns_work_n;  /* floats in ns_work */
    int n_units;
    dm_muon_unit *units; /* in tensor order, slices in order */
    dm_bf *consts;     /* [n_units] a batch's Stiefel scales (backend memory) */
    dm_comm *comm;     /* the ranks sharing the work (NULL: one process) */
    int rank, nranks;
    size_t *pack_off;  /* [nranks+1] each rank's units in pack (floats) */
    size_t *pack_cur;  /* [nranks] cursors while packing */
    dm_bf *pack;       /* the updated units, rank by rank, for the all-gather */
    int ns_bf16;       /* 1: NS in bf16 (ns_precision; the op ns_bf16), 0: fp32 */
    int *slice_off;    /* [n_tensors] first slice of each Muon tensor in radius/scale */
    int n_slices;
    dm_bf *radius;     /* [n_slices] retraction radius ||W0||_F per slice (backend memory) */
    dm_bf *scale;      /* [n_slices] Stiefel scale per slice (backend memory) */
    dm_bf *nv;         /* muon_norm=neuron: NorMuon's second moments, one per row of every
                          unit, in unit order (backend memory; the owner updates a unit's
                          and the all-gather carries them to every rank); else NULL */
    size_t nv_n;       /* floats in nv */
    dm_atlas *atlas;   /* the all-gather's timing, or NULL (the ops are timed by the op
                          layer) */
    dm_bf *hyper;      /* [DM_MUON_HYPER n_units] each unit's decay and step this step
                          (backend memory; dm_muon_prepare puts them) */
    float *hyper_h;    /* the same on the host */
};

/* NorMuon's epsilon in 1 / (sqrt(v) + eps): far below any row's root moment (an
 * orthogonalized update's entries are ~ 1/sqrt(max(rows, cols))) */
#define DM_NORMUON_EPS 1e-8f

/* Muon's state for the Muon groups of `groups` (cfg and groups stay the caller's and must
 * outlive it); NULL with err when out of memory or bf16 Newton-Schulz cannot run. */
dm_muon *dm_muon_create(const dm_config *cfg, const dm_group *groups, dm_model *m, char *err,
                        size_t errlen);
void dm_muon_free(dm_muon *o);
/* Assign the units to the ranks of comm (the fixed rule in muon.c). 0 ok. */
int dm_muon_shard(dm_muon *o, dm_comm *comm, char *err, size_t errlen);
/* Each unit's decay and step at lr factor f (the schedule's) into the backend's memory
 * (queued), for the step's updates to read. */
void dm_muon_prepare(dm_muon *o, float f);
/* The Muon update of every Muon tensor with the values dm_muon_prepare put, then
 * retraction on its cadence: momentum on every rank, Newton-Schulz, update and retraction
 * of this rank's units, then the units all-gathered; the gradient scaled by *gscale (the
 * clipping factor, one float of the backend's memory). 0 ok; 1 when the all-gather
 * failed. */
int dm_muon_step(dm_muon *o, dm_model *m, const dm_bf *gscale, long step);
int dm_muon_state(const dm_muon *o, dm_optim_buf *out, int max);
/* Bytes of Muon's scratch (upd, ns_work) and of its all-gather buffer (pack). */
void dm_muon_memory(const dm_muon *o, size_t *scratch, size_t *gather);
void dm_muon_shard_text(const dm_muon *o, char *buf, size_t n);

#endif
