/* fenced.c — the fenced test backend (ops/backend.h, docs/backends.md): the cpu backend's
 * implementations on memory the host cannot touch. Each allocation is its own anonymous
 * mapping, PROT_NONE except inside the backend's calls (enter/leave, nested; copies and
 * zeroing open it themselves); no host view; copies and zeroing check that their range
 * lies inside one allocation. Test-only: every op call costs two mprotect per allocation. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "backends/fenced/fenced.h"
#include "dormouse.h"

typedef struct {
    struct region { void *p; size_t len, bytes; } *r; /* mapped len, asked bytes */
    int n, cap;
    int depth; /* open while > 0 */
    size_t page;
} fence;

static void protect(fence *f, int prot) {
    for (int i = 0; i < f->n; i++)
        if (mprotect(f->r[i].p, f->r[i].len, prot)) {
            perror("dormouse: fenced backend: mprotect");
            abort();
        }
}

static void fenced_enter(dm_backend *be) {
    fence *f = be->priv;
    if (f->depth++ == 0) protect(f, PROT_READ | PROT_WRITE);
}
static void fenced_leave(dm_backend *be) {
    fence *f = be->priv;
    if (--f->depth == 0) protect(f, PROT_NONE);
}

static void *fenced_alloc(dm_backend *be, size_t bytes) {
    fence *f = be->priv;
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 32;
        struct region *r = realloc(f->r, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        f->r = r;
        f->cap = cap;
    }
    size_t len = (bytes + f->page - 1) / f->page * f->page;
    if (!len) len = f->page;
    void *p = mmap(NULL, len, f->depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    f->r[f->n++] = (struct region){p, len, bytes}; /* zeroed by the kernel */
    return p;
}
static void fenced_release(dm_backend *be, void *p) {
    fence *f = be->priv;
    for (int i = 0; i < f->n; i++)
        if (f->r[i].p == p) {
            munmap(p, f->r[i].len);
            f->r[i] = f->r[--f->n];
            return;
        }
    fprintf(stderr, "dormouse: fenced backend: release of %p, which it did not allocate\n", p);
    abort();
}
/* p[0..bytes) must lie inside one of its allocations (as asked, not as mapped): a copy
 * past an end is a bug of the caller, stopped here as a device would fault */
static void in_range(const fence *f, const void *p, size_t bytes, const char *what) {
    const char *c = p;
    for (int i = 0; i < f->n; i++) {
        const char *b = f->r[i].p;
        if (c >= b && c <= b + f->r[i].bytes && bytes <= (size_t)(b + f->r[i].bytes - c)) return;
    }
    fprintf(stderr, "dormouse: fenced backend: %s of %zu bytes at %p, outside its allocations\n",
            what, bytes, p);
    abort();
}
static void fenced_to_host(dm_backend *be, void *host, const void *src, size_t bytes) {
    in_range(be->priv, src, bytes, "a copy to the host");
    fenced_enter(be);
    memmove(host, src, bytes);
    fenced_leave(be);
}
static void fenced_from_host(dm_backend *be, void *dst, const void *host, size_t bytes) {
    in_range(be->priv, dst, bytes, "a copy from the host");
    fenced_enter(be);
    memmove(dst, host, bytes);
    fenced_leave(be);
}
static void fenced_copy(dm_backend *be, void *dst, const void *src, size_t bytes) {
    in_range(be->priv, src, bytes, "a copy's source");
    in_range(be->priv, dst, bytes, "a copy's destination");
    fenced_enter(be);
    memmove(dst, src, bytes);
    fenced_leave(be);
}
static void fenced_zero(dm_backend *be, void *p, size_t bytes) {
    in_range(be->priv, p, bytes, "zeroing");
    fenced_enter(be);
    memset(p, 0, bytes);
    fenced_leave(be);
}
static void fenced_destroy(dm_backend *be) {
    fence *f = be->priv;
    for (int i = 0; i < f->n; i++) munmap(f->r[i].p, f->r[i].len);
    free(f->r);
    free(f);
    free(be);
}

static const dm_backend_vt FENCED = {
    .alloc = fenced_alloc,   .release = fenced_release, .to_host = fenced_to_host,
    .from_host = fenced_from_host, .copy = fenced_copy, .zero = fenced_zero,
    .enter = fenced_enter,   .leave = fenced_leave,     .destroy = fenced_destroy,
    .roofline = dm_cpu_roofline, /* on host operands of its own */
    .policy = dm_cpu_policy, .delta_work = dm_cpu_delta_work, .calls = &dm_cpu_calls,
    .apply = dm_cpu_apply,
};

dm_backend *dm_backend_fenced_create(int device, char *err, size_t errlen) {
    (void)device;
    fence *f = calloc(1, sizeof *f);
    long page = sysconf(_SC_PAGESIZE);
    if (!f) {
        if (err) snprintf(err, errlen, "out of memory creating the fenced backend");
        return NULL;
    }
    f->page = page > 0 ? (size_t)page : 4096;
    /* the cpu backend's implementations (its table, through the registry), on this memory */
    dm_backend *be = dm_backend_make(dm_backend_reg_of(DM_BACKEND_FENCED), DM_MEM_HOST, &FENCED, f,
                                     err, errlen);
    if (!be) free(f);
    return be;
}
