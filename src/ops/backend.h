/* backend.h — a backend: where a model's memory lives and what may touch it
 * (docs/backends.md).
 *
 * A model has one backend, chosen at creation from the `backend` key (dm_backend_create):
 *   cpu     host memory; the CPU kernels (src/backends/cpu, its kernels/) run on it
 *   fenced  test-only (src/backends/fenced): the CPU kernels, but its memory is mapped PROT_NONE outside the
 *           backend's own calls (allocation, the copies, zeroing, and every op call, which
 *           the dispatch routine runs inside dm_backend_enter / dm_backend_leave): host code
 *           that still reads or writes model memory directly crashes. This is how the host
 *           side of a device backend is tested on a machine without the device.
 *   cuda    device memory (DM_MEM_CUDA); the CUDA kernels (src/backends/cuda, inside the
 *           CUDA module that src/ops/cuda loads; docs/cuda.md)
 * The backend allocates and frees the model's memory (parameters, gradients, the
 * activation arena, the optimizer's state, scratch), copies between host memory and its
 * own, zeroes, and synchronizes. Code outside the backend reaches that memory only through
 * these calls: a pointer into it is a handle (ops/buffer.h: dm_bf) to pass to ops, to
 * offset, and to copy from or to, never to dereference — except through a host view
 * (dm_backend_host_view), which a backend may refuse (fenced does; cpu gives the memory
 * itself).
 *
 * A backend is a folder, src/backends/<name>/: its memory, its implementations of the ops
 * (its table, dm_backend.impls), its kernels and its private state; the registry
 * (src/backends/registry.c) lists it in one line. The implementations declare the kind of
 * memory they take (dm_impl.mem, ops/op.h) and the dispatch routine runs only those of the
 * backend's kind, as it runs only those of the precision asked for: a kernel is never
 * handed another backend's memory. The per-op-layer private state of a backend (the
 * cpu's: oneDNN contexts and primitives, bf16 operand scratch, the bf16 copies of the
 * weights and of activations) lives behind dm_ops.bctx (src/backends/cpu/ctx.h), not in
 * the generic dm_ops.
 */
#ifndef DM_BACKEND_H
#define DM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"

/* the kinds of memory an implementation takes; one per family of kernels */
enum { DM_MEM_HOST = 0, DM_MEM_CUDA, DM_MEM_KINDS };

typedef struct dm_backend dm_backend;
struct dm_atlas;
struct dm_ops;
struct dm_policy;

/* What an op layer asks of its backend besides the ops (ops.h, optim_ops.h: the generic
 * calls of the same names forward here; a NULL entry: nothing to do, or a refusal). */
typedef struct {
    /* NULL when the backend runs hardware bf16 products; else why not (the op layer's
     * bf16_why, which the policy's precision record starts from) */
    const char *(*bf16_missing)(void);
    /* the side room (ops.h): the bytes the backend keeps beside each float of a tensor
     * products read; a room given, all rooms dropped; and around every op call, each
     * output p[n] before the call (after 0: what the backend kept of it no longer holds)
     * and after it (1: fill its room) */
    size_t (*side_bytes)(const struct dm_ops *ops);
    void (*side_room)(struct dm_ops *ops, const float *x, size_t n, float *room);
    void (*side_clear)(struct dm_ops *ops);
    void (*side_written)(struct dm_ops *ops, const float *p, size_t n, int after);
    /* bf16 copies of operands the products read (the cpu's: a registry of copies in its
     * private state, and the bf16 copy of the weights) */
    void (*forget_bf16)(struct dm_ops *ops);
    int (*reserve_bf16_weights)(struct dm_ops *ops, size_t n);
    /* the bytes of scratch its bf16 products may grow for products whose two operands
     * hold at most `pair` elements together and whose backward's dout at most `dout` (the
     * memory plan's question; 0 or NULL: none, as in fp32) */
    size_t (*product_scratch)(const struct dm_ops *ops, size_t pair, size_t dout);
    /* a matmul backward's dout[n] for its two products (shared: both run): a bf16 copy
     * made once for both unless one is held; 1 when made, for dout_forget */
    int (*dout_bf16)(struct dm_ops *ops, const float *dout, size_t n, int shared);
    void (*dout_forget)(struct dm_ops *ops, int made);
    void (*set_weights)(struct dm_ops *ops, const float *w, size_t n);
    /* NULL when the op ns_bf16 can run (its library's context made now); else why not */
    const char *(*ns_bf16_context)(struct dm_ops *ops);
    /* Newton-Schulz's and the retraction's plan on this backend (optim_ops.h) */
    size_t (*ns_work)(int n, int rows, int cols, int bf16);
    int (*ns_threaded)(int rows, int cols);
    size_t (*retract_work)(int n, int rows, int cols);
    void (*retract_init)(float *R, float *s, const float *W0, int n, int rows, int cols);
} dm_backend_calls;

