/* threads.c — the OpenMP thread pool. OpenBLAS (its OpenMP build) gets one thread of its
 * own: every GEMM runs single-threaded per tile inside our regions (backends/cpu/kernels/gemm.c), so
 * OpenBLAS never runs a team. Telling it n threads would make it set up n GEMM buffers at
 * once, and under an address-space limit (ulimit -v) its allocator retries a failed mmap
 * for ever. openblas_set_num_threads also sets OpenMP's count, so it goes first. */
#include <cblas.h>
#include <omp.h>

#include "dormouse.h"

int dm_set_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    openblas_set_num_threads(1);
    omp_set_num_threads(n);
    return n;
}
