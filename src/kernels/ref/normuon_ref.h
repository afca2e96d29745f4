/* normuon_ref.h — the references of normuon.h's kernels: the same maps written plainly,
 * every sum and product in double, each output rounded to float once. Shapes and
 * arguments are those of the kernels they check (work is not needed). */
#ifndef DM_KERNELS_NORMUON_REF_H
#define DM_KERNELS_NORMUON_REF_H

#include <stddef.h>

void dm_normuon_ref(float *x, float *v, int n, int rows, int cols, float beta2, float eps);
void dm_muon_apply_cautious_ref(float *wo, const float *w, const float *u, size_t n,
                                float decay, float step);
void dm_adamw_cautious_ref(float *po, float *m1o, float *m2o, const float *p, const float *g,
                           const float *m1, const float *m2, size_t n, float lr, float wd,
                           float b1, float b2, float eps, long t, float gscale);

#endif
