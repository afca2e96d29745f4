/* optim_ops.h — the optimizer's ops (defined in ops/update.c and ops/ns.c): what a training step's
 * update computes, through the one dispatch routine like every other op (counted, timed
 * in the atlas, verified against the reference; docs/optimizer_ops.md). The optimizer
 * (src/optim) decides what to run on which tensor; these compute it.
 *
 *   op           implementations (preferred first)       kernel
 *   adamw        cpu, reference                           backends/cpu/kernels/optim.c
 *   momentum     cpu, reference                           (Muon's, with the Nesterov u)
 *   normuon      cpu, reference                           backends/cpu/kernels/normuon.c
 *   muon_update  cpu, reference                           w = w decay - step O (cautious:
 *                                                         the decay where x w >= 0)
 *   grad_norm    cpu, reference                           ||g||_2 (clipping's input)
 *   grad_add     cpu, reference                           the micro-batch gradient sum
 *   grad_mean    cpu, reference
 *   ns           openblas, reference                      backends/cpu/kernels/ns.c (fp32)
 *   ns_bf16      onednn-bf16                              backends/cpu/kernels/ns.c (bf16 operands)
 *   retract      cpu, reference                           backends/cpu/kernels/retract.c
 *
 * Every op here is one call in direction DM_FWD. Updates run in place (the first pointer
 * is read and written); verify mode runs the second implementation from the same inputs
 * into scratch first and compares the values written. Clipping is the gscale the
 * optimizer computes from grad_norm and passes to adamw and momentum (which scale the
 * gradient as they read it); weight decay is the decay factor of adamw and muon_update.
 * ns_bf16 has no reference within the fp32 bound (its bf16 roundings flip with the
 * summation order and the iteration amplifies them: tests/test_ns.c prints the spread),
 * so verify mode leaves it out, as it does add.
 */
#ifndef DM_OPTIM_OPS_H
#define DM_OPTIM_OPS_H

#include <math.h>
#include <stddef.h>

#include "ops/ops.h"

/* The values of a step that the updates read from the backend's memory (put there before
 * the step's work, so that work captured once replays with each step's values):
 * AdamW's [lr, decay = 1 - lr wd, c1, c2] with the bias corrections c_k = 1 / (1 - b_k^t)
 * at the 1-based step t, in double rounded once; Muon's [decay, step]. */
#define DM_ADAM_HYPER 4
#define DM_MUON_HYPER 2
static inline void dm_adam_hyper(float h[DM_ADAM_HYPER], float lr, float wd, float b1, float b2,
                                 long t) {
    h[0] = lr;
    h[1] = 1.0f - lr * wd;
    h[2] = (float)(1.0 / (1.0 - pow(b1, (double)t)));
    h[3] = (float)(1.0 / (1.0 - pow(b2, (double)t)));
}

/* p, m1, m2 [n] updated in place from g [n] scaled by *gscale (one float of the backend's
 * memory, dm_op_grad_norm's; NULL: 1), the step's values at hyper (DM_ADAM_HYPER floats of
 * the backend's memory) (backends/cpu/kernels/optim.h: dm_adamw; with cautious = 1 the
 * decay only where the update and p agree in sign) */
void dm_op_adamw(dm_ops *o, dm_bf *p, dm_bf *m1, dm_bf *m2, const dm_bf *g, size_t n,
                 const dm_bf *hyper, float b1, float b2, float eps, const dm_bf *gscale,
                 int cautious);
/* mom [n] in place; u [n] written when non-NULL (dm_momentum); gscale as for adamw */
void dm_op_momentum(dm_ops *o, dm_bf *mom, dm_bf *u, const dm_bf *g, size_t n, float beta,
                    const dm_bf *gscale);
/* w [n] <- w decay - step x (dm_muon_apply) with [decay, step] at ds (DM_MUON_HYPER floats
 * of the backend's memory); cautious = 1: w decayed only where x w >= 0 */
