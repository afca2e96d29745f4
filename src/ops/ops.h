/* ops.h — the op layer (docs/architecture.md section 4): every op a training step runs,
 * through one dispatch routine (dispatch.c). The model calls only these dm_op_*.
 *
 * The ops are listed once (ops/oplist.h) and each is defined in its family's file of
 * src/ops (its arguments, outputs, FLOPs, reference and entry points: op.h); a backend
 * implements them in its folder and registers them (ops/backend.h). So an op has
 * implementations keyed by backend and precision, in order of preference, the op's
 * reference last (src/ref: the oracle); those of another backend's memory kind
 * than dm_ops.be's are never asked, and the call runs inside that backend's window
 * (ops/backend.h, docs/backends.md). For each call the routine asks each
 * implementation in turn whether it takes the call — first the settings (kda_impl,
 * norm_impl, gemm), then the implementation itself (shapes, chunk size, the CPU) — runs
 * the first that does, and
 *   - counts the call per op and direction, by implementation, and every implementation
 *     that did not take it with its reason ("declined" = the reference ran although the
 *     op has a faster implementation);
 *   - times it into the atlas when one is attached (ops/atlas.h);
 *   - in verify mode also runs a second implementation on the same inputs (the reference,
 *     or when the reference is the one chosen, the fastest other one that can take the
 *     call) into scratch, and records the relative RMS difference of every output: the
 *     adjoint equivalence, per op and direction, and the largest overall.
 *
 * Directions: DM_FWD; DM_BWD (the input gradient); DM_BWD_W (the weight gradient of a
 * matmul, its second backward product). Shapes and semantics of each op are those of the
 * kernel of the same name (backends/cpu/kernels/kernels.h, .../delta_chunk.h):
 * parameter gradients accumulate, input gradients overwrite unless stated.
 *
 *   op         the cpu backend's implementations (preferred first), then the reference
 *   matmul     onednn (backends/cpu/kernels/onednn.c), openblas (dm_gemm), reference
 *   delta      chunked (delta_chunk.c), reference (delta_ref.c, token-serial)
 *   rmsnorm    fused (rmsnorm.c), reference (norm_ref.c, composed)
 *   gatednorm  fused (gatednorm.c), reference (norm_ref.c, composed)
 *   embed conv silu sigmoid swiglu l2norm gate xent    cpu, reference
 *   add        cpu (y += x; nothing to check it against)
 *   the optimizer's: grad_add grad_mean grad_norm adamw momentum ns ns_bf16 normuon
 *   muon_update retract (ops/optim_ops.h)
 */
#ifndef DM_OPS_H
#define DM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"
#include "kernels/common.h"
#include "ops/atlas.h"
#include "ops/buffer.h"
#include "ops/oplist.h"

enum { DM_FWD = 0, DM_BWD = 1, DM_BWD_W = 2, DM_NDIR = 3 };
/* the ops (ops/oplist.h): DM_OP_MATMUL, ..., DM_OP_RETRACT */
#define DM_OP_ENUM(NAME, name) DM_OP_##NAME,
enum { DM_OP_LIST(DM_OP_ENUM) DM_OP_COUNT };
#undef DM_OP_ENUM
#define DM_OP_MAX_IMPL 6
/* an implementation's precision: fp32, or bf16 products (bf16 operands rounded to nearest
 * even, f32 accumulation and outputs: docs/bf16.md) */
enum { DM_PREC_FP32 = 0, DM_PREC_BF16 = 1 };
#define DM_OPS_MAX_SKIPS 64
#define DM_VERIFY_BOUND 1e-5 /* fp32: an implementation vs the reference, relative RMS */

/* calls an implementation did not take, and why */
typedef struct {
    int op, dir, impl;
    const char *reason; /* static string */
    long n;
} dm_skip;

