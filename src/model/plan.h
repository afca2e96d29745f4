/* plan.h — the activation plan (docs/architecture.md sections 2 and 8): what a forward
 * keeps for the backward, where every activation lives in the arena, and what the backward
 * recomputes.
 * ONE table (plan.c) names every step of a unit's forward and the tensors each step
 * writes; the `checkpointing` key picks which steps' outputs are kept (dm_plan_make), and
 * from that one choice come both the arena layout (dm_plan_layout) and the recompute
 * schedule (dm_plan.rerun). Nothing else decides either.
 *
 * Units: the network is a chain of residual branches and a head,
 *   mixer l:  x_mid = x_in + Mixer(RMSNorm(x_in))     (unit 2l)
 *   mlp l:    x_out = x_mid + MLP(RMSNorm(x_mid))     (unit 2l+1; x_out = next x_in)
 *   head:     logits = lm_head(RMSNorm(x_final))      (unit 2 n_layer)
 * A unit's input (x_in, x_mid, x_final: the residual stream) is always kept. A tensor
 * that is not kept lives in the workspace, one region shared by all units (every unit's
 * forward writes there; a unit's backward first recomputes it, unless the workspace
 * still holds that unit's: the head, run last, never needs to, nor the last MLP when its
 * part of the workspace and the head's do not overlap).
 *
 * Modes (the key `checkpointing`):
 *   none      keep every step's outputs
 *   balanced  keep the outputs of the compute-bound steps (DM_SC_COMPUTE: the wide
 *             products that read a unit's normed input, the delta-rule core with its
 *             saved chunk state) of the mixers and MLPs; recompute the memory-bound ones
 *             (norms, conv, SiLU, L2 norm, gates, sigmoid, SwiGLU, the bf16 copies) and
 *             KDA's low-rank gate paths (DM_SC_LOWRANK). The head keeps nothing apart:
 *             its outputs (the logits) stay in the workspace from its forward, the last,
 *             to its backward, the first, and are never recomputed
 *   full      keep only the units' inputs; recompute each unit's forward before its
 *             backward */
#ifndef DM_PLAN_H
#define DM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"
#include "ops/buffer.h"

struct dm_ops;

enum { DM_UNIT_MIXER, DM_UNIT_MLP, DM_UNIT_HEAD, DM_UNIT_KINDS };

/* The steps of each kind of unit, in forward order (a kind's steps are contiguous). */
enum {
    /* mixer */
    DM_S_NORM1, DM_S_QKV, DM_S_CONV, DM_S_ACT, DM_S_F1, DM_S_F, DM_S_GATE, DM_S_BPROJ,
    DM_S_BETA, DM_S_CORE, DM_S_Z1, DM_S_Z, DM_S_ONORM, DM_S_MIX_OUT,
    /* mlp */
    DM_S_NORM2, DM_S_UP, DM_S_SWIGLU, DM_S_MLP_OUT,
    /* head */
    DM_S_NORMF, DM_S_LOGITS,
    DM_NSTEPS
};

/* What a step costs to run again, per float it writes. */
enum {
    DM_SC_COMPUTE, /* a wide product of a unit's normed input, the delta core: kept by
                      balanced (except the head's, which its workspace keeps anyway) */
    DM_SC_LOWRANK, /* KDA's low-rank gate paths: the rank-r hiddens (W_f1 x, W_g1 x: r
                      floats a row from 2 D r flops) and their expansions (W_f2 f1, W_g2
                      z1: 2r flops per float); together 4 r (D + HD) flops a row, 20% of
                      a d2 mixer's products, for 2 r + 2 HD floats a row kept otherwise */
    DM_SC_MEMORY,  /* elementwise, norms, conv, gates */
    DM_SC_OUT,     /* writes the next unit's input (the residual stream): never rerun */
};

typedef struct {
    const char *name;
    int unit; /* DM_UNIT_* */
    int cls;  /* DM_SC_*, for KDA (GDN's f and z are products of the normed input) */
} dm_step_def;
extern const dm_step_def dm_step_defs[DM_NSTEPS];
/* the steps of unit kind k are [dm_unit_first[k], dm_unit_first[k + 1]) */
extern const int dm_unit_first[DM_UNIT_KINDS + 1];

