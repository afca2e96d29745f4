/* normuon_ref.h — the references of normuon.h's kernels: the same maps written plainly,
 * every sum and product in double, each output rounded to float once. Shapes and
 * arguments are those of the kernels they check (work is not needed). */
#ifndef DM_KERNELS_NORMUON_REF_H
#define DM_KERNELS_NORMUON_REF_H

#include <stddef.h>

void dm_normuon_ref(float *x, float *v, int n, int rows, int cols, float beta2, float eps);

#endif