typedef struct dm_ops {
    /* settings, from the config */
    int kda_impl;  /* DM_IMPL_* */
    int norm_impl; /* DM_IMPL_AUTO | DM_IMPL_CHUNKED (= fused) | DM_IMPL_REFERENCE */
    int chunk;     /* chunk size of the chunked delta core */
    int gemm;      /* DM_GEMM_* */
    int precision; /* DM_PRECISION_*: fp32 runs fp32 implementations only; bf16 an op's
                      bf16 implementations first; auto its hardware bf16 kernel where the
                      CPU has one (declined with the reason elsewhere), else fp32 */
    const char *bf16_why; /* why the CPU's bf16 is not used (NULL: it is): found at init;
                             tests set it to pretend the feature is absent */
    int verify;    /* while set, every call is also run by a second implementation */
    dm_atlas *atlas;
    /* the backend whose memory the ops are handed (NULL: host memory, the cpu backend's
     * kind): only implementations of its memory kind run, each call inside its window */
    struct dm_backend *be;
    /* the model's execution policy (ops/policy.h; NULL: an op layer of no model, which
     * applies the config's rules itself) */
    const struct dm_policy *policy;
    /* the threads the ops run on when there is no policy (an op layer of no model: its
     * owner's; 1 by default); dm_ops_threads reads the policy's first */
    int threads;
    /* the backend's scratch for the ops that need some (the delta core's: dm_ops_delta_work
     * floats), placed by the memory plan: dm_ops_set_scratch; NULL: none */
    float *scratch;
    size_t scratch_n;
    void *bctx; /* the backend's private state of this op layer (the cpu backend's:
                   backends/cpu/ctx.h), made by the backend on first use */
    void (*bctx_free)(void *bctx); /* set with bctx by the backend that made it */
    /* counters */
    long calls[DM_OP_COUNT][DM_NDIR];
    long ran[DM_OP_COUNT][DM_NDIR][DM_OP_MAX_IMPL];
    dm_skip skip[DM_OPS_MAX_SKIPS];
    int n_skip;
    long skip_lost; /* skips beyond the table (counted, reasons not kept) */
    /* verify mode */
    double verify_max;  /* largest relative difference since the last dm_ops_verify_take */
    char verify_what[64];
    long verify_calls;
    double verify_op[DM_OP_COUNT][DM_NDIR]; /* largest per op and direction; -1: none */
    float *vbuf;        /* scratch of the second run (grown on demand, kept) */
    size_t vcap;
} dm_ops;

/* The settings of c; no backend (host memory). dm_ops_bind gives it the model's. */
void dm_ops_init(dm_ops *ops, const dm_config *c);
void dm_ops_bind(dm_ops *ops, struct dm_backend *be);
void dm_ops_free(dm_ops *ops);
/* One line: "fused matmul=84/84 matmul_bwd=78/78 ... declined=0 [why ...]" (fused = calls
 * not run by the reference). */
void dm_ops_report(const dm_ops *ops, char *buf, size_t n);
/* The table: per op and direction the calls, by implementation, what did not run and
 * why, and the verify maximum when verify mode ran. Lines end in '\n'. */
void dm_ops_table(const dm_ops *ops, char *buf, size_t n);
/* The largest relative difference since the last call (then reset) and the output it came
 * from; -1 when nothing was verified. */
double dm_ops_verify_take(dm_ops *ops, char *what, size_t n);
/* Names: "matmul", "fwd"; the implementations of an op ("onednn", ...; NULL past the end). */
const char *dm_op_name(int op);
const char *dm_op_dir_name(int dir);
const char *dm_op_impl_name(int op, int impl);

/* Room for a bf16 copy of n weights (the bf16 products' copy of the model's parameters).
 * 0 ok; 1 out of memory. */
int dm_ops_reserve_bf16_weights(dm_ops *ops, size_t n);
/* The model's weights (n floats) for the bf16 products: rounded into the reserved copy
 * now, and used by every bf16 matmul whose weight lies in w. Call after each change of the
 * weights (the model does at each forward); nothing when no copy is reserved. */
void dm_ops_set_weights(dm_ops *ops, const dm_bf *w, size_t n);
/* (These and the bf16 copies below are the backend's: forwarded to its
 * dm_backend_calls, ops/backend.h; a backend without them does nothing.) */

/* 1 when a matmul would try the hardware bf16 kernel (the policy's matmul precision; with
 * no policy: precision bf16 or auto, and the CPU has bf16): then it pays to round an
 * operand once for all its products. */
int dm_ops_bf16_active(const dm_ops *ops);

/* The side room: what a backend keeps beside a tensor that matrix products read (the
 * cpu's under bf16 products: bf16 of it, so that every product reading it takes the
 * copy instead of rounding it again; none elsewhere). The model names those tensors — the
 * activations several products read, and the gradients the backward's two products read
 * — and after each layout of its arena gives each room of dm_ops_side_bytes bytes per
 * float of backend memory (tensors never live at once may share a room). The backend
 * fills a tensor's room when an op has written the tensor (a producer may do it in its
 * own pass), and forgets it as soon as any op writes the tensor again: no op takes a
 * copy argument, and no copy outlives its tensor's values. dm_ops_side_clear drops every
 * room (before a new layout); dm_ops_forget_bf16 every copy made so far. */
