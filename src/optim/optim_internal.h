/* optim_internal.h — the optimizer's state, shared by optim.c (groups, AdamW, schedule)
 * and optim/muon.c (Muon, head-wise NS, retraction). */
#ifndef DM_OPTIM_INTERNAL_H
#define DM_OPTIM_INTERNAL_H

#include "ops/atlas.h"
#include "optim/optim.h"

struct dm_optim {
    dm_config cfg;
    int n_tensors;
    dm_group *groups;
    size_t n;          /* parameters */
    float *m1, *m2;    /* AdamW moments, parameter layout (unused entries stay 0) */
    /* Muon */
    float *mom;        /* momentum, parameter layout */
    float *upd;        /* [largest Muon tensor] the update being orthogonalized */
    float *ns_work;    /* NS / Stiefel scratch */
    struct dm_onednn *dnn; /* NS in bf16 (ns_precision): oneDNN's bf16 matmul; NULL: fp32 */
    int *slice_off;    /* [n_tensors] first slice of each Muon tensor in radius/scale */
    int n_slices;
    float *radius;     /* [n_slices] retraction radius ||W0||_F per slice */
    float *scale;      /* [n_slices] Stiefel scale per slice */
    dm_atlas *atlas;   /* op timing, or NULL */
};

int dm_muon_init(dm_optim *o, dm_model *m, char *err, size_t errlen);
void dm_muon_free(dm_optim *o);
/* Muon update of tensor i (lr already scheduled), then retraction on its cadence. */
void dm_muon_update(dm_optim *o, dm_model *m, int i, float lr, float gscale, long step);
int dm_muon_state(const dm_optim *o, dm_optim_buf *out, int max);

#endif
