/* backend.c — choosing a backend from the registry and the calls every backend answers
 * (backend.h). */
#include "ops/backend.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "dormouse.h"

const dm_backend_reg *dm_backend_reg_of(int kind) {
    if (kind == DM_BACKEND_AUTO) return &dm_backend_regs[0]; /* auto: the host's (cpu) */
    for (int i = 0; i < dm_backend_n_regs; i++)
        if (dm_backend_regs[i].kind == kind) return &dm_backend_regs[i];
    return NULL;
}

const char *dm_backend_name(int kind) {
    const dm_backend_reg *r = dm_backend_reg_of(kind);
    return r ? r->name : NULL;
}

dm_backend *dm_backend_create(int kind, int device, char *err, size_t errlen) {
    const dm_backend_reg *r = dm_backend_reg_of(kind);
    if (!r) {
        size_t at = err ? (size_t)snprintf(err, errlen, "backend: no backend %d (auto", kind) : 0;
        for (int i = 0; err && i < dm_backend_n_regs && at < errlen; i++)
            at += (size_t)snprintf(err + at, errlen - at, "|%s", dm_backend_regs[i].name);
        if (err && at < errlen) snprintf(err + at, errlen - at, ")");
        return NULL;
    }
    return r->create(device, err, errlen);
}

dm_backend *dm_backend_make(const dm_backend_reg *reg, int mem, const dm_backend_vt *vt,
                            void *priv, char *err, size_t errlen) {
    dm_backend *be = calloc(1, sizeof *be);
    if (!be) {
        if (err) snprintf(err, errlen, "out of memory creating the %s backend", reg->name);
        return NULL;
    }
    *be = (dm_backend){.name = reg->name, .kind = reg->kind, .mem = mem, .vt = vt, .priv = priv,
                       .impls = reg->impls};
    return be;
}

const char *dm_backend_choice(int kind, int device, char *buf, size_t n) {
    if (kind != DM_BACKEND_AUTO) snprintf(buf, n, "%s", "");
    else snprintf(buf, n, "backend: cpu (auto; not cuda: %s)", dm_backend_cuda_missing(device));
    return buf;
}

void dm_backend_free(dm_backend *be) {
    if (!be) return;
    free(be->clock);
    be->vt->destroy(be);
}

void *dm_backend_alloc(dm_backend *be, size_t bytes) { return be->vt->alloc(be, bytes); }
void dm_backend_release(dm_backend *be, void *p) {
    if (p) be->vt->release(be, p);
}
void dm_backend_to_host(dm_backend *be, void *host, const void *src, size_t bytes) {
    if (bytes) be->vt->to_host(be, host, src, bytes);
}
void dm_backend_from_host(dm_backend *be, void *dst, const void *host, size_t bytes) {
    if (bytes) be->vt->from_host(be, dst, host, bytes);
}
void dm_backend_copy(dm_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) be->vt->copy(be, dst, src, bytes);
}
void dm_backend_zero(dm_backend *be, void *p, size_t bytes) {
    if (bytes) be->vt->zero(be, p, bytes);
}
void dm_backend_sync(dm_backend *be) {
    if (be && be->vt->sync) be->vt->sync(be);
}
int dm_backend_marks(dm_backend *be, int n) {
    if (be->vt->marks) return be->vt->marks(be, n);
    if (n <= be->n_clock) return 0;
    double *c = realloc(be->clock, (size_t)n * sizeof *c);
    if (!c) return 1;
    be->clock = c;
    be->n_clock = n;
    return 0;
}
void dm_backend_mark(dm_backend *be, int i) {
    if (be->vt->mark) be->vt->mark(be, i);
    else if (i < be->n_clock) {
        dm_backend_sync(be);
        be->clock[i] = dm_now();
    }
}
double dm_backend_mark_ms(dm_backend *be, int a, int b) {
    if (be->vt->mark_ms) return be->vt->mark_ms(be, a, b);
    return a < be->n_clock && b < be->n_clock ? 1e3 * (be->clock[b] - be->clock[a]) : 0;
}
void dm_backend_read_begin(dm_backend *be, void *host, const void *src, size_t bytes) {
    if (be->vt->read_begin) be->vt->read_begin(be, host, src, bytes);
    else dm_backend_to_host(be, host, src, bytes);
}
void dm_backend_read_end(dm_backend *be) {
    if (be->vt->read_end) be->vt->read_end(be);
}
void dm_backend_put(dm_backend *be, void *dst, const void *host, size_t bytes) {
    if (!bytes) return;
    if (be->vt->put) be->vt->put(be, dst, host, bytes);
    else be->vt->from_host(be, dst, host, bytes);
}

int dm_backend_capture_begin(dm_backend *be) {
    return be->vt->capture_begin ? be->vt->capture_begin(be) : 1;
}
void *dm_backend_capture_end(dm_backend *be, char *why, size_t n) {
    if (be->vt->capture_end) return be->vt->capture_end(be, why, n);
    snprintf(why, n, "the %s backend has no graphs", be->name);
    return NULL;
}
int dm_backend_graph_launch(dm_backend *be, void *graph) {
    return be->vt->graph_launch ? be->vt->graph_launch(be, graph) : 1;
}
void dm_backend_graph_free(dm_backend *be, void *graph) {
    if (graph && be->vt->graph_free) be->vt->graph_free(be, graph);
}

void *dm_backend_host_view(dm_backend *be, void *p) {
    return be->vt->host_view ? be->vt->host_view(be, p) : NULL;
}

void *dm_backend_map(dm_backend *be, void *p, size_t bytes, int read) {
    void *v = dm_backend_host_view(be, p);
    if (v) return v;
    v = malloc(bytes ? bytes : 1);
    if (v && read) dm_backend_to_host(be, v, p, bytes);
    return v;
}

void dm_backend_unmap(dm_backend *be, void *p, void *host, size_t bytes, int write) {
    if (!host || host == dm_backend_host_view(be, p)) return;
    if (write) dm_backend_from_host(be, p, host, bytes);
    free(host);
}
