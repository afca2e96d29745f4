/* oracle.h — plain double-precision forward implementations, written independently of
 * the float kernels, used as the oracle in tests: float forward vs oracle forward, and
 * float backward vs central finite differences of the oracle forward.
 * Shapes and semantics are those of the kernel of the same name in src/kernels/. */
#ifndef DM_ORACLE_H
#define DM_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "dormouse.h"

void o_embed(double *out, const uint8_t *tok, const double *table, int N, int C);
void o_rmsnorm(double *y, const double *x, const double *w, int N, int C, double eps);
void o_matmul(double *out, const double *in, const double *W, const double *bias, int N,
              int K, int O);
void o_silu(double *y, const double *x, size_t n);
void o_sigmoid(double *y, const double *x, size_t n);
void o_swiglu(double *h, const double *a, const double *b, size_t n);
void o_conv(double *y, const double *x, const double *w, int B, int T, int C, int W);
void o_l2norm(double *y, const double *x, int R, int D, double eps);
void o_gate(double *g, const double *f, const double *A_log, const double *dt_bias, int N,
            int H, int Cg, double lb);
void o_gatednorm(double *y, const double *o, const double *z, const double *w, int R, int D,
                 double eps, int act);
/* mean cross-entropy over N rows */
double o_xent(const double *logits, const uint8_t *targets, int N, int V);
/* token-serial delta rule (dm_delta_dims layout); h0 / hT may be NULL */
void o_delta(const dm_delta_dims *d, const double *q, const double *k, const double *v,
             const double *g, const double *beta, const double *h0, double *o, double *hT);

#endif
