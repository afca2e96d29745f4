/* threads.c — one thread pool: OpenMP regions and OpenBLAS (its OpenMP build) share it. */
#include <cblas.h>
#include <omp.h>

#include "dormouse.h"

int dm_set_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
}
