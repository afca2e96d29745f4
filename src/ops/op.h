/* op.h — how an op is described to the dispatch routine (inside src/ops only).
 *
 * Each op file (the cpu backend's, src/backends/cpu/: matmul.c, delta.c, norms.c, pointwise.c,
 * seq.c; the optimizer's update.c and ns.c) defines the op's argument struct, its
 * implementations and one dm_op_def; its typed entry points (ops.h, optim_ops.h) fill the
 * struct and call dm_op_run, which does the choosing, counting, timing and verifying for
 * every op alike (docs/backends.md: where a second backend's implementations go).
 */
#ifndef DM_OP_H
#define DM_OP_H

#include "ops/backend.h"
#include "ops/ops.h"

/* One implementation of an op. */
typedef struct {
    const char *name;  /* "chunked", "openblas", "reference", ... */
    int reference;     /* 1: the op's reference (the oracle) among those of its precision */
    int precision;     /* DM_PREC_*: bf16 implementations are asked only when the setting
                          allows bf16, and come first */
    /* Does the setting pick it for this call? NULL when it does, else the reason naming
     * the setting (static string). NULL hook: always. */
    const char *(*selected)(const dm_ops *ops, const void *args, int dir);
    /* Can it take this call (shapes, the CPU, a library)? NULL or the reason. NULL hook:
     * any call. Verify mode asks only this when it looks for a second implementation. */
    const char *(*supports)(dm_ops *ops, const void *args, int dir);
    void (*run)(dm_ops *ops, void *args, int dir);
    int mem;           /* DM_MEM_* (ops/backend.h): the memory it takes; only those of the
                          backend's kind are asked (the CPU's, 0, when not written) */
} dm_impl;

/* An output of a call, as verify mode needs it: where the args hold its pointer. */
enum {
    DM_OUT_SET,     /* overwritten */
    DM_OUT_ACC,     /* accumulated into (+=): compared as the increment */
    DM_OUT_PRIVATE, /* an implementation's own state (the chunked core's saved buffer):
                       NULL in the second run, never compared */
    DM_OUT_F64,     /* a double (xent's mean loss), n = 1 */
};
typedef struct {
    const char *name; /* "delta dq" */
    void **slot;      /* &args->dq: the second run gets its own buffer here */
    size_t n;         /* elements */
    int kind;         /* DM_OUT_* */
} dm_out;
#define DM_OP_MAX_OUT 8

typedef struct {
    const char *name;           /* "matmul" */
    unsigned dirs;              /* the directions it has: bits 1 << DM_FWD, ... */
    const dm_impl *impl;        /* preferred first, the reference (when it has one) last */
    int n_impl;
    size_t args_size;
    /* the outputs of a call (pointers that are NULL are left out); returns the count */
    int (*outputs)(void *args, int dir, dm_out *out);
    /* FLOPs of a call, for the atlas's GFLOP/s; NULL: not counted (memory-bound ops) */
    double (*flops)(const void *args, int dir);
} dm_op_def;

/* The one dispatch routine. */
void dm_op_run(dm_ops *ops, int op, int dir, void *args);

/* the ops, indexed by DM_OP_* in dispatch.c */
extern const dm_op_def dm_def_matmul, dm_def_embed, dm_def_rmsnorm, dm_def_gatednorm,
    dm_def_conv, dm_def_silu, dm_def_l2norm, dm_def_gate, dm_def_sigmoid, dm_def_swiglu,
    dm_def_xent, dm_def_delta, dm_def_add, dm_def_grad_add, dm_def_grad_mean, dm_def_grad_norm,
    dm_def_adamw, dm_def_momentum, dm_def_ns, dm_def_ns_bf16, dm_def_muon_update,
    dm_def_retract;

#endif