/* What a backend does; NULL entries: nothing to do (enter, leave, sync). */
typedef struct dm_backend_vt {
    void *(*alloc)(dm_backend *be, size_t bytes); /* zeroed, 64-byte aligned; NULL: OOM */
    void (*release)(dm_backend *be, void *p);
    void (*to_host)(dm_backend *be, void *host, const void *src, size_t bytes);
    void (*from_host)(dm_backend *be, void *dst, const void *host, size_t bytes);
    void (*copy)(dm_backend *be, void *dst, const void *src, size_t bytes); /* within */
    void (*zero)(dm_backend *be, void *p, size_t bytes);
    void (*sync)(dm_backend *be);
    void *(*host_view)(dm_backend *be, void *p); /* NULL: refused */
    void (*enter)(dm_backend *be);
    void (*leave)(dm_backend *be);
    void (*destroy)(dm_backend *be);
    /* the atlas's roofline (ops/atlas.h): time each GEMM set of the step alone on its
     * kernels; NULL: none */
    void (*roofline)(struct dm_atlas *a);
    /* the execution policy (ops/policy.h) of a model of config c with delta core d, its op
     * layer ops bound to this backend: decided once, at the model's creation (the host's,
     * with be NULL: what a memory plan of no model sizes with). 0; or 1 with the one-line
     * refusal in err (bf16 asked where it cannot run) */
    int (*policy)(dm_backend *be, const dm_config *c, struct dm_ops *ops,
                  const dm_delta_dims *d, struct dm_policy *p, char *err, size_t errlen);
    /* the memory plan's question (ops.h: dm_ops_delta_work): the delta core's scratch and
     * saved state for dims d on nthreads threads; NULL: none */
    size_t (*delta_work)(const struct dm_ops *ops, const dm_delta_dims *d, int nthreads,
                         int both, size_t *saved);
    const dm_backend_calls *calls; /* the op layer's other questions; NULL: none */
    /* the policy p of a model made real again before its ops run, where another model of
     * the process may have changed it (the cpu's thread pool); NULL: nothing to do */
    void (*apply)(dm_backend *be, const struct dm_policy *p);
    /* marks and asynchronous reads (dm_backend_mark, dm_backend_read_begin below) for a
     * backend whose calls return before its work is done; NULL: the host's way (its
     * clock, a copy at once) */
    int (*marks)(dm_backend *be, int n);
    void (*mark)(dm_backend *be, int i);
    double (*mark_ms)(dm_backend *be, int a, int b);
    void (*read_begin)(dm_backend *be, void *host, const void *src, size_t bytes);
    void (*read_end)(dm_backend *be);
    void (*put)(dm_backend *be, void *dst, const void *host, size_t bytes);
    /* graphs (dm_backend_capture_begin below) for a backend whose queued work can be
     * captured and replayed; NULL: none */
    int (*capture_begin)(dm_backend *be);
    void *(*capture_end)(dm_backend *be, char *why, size_t n);
    int (*graph_launch)(dm_backend *be, void *graph);
    void (*graph_free)(dm_backend *be, void *graph);
} dm_backend_vt;

struct dm_impl_list;
struct dm_backend {
    const char *name; /* "cpu", "fenced" */
    int kind;         /* DM_BACKEND_* (dormouse.h) */
    int mem;          /* DM_MEM_*: the implementations it runs */
    const dm_backend_vt *vt;
    void *priv;       /* the backend's own state */
    /* its implementations of every op, [DM_OP_COUNT] (ops/op.h: dm_impl_list; NULL: none
     * of that op), registered from its folder; dispatch asks them, then the op's
     * reference */
    const struct dm_impl_list *const *impls;
    double *clock; /* the host's marks (a backend without its own): [n_clock] */
    int n_clock;
};

/* A backend as the registry lists it (src/backends/registry.c, one line per backend): its
 * name and kind, how it is made, and its implementations. The first entry is the host's
 * (cpu): an op layer bound to no backend runs its implementations on host memory. */
typedef struct {
    const char *name;
    int kind; /* DM_BACKEND_* */
    dm_backend *(*create)(int device, char *err, size_t errlen);
    const struct dm_impl_list *const *impls; /* [DM_OP_COUNT]; NULL: given when made (cuda:
                                                the module's table, src/ops/cuda/probe.c) */
    const dm_backend_vt *vt; /* its calls, for an op layer of no model (the host's: what
                                `dormouse plan` sizes); NULL: made with the backend */
} dm_backend_reg;
extern const dm_backend_reg dm_backend_regs[];
extern const int dm_backend_n_regs;

/* The backend of the `backend` key (DM_BACKEND_*: auto is cpu) on CUDA device `device`
 * (the `device` key; only cuda reads it). NULL with the reason in err when it cannot be
 * made here. */
dm_backend *dm_backend_create(int kind, int device, char *err, size_t errlen);
/* What auto chose and why, one line without a newline, for the start of a run:
 * "backend: cpu (auto; not cuda: no CUDA driver ...)"; "" for a backend asked by name. */
const char *dm_backend_choice(int kind, int device, char *buf, size_t n);
void dm_backend_free(dm_backend *be);
/* The name of kind ("auto" -> what auto picks on this machine). */
const char *dm_backend_name(int kind);

