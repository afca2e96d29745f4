/* model.h — internals of dm_model shared by model.c (parameters, arena), mixer.c (the
 * KDA/GDN layer), network.c (the whole network forward/backward) and infer.c; the
 * activations and their layout are the plan's (model/plan.h). Every op they run goes
 * through the op layer (ops/ops.h). */
#ifndef DM_MODEL_H
#define DM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"
#include "model/plan.h"
#include "model/host.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "ops/policy.h"
#include "ops/precision.h"

#define DM_NORM_EPS 1e-6f /* RMSNorm and the per-head output norm */
#define DM_L2_EPS 1e-6f   /* per-head L2 norm of q and k */
#define DM_NO_TENSOR ((size_t)-1)

/* Offsets (in floats) of one layer's tensors in the flat parameter buffer.
 * KDA uses w_f1, w_f2, w_g1, w_g2, b_g2; GDN uses w_a, w_z; the others both. */
typedef struct {
    size_t norm1, w_q, w_k, w_v, conv_q, conv_k, conv_v;
    size_t w_f1, w_f2, w_a, a_log, dt_bias, w_b;
    size_t w_g1, w_g2, b_g2, w_z, o_norm, w_o;
    size_t norm2, w_gate, w_up, w_down;
} dm_layer_off;

struct dm_model {
    dm_config cfg;
    int n_tensors;
    dm_tensor *tensors;
    size_t n_params;
    dm_backend *be;            /* where params, grads, the arena and the optimizer's state
                                  live (ops/backend.h); host code copies through it */
    double *loss_mem;          /* the last forward's mean loss, in the backend's memory */
    dm_bf *params, *grads;     /* the backend's memory; the bf16 copy of the weights the
                                  bf16 products read is the op layer's (made at each forward,
                                  once per step, when the precision record says bf16) */
    size_t embed, norm_f, lm_head; /* offsets; lm_head == embed when tied */
    dm_layer_off *L;

    /* the activation plan (checkpointing) and the arena laid out from it for lay_B x lay_T
     * (model.c: dm_model_reserve; plan.c: the layout) */
    dm_plan plan;
    int nthreads;
    int lay_B, lay_T;
    long layout_gen;         /* counts the layouts (dm_model_layout_gen) */
    size_t arena_floats, io_cap;
    dm_bf *arena;
    dm_arena_sizes sizes;      /* the regions of the current layout */
    uint8_t *inp, *tgt;        /* [N] input and target ids, dm_id_width(vocab) bytes each
                                  (the backend's memory) */
    dm_layer_act *act;         /* [n_layer] */
    dm_bf *x_final;            /* [N,D] */
    dm_head_act head;
    dm_scratch s;
    int ws_holds[DM_UNIT_KINDS]; /* per unit kind, the unit whose activations its part of
                                    the workspace holds; -1: none */
    /* verify mode's room for the second implementations (the reference delta core's work,
     * the composed norms' scratch): made when verify turns on, kept; s.norm_scratch and
     * s.delta_work point into it while verify is on */
    dm_bf *vroom;
    size_t vroom_floats;
    dm_bf *arena_norm_scratch, *arena_delta_work; /* the arena's own, while verify is off */
    size_t arena_delta_work_n;

    dm_ops ops;                /* the op layer: settings, counters, verify, atlas */
    dm_policy policy;          /* the execution policy (ops/policy.h), decided once at
                                  creation by the backend: every reader of "are the bf16
                                  products active", the threads, the engines reads it */

    uint8_t *tok_model;        /* the tokenizer (dm_model_set_tokenizer; NULL: none) */
    size_t tok_model_n;
    char tok_checksum[32];

    /* last forward */
    int B, T;
    int have_forward;
};

/* The execution policy of m (ops/policy.h) and its precision record (ops/precision.h),
 * decided at its creation. */
static inline const dm_policy *dm_model_policy(const dm_model *m) { return &m->policy; }
static inline const dm_precision *dm_model_precision(const dm_model *m) {
    return &m->policy.prec;
}

/* mixer.c: the mixer unit of layer l, x_mid = x_in + Mixer(RMSNorm(x_in)): one step of
 * its forward (DM_S_NORM1 .. DM_S_MIX_OUT, plan.h), and its backward from dres[N,D] (the
 * gradient of x_mid, to which it adds that of x_in), accumulating its parameter gradients. */
void dm_mixer_step(dm_model *m, int l, int step);
void dm_mixer_bwd(dm_model *m, int l);

/* network.c: the forward of the batch in m->inp / m->tgt (m->B x m->T), every unit's steps
 * in order; the backward, each unit's recomputed steps (plan) before its own backward. */
void dm_network_fwd(dm_model *m); /* the mean loss into m->loss_mem */
void dm_network_bwd(dm_model *m);
/* The logits [N,V] of the last forward to the host (the fused head: made again, R rows
 * at a time). */
void dm_network_logits(dm_model *m, float *logits);
/* Run again the steps of unit u the plan does not keep, unless the workspace holds u's. */
void dm_network_recompute(dm_model *m, int u);
/* The workspace holds no unit's activations (a new layout; tests that overwrite it). */
void dm_network_forget_ws(dm_model *m);

#endif