typedef struct {
    int mode;                         /* DM_CKPT_* */
    int cls[DM_NSTEPS];               /* each step's class for this config */
    unsigned char keep[DM_NSTEPS];    /* its outputs are kept from the forward to the backward */
    unsigned char rerun[DM_NSTEPS];   /* it runs again before its unit's backward */
    int side;                         /* bytes per float of the backend's side room
                                         beside the tensors products read (ops.h:
                                         dm_ops_side_bytes; 0: none) */
} dm_plan;

/* The delta core's dimensions for a batch of B sequences of T tokens of model c: value dim
 * = key dim = head_dim, the GDN flag from the mixer, the query scale 1/sqrt(head_dim). */
dm_delta_dims dm_core_dims(const dm_config *c, int B, int T);

/* The plan of c (its checkpointing key and mixer) with side room of `side` bytes per float
 * beside the tensors products read (the op layer's dm_ops_side_bytes). */
void dm_plan_make(dm_plan *p, const dm_config *c, int side);
/* Units of a model with L layers: 2L + 1. Unit u's kind: */
static inline int dm_unit_kind(int u, int n_layer) {
    return u == 2 * n_layer ? DM_UNIT_HEAD : u % 2 ? DM_UNIT_MLP : DM_UNIT_MIXER;
}
/* 1 when some step of unit kind k is rerun under p */
int dm_plan_recomputes(const dm_plan *p, int kind);
/* A step's outputs: their names, comma-separated ("xn1,rstd1"), for messages and tests. */
const char *dm_step_outputs(int step, char *buf, size_t n);
/* Tensor i of the table: its name (NULL past the end), the step that writes it, its
 * pointer's offset in dm_layer_act (mixer, mlp) or dm_head_act (head), whether it is the
 * side room of the tensor before it. Any out-pointer may be NULL. */
const char *dm_plan_tensor(int i, int *step, size_t *field, int *side);

/* Saved activations of one layer (pointers into the arena). N = B*T rows; D = d_model;
 * HD = n_head*head_dim; F = MLP hidden; R = gate_rank; Cg = head_dim (KDA) or 1 (GDN). */
typedef struct {
    dm_bf *x_in;            /* [N,D]  residual entering the mixer (kept)     */
    dm_bf *xn1, *rstd1;     /* [N,D], [N]  RMSNorm before the mixer         */
    dm_bf *qt, *kt, *vt;    /* [N,HD] projections (conv inputs)             */
    dm_bf *qc, *kc, *vc;    /* [N,HD] conv outputs (before SiLU)            */
    dm_bf *qh, *kh, *v;     /* [N,HD] L2-normalized q, k; silu(vc)          */
    dm_bf *rq, *rk;         /* [N*H]  inverse norms of q, k                 */
    dm_bf *f1;              /* [N,R]  KDA gate low-rank hidden              */
    dm_bf *f;               /* [N,H*Cg] gate pre-activation                 */
    dm_bf *g;               /* [N,H*Cg] log decay                           */
    dm_bf *bpre, *beta;     /* [N,H]  W_b x, sigmoid of it                  */
    dm_bf *o;               /* [N,HD] delta-rule core output                */
    dm_bf *saved;           /* chunked core's forward state for its backward (or NULL) */
    dm_bf *z1;              /* [N,R]  KDA output-gate low-rank hidden        */
    dm_bf *z;               /* [N,HD] output gate pre-activation            */
    dm_bf *rstd_o;          /* [N*H]                                        */
    dm_bf *op;              /* [N,HD] gated-normed output (W_o input)       */
    dm_bf *x_mid;           /* [N,D]  residual entering the MLP (kept)       */
    dm_bf *xn2, *rstd2;     /* [N,D], [N]                                   */
    dm_bf *a, *b, *h;       /* [N,F]  gate, up, silu(gate)*up               */
    /* the side room (ops.h) of the tensors several products read (NULL: none) */
    dm_bf *xn1_side, *f1_side, *z1_side, *op_side, *xn2_side, *h_side;
} dm_layer_act;

/* The head's activations. */
typedef struct {
    dm_bf *xnf, *rstdf;     /* [N,D], [N] final RMSNorm */
    dm_bf *logits;          /* [N,V]; the backward turns them into their gradient. Token
                               vocabularies (above 256): [R,V], the fused head's chunk
                               (dm_plan_head_rows), the only logits held */
    dm_bf *xnf_side;        /* xnf's side room, or NULL */
} dm_head_act;

/* Backward scratch, shared by all layers. The MLP's gradients (da, db, dh) and the
 * mixer's (dq ... dr, delta_work) are never live at once and share their memory. */
