/* optim.h — the optimizer's elementwise kernels and reductions (optim.c): the AdamW and
 * Muon updates, Muon's momentum, the gradient norm, the micro-batch gradient sum. Pure
 * functions on float arrays; the op layer runs them (ops/optim_ops.h), the references are
 * in ref/optim_ref.h.
 *
 * Every kernel here is elementwise or a reduction in a fixed order: the bits do not depend
 * on the thread count. An output may equal its input of the same name (in place: how the
 * optimizer runs them); otherwise they do not overlap.
 */
#ifndef DM_KERNELS_OPTIM_H
#define DM_KERNELS_OPTIM_H

#include <stddef.h>

/* AdamW, decoupled weight decay, bias-corrected, on n parameters:
 *   gi = g gscale;  m1' = b1 m1 + (1 - b1) gi;  m2' = b2 m2 + (1 - b2) gi^2
 *   p' = p decay - lr (m1' c1) / (sqrt(m2' c2) + eps)
 * with decay = 1 - lr wd and c_k = 1 / (1 - b_k^t) at the 1-based step t (ops/optim_ops.h:
 * dm_adam_hyper makes them).
 * cautious = 1: the decay only where the update and p agree in sign (m1' p >= 0, where
 * both push p towards zero); elsewhere p' = p - lr (...). cautious = 0: the plain decay.
 * p, g, m1, m2, and the outputs po, m1o, m2o: [n] */
void dm_adamw(float *po, float *m1o, float *m2o, const float *p, const float *g, const float *m1,
              const float *m2, size_t n, float lr, float decay, float b1, float b2, float eps,
              float c1, float c2, float gscale, int cautious);

/* Muon's momentum on n entries: gj = g gscale;  mom' = beta mom + (1 - beta) gj; and
 * when u != NULL the Nesterov update u = (1 - beta) gj + beta mom'.  mom, g, momo, u: [n] */
void dm_momentum(float *momo, float *u, const float *mom, const float *g, size_t n, float beta,
                 float gscale);

/* Muon's step on one unit: wo = w decay - step x  (decay = 1 - lr wd, step = lr times the
 * shape factor; the optimizer computes both); cautious = 1: wo = w - step x where x w < 0
 * (the decay only where update and weight agree in sign).  w, x, wo: [n] */
void dm_muon_apply(float *wo, const float *w, const float *x, size_t n, float decay,
                   float step, int cautious);

/* ||g||_2 of g[n]: squares summed in double over fixed blocks of DM_NORM_BLOCK (in
 * parallel), then the block sums in order. */
#define DM_NORM_BLOCK 16384
double dm_grad_norm2(const float *g, size_t n);

/* The gradient sum's two steps (optim/gradsum.h): acco = g (first) or acc + g, the one
 * addition of the order; out = acc (1/A).  [n] each */
void dm_grad_add(float *acco, const float *acc, const float *g, size_t n, int first);
void dm_grad_mean(float *out, const float *acc, size_t n, int A);

#endif