void dm_op_muon_update(dm_ops *o, dm_bf *w, const dm_bf *x, size_t n, const dm_bf *ds,
                       int cautious);
/* NorMuon: the n stacked slices x[n, rows, cols] (an orthogonalized update, rows the output
 * neurons) divided row by row by sqrt of their second moments v[n, rows] (updated in place:
 * v <- beta2 v + (1 - beta2) mean_c x^2), each slice rescaled to its Frobenius norm before
 * (backends/cpu/kernels/normuon.h: dm_normuon). work: 2 rows floats of scratch. */
void dm_op_normuon(dm_ops *o, dm_bf *x, dm_bf *v, int n, int rows, int cols, float beta2,
                   float eps, dm_bf *work);
/* *norm = ||g[n]||_2 (dm_grad_norm2), and when gscale != NULL *gscale = the clipping
 * factor for threshold clip (ops/update.h: dm_clip_scale): one double and one float of
 * the backend's memory, left there for the updates (no wait for the host) */
void dm_op_grad_norm(dm_ops *o, double *norm, dm_bf *gscale, const dm_bf *g, size_t n,
                     float clip);
/* acc [n] = g (first) or acc + g;  out [n] = acc / A  (dm_grad_add, dm_grad_mean) */
void dm_op_grad_add(dm_ops *o, dm_bf *acc, const dm_bf *g, size_t n, int first);
void dm_op_grad_mean(dm_ops *o, dm_bf *out, const dm_bf *acc, size_t n, int A);

/* Newton–Schulz of the contiguous stack x[n, rows, cols] in place (backends/cpu/kernels/ns.h:
 * dm_ns_run), schedule s (DM_NS_*); stack = 1: the stack path for any n. bf16: the op
 * ns_bf16 (oneDNN's bf16 products; the caller asked dm_ops_ns_bf16_context first), else ns.
 * work: dm_op_ns_work(n, rows, cols, bf16) floats. */
void dm_op_ns(dm_ops *o, dm_bf *x, int n, int rows, int cols, int s, dm_bf *work, int bf16,
              int stack);
/* The retractions of a contiguous stack W[n, rows, cols] in place (backends/cpu/kernels/retract.h):
 * sphere with radii R[n]; stiefel with scales S[n] (stack as dm_op_ns; work:
 * dm_op_retract_work floats). */
void dm_op_retract_sphere(dm_ops *o, dm_bf *W, const dm_bf *R, int n, int rows, int cols);
void dm_op_retract_stiefel(dm_ops *o, dm_bf *W, const dm_bf *S, int n, int rows, int cols,
                           dm_bf *work, int stack);

/* What the optimizer needs to know of these ops to plan them: NS's iterations and FLOPs
 * (the schedule's, ref/ns_sched.h), and, as o's backend answers (its dm_backend_calls;
 * the host's when o has none): NS's scratch, whether a lone slice of a shape tiles its
 * GEMMs over the threads, the Stiefel retraction's scratch; and for bf16 NS (which the
 * policy decides, ops/policy.h), NULL when the backend's context for it is made (now, if
 * not yet), else why not. */
int dm_op_ns_steps(int s);
double dm_op_ns_flops(int n, int rows, int cols, int s);
size_t dm_op_ns_work(dm_ops *o, int n, int rows, int cols, int bf16);
int dm_op_ns_threaded(dm_ops *o, int rows, int cols);
size_t dm_op_retract_work(dm_ops *o, int n, int rows, int cols);
const char *dm_ops_ns_bf16_context(dm_ops *o);
/* The retraction constants of W0[n, rows, cols] at init, in host memory (not a step's op):
 * R[i] = ||W0_i||_F, s[i] = R[i] / sqrt(min(rows, cols)) (the backend's dm_retract_init). */
void dm_op_retract_init(dm_ops *o, float *R, float *s, const float *W0, int n, int rows,
                        int cols);

#endif