size_t dm_ops_side_bytes(const dm_ops *ops);
/* The bytes of scratch the backend's bf16 products may grow (operands rounded where no
 * copy holds them) for products whose two operands hold at most `pair` elements together
 * and whose backward's dout at most `dout`: the memory plan's figure; 0 in fp32. */
size_t dm_ops_product_scratch(const dm_ops *ops, size_t pair, size_t dout);
void dm_ops_side_room(dm_ops *ops, const dm_bf *x, size_t n, dm_bf *room);
void dm_ops_side_clear(dm_ops *ops);
void dm_ops_forget_bf16(dm_ops *ops);

/* The delta op's scratch for dims d on nthreads threads, as the backend of ops (the host's
 * when it has none) sizes it: the floats of the path the settings pick, or with `both` of
 * either path (verify mode runs the second one too); and in *saved the floats of the
 * forward's state saved for the backward (0: none). The memory plan places it and hands
 * it over with dm_ops_set_scratch. */
size_t dm_ops_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
                         size_t *saved);
/* The scratch the ops may use from now on: n floats of the backend's memory at p. */
void dm_ops_set_scratch(dm_ops *ops, dm_bf *p, size_t n);
/* The op layer's counts (each op's calls, the calls each implementation ran, the skips) as
 * one array of DM_OPS_COUNTS longs; dm_ops_counts_add adds such an array to them (work
 * captured once and replayed: its calls counted at each replay, as if made again). */
#define DM_OPS_COUNTS (DM_OP_COUNT * DM_NDIR * (1 + DM_OP_MAX_IMPL) + DM_OPS_MAX_SKIPS)
void dm_ops_counts(const dm_ops *ops, long *out);
void dm_ops_counts_add(dm_ops *ops, const long *delta);
/* The threads the ops run on: the policy's (ops/policy.h), else ops->threads. */
int dm_ops_threads(const dm_ops *ops);

/* ---- the ops ---- */

/* out[N,O] = in[N,K] W[O,K]^T (+ bias)        (matmul fwd) */
void dm_op_matmul_fwd(dm_ops *o, dm_bf *out, const dm_bf *in, const dm_bf *W, const dm_bf *bias,
                      int N, int K, int O);
/* din[N,K] = dout W (+= when din_acc; skipped when din == NULL)      (matmul bwd)
 * dW[O,K] += dout^T in; dbias[O] += column sums of dout (when non-NULL)  (matmul bwd_w)
 * (both products read dout: the backend may keep one copy of it for both, its side
 * room's or made here) */
void dm_op_matmul_bwd(dm_ops *o, dm_bf *din, dm_bf *dW, dm_bf *dbias, const dm_bf *dout,
                      const dm_bf *in, const dm_bf *W, int N, int K, int O, int din_acc);

/* out[N,C] = table[ids]; dtable[V,C] += (ids of width w: 1, 2 or 4 bytes, dm_id_width, of
 * a table of V rows) */
void dm_op_embed_fwd_ids(dm_ops *o, dm_bf *out, const void *ids, int w, const dm_bf *table,
                         int N, int C, int V);
void dm_op_embed_bwd_ids(dm_ops *o, dm_bf *dtable, const dm_bf *dout, const void *ids, int w,
                         int N, int C, int V);

/* norm scratch: 2 * rows * cols floats (the composed reference's intermediates) */
void dm_op_rmsnorm_fwd(dm_ops *o, dm_bf *y, dm_bf *rstd, const dm_bf *x, const dm_bf *w, int N,
                       int C, float eps, dm_bf *scratch);
void dm_op_rmsnorm_bwd(dm_ops *o, dm_bf *dx, dm_bf *dw, const dm_bf *dy, const dm_bf *x,
                       const dm_bf *w, const dm_bf *rstd, int N, int C, dm_bf *scratch);
void dm_op_gatednorm_fwd(dm_ops *o, dm_bf *y, dm_bf *rstd, const dm_bf *x, const dm_bf *z,
                         const dm_bf *w, int R, int D, float eps, int act, dm_bf *scratch);
void dm_op_gatednorm_bwd(dm_ops *o, dm_bf *dx, dm_bf *dz, dm_bf *dw, const dm_bf *dy,
                         const dm_bf *x, const dm_bf *z, const dm_bf *w, const dm_bf *rstd,
                         int R, int D, int act, dm_bf *scratch);
/* silu: y = l2norm(silu(x)) in one pass (q and k); xs: the SiLU's input, then dx is the
 * gradient at it (dx = silu'(xs) * the norm's); NULL: the norm's alone */
void dm_op_l2norm_fwd(dm_ops *o, dm_bf *y, dm_bf *rn, const dm_bf *x, int R, int D, float eps,
                      int silu);
