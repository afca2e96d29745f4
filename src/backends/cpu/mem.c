/* mem.c — the memory of the two backends the CPU kernels run on (ops/backend.h):
 *   cpu     host memory (64-byte aligned, zeroed), copies are memcpy, a host view is the
 *           memory itself;
 *   fenced  the same kernels, each allocation its own anonymous mapping, PROT_NONE except
 *           inside the backend's calls (enter/leave, nested; copies and zeroing open it
 *           themselves); no host view. Test-only: every op call costs two mprotect per
 *           allocation. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dormouse.h"
#include "ops/backend.h"

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

static const dm_backend_vt CPU = {cpu_alloc, cpu_release, cpu_copy, cpu_copy, cpu_copy,
                                  cpu_zero,  NULL,        cpu_view, NULL,     NULL,
                                  cpu_destroy};

static dm_backend *make(const char *name, int kind, const dm_backend_vt *vt, void *priv,
                        char *err, size_t errlen) {
    dm_backend *be = calloc(1, sizeof *be);
    if (!be) {
        if (err) snprintf(err, errlen, "out of memory creating the %s backend", name);
        return NULL;
    }
    *be = (dm_backend){name, kind, DM_MEM_HOST, vt, priv};
    return be;
}

dm_backend *dm_backend_cpu_create(char *err, size_t errlen) {
    return make("cpu", DM_BACKEND_CPU, &CPU, NULL, err, errlen);
}

/* ---- fenced ---- */

typedef struct {
    struct region { void *p; size_t len; } *r;
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
    f->r[f->n++] = (struct region){p, len}; /* zeroed by the kernel */
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
static void fenced_copy(dm_backend *be, void *dst, const void *src, size_t bytes) {
    fenced_enter(be);
    memmove(dst, src, bytes);
    fenced_leave(be);
}
static void fenced_zero(dm_backend *be, void *p, size_t bytes) {
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

static const dm_backend_vt FENCED = {fenced_alloc, fenced_release, fenced_copy, fenced_copy,
                                     fenced_copy,  fenced_zero,    NULL,        NULL,
                                     fenced_enter, fenced_leave,   fenced_destroy};

dm_backend *dm_backend_fenced_create(char *err, size_t errlen) {
    fence *f = calloc(1, sizeof *f);
    long page = sysconf(_SC_PAGESIZE);
    if (!f) {
        if (err) snprintf(err, errlen, "out of memory creating the fenced backend");
        return NULL;
    }
    f->page = page > 0 ? (size_t)page : 4096;
    dm_backend *be = make("fenced", DM_BACKEND_FENCED, &FENCED, f, err, errlen);
    if (!be) free(f);
    return be;
}
