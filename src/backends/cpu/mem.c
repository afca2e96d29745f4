/* mem.c — the cpu backend's memory (ops/backend.h): host memory (64-byte aligned,
 * zeroed), copies are memcpy, a host view is the memory itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "dormouse.h"

/* ---- cpu ---- */

static void *cpu_alloc(dm_backend *be, size_t bytes) {
    (void)be;
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0, n);
    return p;
}
static void cpu_release(dm_backend *be, void *p) {
    (void)be;
    free(p);
}
static void cpu_copy(dm_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memmove(dst, src, bytes);
}
static void cpu_zero(dm_backend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}
static void *cpu_view(dm_backend *be, void *p) {
    (void)be;
    return p;
}
static void cpu_destroy(dm_backend *be) { free(be); }

const dm_backend_vt dm_cpu_vt = {
    .alloc = cpu_alloc,     .release = cpu_release,        .to_host = cpu_copy,
    .from_host = cpu_copy,  .copy = cpu_copy,              .zero = cpu_zero,
    .host_view = cpu_view,  .destroy = cpu_destroy,        .roofline = dm_cpu_roofline,
    .policy = dm_cpu_policy, .delta_work = dm_cpu_delta_work, .calls = &dm_cpu_calls,
    .apply = dm_cpu_apply, /* no marks or reads of its own: its calls return when done */
};

dm_backend *dm_backend_cpu_create(int device, char *err, size_t errlen) {
    (void)device;
    return dm_backend_make(dm_backend_reg_of(DM_BACKEND_CPU), DM_MEM_HOST, &dm_cpu_vt, NULL, err,
                           errlen);
}