/* Memory: zeroed, 64-byte aligned; NULL when out of memory. Release takes NULL. */
void *dm_backend_alloc(dm_backend *be, size_t bytes);
void dm_backend_release(dm_backend *be, void *p);
/* Copies between host memory and the backend's (bytes; either side may be offset into an
 * allocation), within the backend, and zeroing. */
void dm_backend_to_host(dm_backend *be, void *host, const void *src, size_t bytes);
void dm_backend_from_host(dm_backend *be, void *dst, const void *host, size_t bytes);
void dm_backend_copy(dm_backend *be, void *dst, const void *src, size_t bytes);
void dm_backend_zero(dm_backend *be, void *p, size_t bytes);
/* Wait for the backend's work (nothing on the CPU: its calls return when done); before a
 * clock is read for the atlas or the step's times. NULL: nothing. */
void dm_backend_sync(dm_backend *be);
/* Marks: points in the backend's queued work, for times without a wait between them (a
 * step's forward, backward and update). dm_backend_marks makes room for marks 0 .. n-1
 * (0 ok, 1 out of memory); dm_backend_mark(i) marks the work queued so far; after a wait
 * for it (dm_backend_sync, a read), dm_backend_mark_ms gives the milliseconds from mark a
 * to mark b. On the CPU, whose calls return when done, a mark is the clock. */
int dm_backend_marks(dm_backend *be, int n);
void dm_backend_mark(dm_backend *be, int i);
double dm_backend_mark_ms(dm_backend *be, int a, int b);
/* An asynchronous read of bytes at src into host memory: begun behind the work queued so
 * far, done at dm_backend_read_end (the host's bytes are not the caller's before it; one
 * read at a time). The host may do other work between the two while the backend works.
 * On the CPU the copy is made at once. */
void dm_backend_read_begin(dm_backend *be, void *host, const void *src, size_t bytes);
void dm_backend_read_end(dm_backend *be);
/* A copy from the host queued without waiting: the host's bytes are taken at once (its
 * buffer is free on return), the copy runs in order with the backend's work (a step's
 * batch). On the CPU: dm_backend_from_host. */
void dm_backend_put(dm_backend *be, void *dst, const void *host, size_t bytes);
/* Graphs: the work queued between dm_backend_capture_begin and _end is recorded, not run,
 * and comes back as a graph (NULL with the reason in why when the capture failed: work
 * that cannot be captured was queued); dm_backend_graph_launch queues the recorded work
 * again, on the same memory, each time (0, or 1 when the backend refused); graph_free
 * frees it. Inside a capture nothing may wait or copy from the host (the backend stops the
 * process naming the call). dm_backend_graphs: whether the backend has them. */
static inline int dm_backend_graphs(const dm_backend *be) {
    return be && be->vt->capture_begin != NULL;
}
int dm_backend_capture_begin(dm_backend *be);
void *dm_backend_capture_end(dm_backend *be, char *why, size_t n);
int dm_backend_graph_launch(dm_backend *be, void *graph);
void dm_backend_graph_free(dm_backend *be, void *graph);
/* 1 when the backend's calls return before its work is done (a device's queue): then the
 * host can work while it runs, between a read's begin and end */
static inline int dm_backend_queues(const dm_backend *be) {
    return be && be->vt->read_begin != NULL;
}
/* A host pointer to the same bytes as p, valid until the next backend call that changes
 * them; NULL when the backend refuses (then copy). */
void *dm_backend_host_view(dm_backend *be, void *p);
/* Host access to bytes of the backend's memory at p: a host view when the backend gives
 * one, else a malloc'd copy (read from p when `read`). NULL when out of memory.
 * dm_backend_unmap ends it: a copy is written back to p when `write`, then freed. */
void *dm_backend_map(dm_backend *be, void *p, size_t bytes, int read);
void dm_backend_unmap(dm_backend *be, void *p, void *host, size_t bytes, int write);
/* Make policy p (a model's, decided by this backend) real again: before a model's ops
 * run (dm_model_forward). */
static inline void dm_backend_apply(dm_backend *be, const struct dm_policy *p) {
    if (be && be->vt->apply) be->vt->apply(be, p);
}
/* The backend's own call window: its memory is accessible to the host between enter and
 * leave (nested calls count). The dispatch routine opens it around every op call. */
static inline void dm_backend_enter(dm_backend *be) {
    if (be && be->vt->enter) be->vt->enter(be);
}
static inline void dm_backend_leave(dm_backend *be) {
    if (be && be->vt->leave) be->vt->leave(be);
}

/* A backend object of the registry's entry `reg` with these calls and state (for the
 * backends' create functions); NULL with err when out of memory. */
dm_backend *dm_backend_make(const dm_backend_reg *reg, int mem, const dm_backend_vt *vt,
                            void *priv, char *err, size_t errlen);
/* The registry's entry of kind (auto: the host's), or NULL. */
const dm_backend_reg *dm_backend_reg_of(int kind);
/* (src/ops/cuda/probe.c) the cuda backend on device `device`, made from the CUDA module's
 * table (src/backends/cuda, in libdormouse-cuda.so); NULL with the reason in err */
dm_backend *dm_backend_cuda_create(int device, char *err, size_t errlen);
const char *dm_backend_cuda_missing(int device);

#endif
