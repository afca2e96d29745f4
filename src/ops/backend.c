/* backend.c — choosing a backend and the calls every backend answers (backend.h). */
#include "ops/backend.h"

#include <stdio.h>
#include <stdlib.h>

#include "dormouse.h"

const char *dm_backend_name(int kind) {
    switch (kind) {
    case DM_BACKEND_AUTO: /* auto: the CPU, the one compute backend there is */
    case DM_BACKEND_CPU: return "cpu";
    case DM_BACKEND_FENCED: return "fenced";
    case DM_BACKEND_CUDA: return "cuda";
    default: return NULL;
    }
}

dm_backend *dm_backend_create(int kind, int device, char *err, size_t errlen) {
    switch (kind) {
    case DM_BACKEND_AUTO:
    case DM_BACKEND_CPU: return dm_backend_cpu_create(err, errlen);
    case DM_BACKEND_FENCED: return dm_backend_fenced_create(err, errlen);
    case DM_BACKEND_CUDA: return dm_backend_cuda_create(device, err, errlen);
    default:
        if (err) snprintf(err, errlen, "backend: no backend %d (auto|cpu|fenced|cuda)", kind);
        return NULL;
    }
}

const char *dm_backend_choice(int kind, int device, char *buf, size_t n) {
    if (kind != DM_BACKEND_AUTO) snprintf(buf, n, "%s", "");
    else snprintf(buf, n, "backend: cpu (auto; not cuda: %s)", dm_backend_cuda_missing(device));
    return buf;
}

void dm_backend_free(dm_backend *be) {
    if (be) be->vt->destroy(be);
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