typedef struct {
    dm_bf *dres;                /* [N,D] gradient of the residual stream */
    dm_bf *dxn;                 /* [N,D] */
    dm_bf *dq, *dk, *dv, *dg;   /* [N,HD] (dg: [N,H*Cg]) */
    dm_bf *dbeta;               /* [N,H] */
    dm_bf *do_, *dz, *dop;      /* [N,HD] */
    dm_bf *dr;                  /* [N,R] (KDA) */
    dm_bf *da, *db, *dh;        /* [N,F] */
    dm_bf *delta_work;          /* the op layer's scratch (dm_ops_set_scratch): the delta
                                   core's, of the path the settings pick */
    size_t delta_work_n;        /* its floats */
    dm_bf *norm_scratch;        /* [2*N*max(D,HD)] the composed norms' intermediates, when
                                   norm_impl=reference (else NULL: the fused norms need none) */
    /* the side room (ops.h) of the output gradients the backward's products read (NULL:
     * none): the logits' gradient's, then dres's in the same room; da's and db's (in the
     * MLP's part); and the mixer's gradient of the moment (in dz: dz, df, then each conv's
     * dx; in its part) */
    dm_bf *side_res;            /* [N,max(V,D)] */
    dm_bf *side_da, *side_db;   /* [N,F] */
    dm_bf *side_mix;            /* [N,HD] (df: [N,H*Cg], at most as large) */
} dm_scratch;

/* Where the arena's floats go (each region a multiple of 16 floats). */
typedef struct {
    size_t saved;     /* the residual stream and the kept activations */
    size_t recompute; /* the workspace: one unit's activations that are not kept */
    size_t scratch;   /* backward scratch with the delta core's work */
    size_t verify;    /* not in the arena: the second paths' scratch verify mode adds */
    size_t products;  /* not in the arena, bytes: the backend's bf16 operand scratch, at most
                         (dm_ops_product_scratch for the model's largest products) */
    size_t ws_lo[DM_UNIT_KINDS], ws_hi[DM_UNIT_KINDS]; /* each kind's part of the workspace */
} dm_arena_sizes;
/* 1 when the workspace regions of unit kinds a and b share floats */
int dm_plan_ws_overlap(const dm_arena_sizes *sz, int a, int b);

/* The arena's pointers: where dm_plan_layout puts every region. */
typedef struct {
    dm_layer_act *act;      /* [n_layer] */
    dm_bf *x_final;         /* [N,D] the residual leaving the last layer (kept) */
    dm_head_act head;
    dm_scratch s;
} dm_arena_ptrs;

/* Lay out the arena of plan p for B sequences of T tokens from base (NULL: only count;
 * out may then be NULL), the delta core's scratch as the backend of the op layer `ops`
 * sizes it for its threads (dm_ops_delta_work, dm_ops_threads). Returns the floats
 * needed, by region in sz. */
size_t dm_plan_layout(const dm_config *c, const dm_plan *p, const struct dm_ops *ops, int B,
                      int T, dm_bf *base, dm_arena_ptrs *out, dm_arena_sizes *sz);
/* Give the op layer the side room of unit u of a layout for N rows (ops.h: the rooms of
 * its activations, act[u / 2] or the head's, and of the gradients in s its backward's
 * products read; bwd: for its backward, where the head's logits turn into their
 * gradient), dropping those of the unit before: units share the workspace, so only the
 * unit that runs has rooms. */
void dm_plan_give_rooms(const dm_config *c, const dm_layer_act *act, const dm_head_act *head,
                        const dm_scratch *s, int u, int bwd, size_t N, struct dm_ops *ops);
/* The rows R of the fused head's chunk (ops/seq.h head_xent) for N rows: token
 * vocabularies (vocab above 256) hold their logits R x V at a time, R at most 256 and
 * R x V at most 2^21 floats (8 MiB), never 0 (a vocabulary above 2^21: one row); 0 for
 * the byte vocabulary, whose head writes all N x 256 logits before the cross-entropy. */
int dm_plan_head_rows(const dm_config *c, size_t N);

/* The verify room (floats): what verify mode's second implementations need beside the
 * arena (the reference delta core's work, the composed norms' scratch); the offsets of
 * the two in it. */
size_t dm_plan_verify_room(const dm_config *c, const struct dm_ops *ops, int B, int T,
                           size_t *norm_off, size_t *delta_off);

#endif