void dm_op_l2norm_bwd(dm_ops *o, dm_bf *dx, const dm_bf *dy, const dm_bf *y, const dm_bf *rn,
                      const dm_bf *xs, int R, int D);

void dm_op_conv_fwd(dm_ops *o, dm_bf *y, const dm_bf *x, const dm_bf *w, int B, int T, int C,
                    int W);
void dm_op_conv_bwd(dm_ops *o, dm_bf *dx, dm_bf *dw, const dm_bf *dy, const dm_bf *x,
                    const dm_bf *w, int B, int T, int C, int W);

void dm_op_silu_fwd(dm_ops *o, dm_bf *y, const dm_bf *x, size_t n);
void dm_op_silu_bwd(dm_ops *o, dm_bf *dx, const dm_bf *dy, const dm_bf *x, size_t n);
void dm_op_sigmoid_fwd(dm_ops *o, dm_bf *y, const dm_bf *x, size_t n);
void dm_op_sigmoid_bwd(dm_ops *o, dm_bf *dx, const dm_bf *dy, const dm_bf *y, size_t n);
void dm_op_swiglu_fwd(dm_ops *o, dm_bf *h, const dm_bf *a, const dm_bf *b, size_t n);
void dm_op_swiglu_bwd(dm_ops *o, dm_bf *da, dm_bf *db, const dm_bf *dh, const dm_bf *a,
                      const dm_bf *b, size_t n);
void dm_op_gate_fwd(dm_ops *o, dm_bf *g, const dm_bf *f, const dm_bf *A_log,
                    const dm_bf *dt_bias, int N, int H, int Cg, float lb);
void dm_op_gate_bwd(dm_ops *o, dm_bf *df, dm_bf *dA_log, dm_bf *ddt_bias, const dm_bf *dg,
                    const dm_bf *f, const dm_bf *A_log, const dm_bf *dt_bias, int N, int H,
                    int Cg, float lb);
/* y += x (the residual add: its backward is the identity, nothing to run) */
void dm_op_add(dm_ops *o, dm_bf *y, const dm_bf *x, size_t n);

/* *mean = the mean loss over N rows of logits[N,V] (one double of the backend's memory,
 * left there: read it with the backend's copies), losses per row too when non-NULL;
 * targets of width w (1, 2 or 4 bytes: dm_id_width). Backward: dlogits = scale times the
 * gradient of the summed losses. */
void dm_op_xent_fwd_ids(dm_ops *o, double *mean, dm_bf *losses, const dm_bf *logits,
                        const void *targets, int w, int N, int V);
void dm_op_xent_bwd_ids(dm_ops *o, dm_bf *dlogits, const dm_bf *logits, const void *targets,
                        int w, int N, int V, float scale);
/* the head's product and the cross-entropy fused over rows in chunks of R (ops/seq.h):
 * logits of x[N,D] by W[V,D] in work[R,V] only, the mean loss into *mean as for xent;
 * backward dx[N,D] =, dW[V,D] += */
void dm_op_head_xent_fwd(dm_ops *o, double *mean, dm_bf *losses, const dm_bf *x, const dm_bf *W,
                         const void *targets, int w, dm_bf *work, int N, int D, int V, int R);
void dm_op_head_xent_bwd(dm_ops *o, dm_bf *dx, dm_bf *dW, const dm_bf *x, const dm_bf *W,
                         const void *targets, int w, dm_bf *work, int N, int D, int V, int R,
                         float scale);

/* The delta-rule core. `saved` is the chunked forward's buffer for the backward
 * (the `saved` floats of dm_ops_delta_work) or NULL; the scratch is the op layer's
 * (dm_ops_set_scratch: dm_ops_delta_work floats for dm_ops_threads threads). */
void dm_op_delta_fwd(dm_ops *o, const dm_delta_dims *d, const dm_bf *q, const dm_bf *k,
                     const dm_bf *v, const dm_bf *g, const dm_bf *beta, const dm_bf *h0,
                     dm_bf *out, dm_bf *hT, dm_bf *saved);
void dm_op_delta_bwd(dm_ops *o, const dm_delta_dims *d, const dm_bf *q, const dm_bf *k,
                     const dm_bf *v, const dm_bf *g, const dm_bf *beta, const dm_bf *h0,
                     const dm_bf *saved, const dm_bf *dO, const dm_bf *dhT, dm_bf *dq,
                     dm_bf *dk, dm_bf *dv, dm_bf *dg, dm_bf *dbeta, dm_bf *dh0);

#endif
