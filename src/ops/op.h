/* op.h — how an op is described to the dispatch routine, and how a backend implements it
 * (inside the op layer and the backends' folders only; docs/architecture.md section 4).
 *
 * An op is defined once, backend-free, in its family's file of src/ops/ (matmul, delta,
 * norms, pointwise, seq; the optimizer's update and ns): its argument struct (the family's
 * header), its dm_op_def (directions, outputs a verify run compares, FLOPs, the reference
 * implementation over host memory) and its typed entry points (ops.h, optim_ops.h), which
 * fill the struct and call dm_op_run. A backend implements ops in its own folder: one
 * dm_impl_list per op in its table (dm_backend.impls), preferred first; dispatch asks them
 * in order, then the op's reference. The op list is ops/oplist.h.
 */
#ifndef DM_OP_H
#define DM_OP_H

#include "ops/backend.h"
#include "ops/ops.h"

/* The floats behind a handle (ops/buffer.h): the entry points fill the argument structs,
 * whose pointers the implementations read, with them. */
#define DM_RAW(p) _Generic((p), const dm_bf *: (const float *)(const void *)(p), \
                                dm_bf *: (float *)(void *)(p))

/* One implementation of an op. */
typedef struct {
    const char *name;  /* "chunked", "openblas", "reference", ... */
    int reference;     /* 1: the op's reference (the oracle) among those of its precision */
    int precision;     /* DM_PREC_*: bf16 implementations are asked only when the call
                          asks for bf16 or auto (dm_op_def.asked), and come first */
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
    DM_OUT_F64,     /* a double in the backend's memory (xent's mean loss, the gradient
                       norm), n = 1 */
};
typedef struct {
    const char *name; /* "delta dq" */
    void **slot;      /* &args->dq: the second run gets its own buffer here */
    size_t n;         /* elements */
    int kind;         /* DM_OUT_* */
} dm_out;
#define DM_OP_MAX_OUT 8

/* A backend's implementations of one op, preferred first; its table holds one per op
 * (indexed by DM_OP_*). DM_IMPL_LIST counts them. */
typedef struct dm_impl_list {
    const dm_impl *impl;
    int n;
} dm_impl_list;
#define DM_IMPL_LIST(array) {(array), (int)(sizeof(array) / sizeof((array)[0]))}

typedef struct {
    const char *name;           /* "matmul" */
    unsigned dirs;              /* the directions it has: bits 1 << DM_FWD, ... */
    /* the op's fp32 reference (src/ref, the oracle) over host memory: asked after the
     * backend's implementations when the backend's memory is the host's kind (NULL: the
     * op has none, as add) */
    const dm_impl *reference;
    size_t args_size;
    /* the outputs of a call (pointers that are NULL are left out); returns the count */
    int (*outputs)(void *args, int dir, dm_out *out);
    /* FLOPs of a call, for the atlas's GFLOP/s; NULL: not counted (memory-bound ops) */
    double (*flops)(const void *args, int dir);
    /* the shape checks of a call: NULL when its sizes are sane (none negative) and every
     * buffer a non-empty call needs is given, else what is wrong (static string); a call
     * that fails them is a bug of its caller, stopped before any implementation runs
     * (NULL hook: none) */
    const char *(*check)(const void *args, int dir);
    /* the bytes a call reads: each of its inputs once (f32 floats, ids of their width),
     * for the atlas's floor beside what it writes; NULL: not counted (the products, bound
     * by their FLOPs, and Newton-Schulz) */
    double (*reads)(const void *args, int dir);
    /* the precision a call asks for its products (DM_PRECISION_*: fp32 runs fp32
     * implementations only; bf16 its bf16 ones first, the bf16 reference among them; auto
     * the hardware bf16 ones where they take the call, else fp32), kept in its arguments;
     * NULL: fp32 (an op without bf16 implementations) */
    int (*asked)(const void *args);
} dm_op_def;

/* The one dispatch routine. */
void dm_op_run(dm_ops *ops, int op, int dir, void *args);

/* the ops' definitions (dm_def_matmul, ...), each in its family's file of src/ops/ */
#define DM_OP_EXTERN(NAME, name) extern const dm_op_def dm_def_##name;
DM_OP_LIST(DM_OP_EXTERN)
#undef DM_OP_EXTERN
/* The definition of op (DM_OP_*). */
const dm_op_def *dm_op_def_of(int op);

#endif
