/* cpu.h — the cpu backend's interface: for the registry, and for a backend that runs the
 * cpu backend's implementations on memory of its own (fenced). */
#ifndef DM_BACKENDS_CPU_H
#define DM_BACKENDS_CPU_H

#include <stddef.h>

#include "ops/backend.h"
#include "ops/matmul.h"
#include "ops/op.h"
#include "ops/policy.h"

/* host memory; its implementations dm_cpu_impls */
dm_backend *dm_backend_cpu_create(int device, char *err, size_t errlen);
/* the execution policy (ops/policy.h) of a model of config c and delta core d, its ops
 * bound to the backend (policy.c); its backends' dm_backend_vt.policy */
int dm_cpu_policy(dm_backend *be, const dm_config *c, dm_ops *ops, const dm_delta_dims *d,
                  struct dm_policy *p, char *err, size_t errlen);
/* its dm_backend_vt.apply: the pool of p again (policy.c) */
void dm_cpu_apply(dm_backend *be, const struct dm_policy *p);
/* Would the delta op run chunked for dims d under the settings of ops? (0 with the
 * reason.) (delta.c) */
int dm_ops_delta_chunked(const dm_ops *ops, const dm_delta_dims *d, const char **why);
/* the delta op's scratch on the cpu (ops.h: dm_ops_delta_work): the reference's work grows
 * with T (it keeps every state of a sequence), the chunked path's with the chunk; both
 * with the threads (delta.c); its backends' dm_backend_vt.delta_work */
size_t dm_cpu_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
                         size_t *saved);
/* its calls (mem.c), for the registry */
extern const dm_backend_vt dm_cpu_vt;
/* what its op layers ask besides the ops (backend.h: dm_backend_calls; table.c): the bf16
 * copies and the side room (copies.c) and bf16 Newton-Schulz's oneDNN context (ns.c) */
extern const dm_backend_calls dm_cpu_calls;
size_t dm_cpu_side_bytes(const dm_ops *ops);
size_t dm_cpu_product_scratch(const dm_ops *ops, size_t pair, size_t dout);
void dm_cpu_side_room(dm_ops *ops, const float *x, size_t n, float *room);
void dm_cpu_side_clear(dm_ops *ops);
void dm_cpu_side_written(dm_ops *ops, const float *p, size_t n, int after);
void dm_cpu_forget_bf16(dm_ops *ops);
int dm_cpu_reserve_bf16_weights(dm_ops *ops, size_t n);
int dm_cpu_dout_bf16(dm_ops *o, const float *dout, size_t nd, int shared);
void dm_cpu_dout_forget(dm_ops *o, int made);
/* One product of a matmul call (args of ops/matmul.h, direction dir) in bf16, for ops made
 * of products (the fused head, seq.c): on oneDNN's bf16 matmul (hw) or the reference bf16
 * path (the rounded operands through the f32 GEMM); supports: NULL when it takes the call,
 * else why (matmul.c). */
const char *dm_cpu_matmul_bf16_supports(dm_ops *ops, const dm_matmul_args *a, int dir,
                                        int hw);
void dm_cpu_matmul_bf16_run(dm_ops *ops, dm_matmul_args *a, int dir, int hw);
void dm_cpu_set_weights(dm_ops *ops, const float *w, size_t n);
const char *dm_cpu_ns_bf16_context(dm_ops *ops);
/* what the optimizer asks to plan Newton-Schulz and the retraction on the cpu (ns.c;
 * optim_ops.h's dm_op_ns_work, dm_op_ns_threaded, dm_op_retract_work, dm_op_retract_init) */
size_t dm_cpu_ns_work(int n, int rows, int cols, int bf16);
int dm_cpu_ns_threaded(int rows, int cols);
size_t dm_cpu_retract_work(int n, int rows, int cols);
/* the roofline (ops/atlas.h): each GEMM set of the step timed alone on the cpu kernels
 * (roofline.c); its backends' dm_backend_vt.roofline */
struct dm_atlas;
void dm_cpu_roofline(struct dm_atlas *a);
/* its implementations of every op, preferred first (table.c) */
extern const dm_impl_list *const dm_cpu_impls[DM_OP_COUNT];

#endif
