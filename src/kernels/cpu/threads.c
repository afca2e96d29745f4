/* threads.c — the OpenMP thread pool and its floating-point mode.
 *
 * OpenBLAS (its OpenMP build) gets one thread of its own: every GEMM runs single-threaded
 * per tile inside our regions (kernels/cpu/gemm.c), so OpenBLAS never runs a team. Telling
 * it n threads would make it set up n GEMM buffers at once, and under an address-space
 * limit (ulimit -v) its allocator retries a failed mmap for ever. openblas_set_num_threads
 * also sets OpenMP's count, so it goes first.
 *
 * Denormals flush to zero on every thread of the pool (x86: MXCSR FTZ and DAZ; Arm: FPCR
 * FZ). A trained model's gates decay the delta core's state towards zero, and a float
 * below 2^-126 costs the x86 core a microcode assist of ~100 cycles per operation: without
 * the flush a trained model's step runs at less than half the speed of a fresh one's.
 * Flushing changes a value only where it would be below 1.2e-38 in magnitude, and does so
 * the same way on every thread, so results stay bitwise independent of the thread count.
 * The mode is set on the calling thread first (threads made later inherit it: pthreads
 * copy the floating-point environment), then in one region over the whole pool (threads
 * made earlier get it there). DM_CPU_KEEP_DENORMALS=1 in the environment clears the mode
 * instead (IEEE gradual underflow): for benchmarks that measure what the flush saves. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "dormouse.h"
#include "kernels/cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define DM_MXCSR_FTZ_DAZ 0x8040u /* bit 15 flush-to-zero, bit 6 denormals-are-zero */
static void flush_denormals_here(int on) {
    unsigned m = _mm_getcsr();
    _mm_setcsr(on ? m | DM_MXCSR_FTZ_DAZ : m & ~DM_MXCSR_FTZ_DAZ);
}
static int denormals_flushed_here(void) {
    return (_mm_getcsr() & DM_MXCSR_FTZ_DAZ) == DM_MXCSR_FTZ_DAZ;
}
#elif defined(__aarch64__)
#define DM_FPCR_FZ (1ull << 24)
static void flush_denormals_here(int on) {
    unsigned long long r;
    __asm__ volatile("mrs %0, fpcr" : "=r"(r));
    r = on ? r | DM_FPCR_FZ : r & ~DM_FPCR_FZ;
    __asm__ volatile("msr fpcr, %0" : : "r"(r));
}
static int denormals_flushed_here(void) {
    unsigned long long r;
    __asm__ volatile("mrs %0, fpcr" : "=r"(r));
    return (r & DM_FPCR_FZ) != 0;
}
#else
static void flush_denormals_here(int on) { (void)on; }
static int denormals_flushed_here(void) { return 0; }
#endif

void dm_cpu_flush_denormals(void) {
    const char *keep = getenv("DM_CPU_KEEP_DENORMALS");
    int on = !(keep && *keep && strcmp(keep, "0") != 0);
    flush_denormals_here(on);
    int n = omp_get_max_threads(), procs = omp_get_num_procs();
    if (procs > n) n = procs; /* a pool left larger by an earlier, wider region */
#pragma omp parallel num_threads(n)
    flush_denormals_here(on);
}

int dm_denormals_flushed(void) {
    int ok = denormals_flushed_here();
#pragma omp parallel reduction(&& : ok)
    ok = ok && denormals_flushed_here();
    return ok;
}

int dm_set_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    openblas_set_num_threads(1);
    omp_set_num_threads(n);
    dm_cpu_flush_denormals();
    return n;
}
