/* cpu.c — what the CPU offers, found at run time (never assumed from the build machine):
 * cpuid for the instructions, xgetbv for the registers the OS saves. The environment
 * variable DM_CPU_NO_BF16=1 pretends the CPU lacks hardware bf16 (for tests of the
 * paths a CPU without it takes); DM_CPU_BF16_REFERENCE=1 lets a CPU without it run the
 * bf16 products on the reference bf16 path (for tests of the bf16 paths on any CPU). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/kernels.h"

static int env_set(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}
static int pretend_no_bf16(void) { return env_set("DM_CPU_NO_BF16"); }

int dm_cpu_bf16_reference(void) { return env_set("DM_CPU_BF16_REFERENCE"); }

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xcr0(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* no OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

const char *dm_cpu_bf16_missing(void) {
    if (pretend_no_bf16()) return "cpu lacks avx512_bf16 and amx_bf16 (DM_CPU_NO_BF16 is set)";
    unsigned a, b, c, d, a1 = 0, b1, c1, d1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "cpu lacks avx512_bf16 and amx_bf16";
    if (a >= 1) __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    unsigned long long x = xcr0();
    int avx512_os = (x & 0xe6) == 0xe6;            /* SSE, AVX, opmask, ZMM state */
    int amx_os = (x & (3ull << 17)) == (3ull << 17); /* tile config and data */
    int avx512_bf16 = (b & (1u << 16)) && (a1 & (1u << 5)) && avx512_os; /* avx512f, bf16 */
    int amx_bf16 = (d & (1u << 22)) && amx_os;
    if (avx512_bf16 || amx_bf16) return NULL;
    if ((a1 & (1u << 5)) || (d & (1u << 22))) return "the OS does not enable the bf16 registers";
    return "cpu lacks avx512_bf16 and amx_bf16";
}
#else
const char *dm_cpu_bf16_missing(void) {
    (void)pretend_no_bf16;
    return "not an x86-64 CPU (no avx512_bf16, amx_bf16)";
}
#endif
