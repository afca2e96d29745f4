/* runtime.c — the device side of a build with CUDA, host code: the probe that says
 * whether a device can run the kernels and why not, and the memory and stream helpers a
 * backend allocates with. Plain C against the runtime's C API (cuda_runtime_api.h). Part
 * of the module libdormouse-cuda.so (entry.h) and of what test_cuda links directly. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda.h"

/* the oldest GPU this build's code runs on: the PTX is compute_80 (CMakeLists.txt) */
#define DM_CUDA_MIN_CC 80

/* the probe's formatted answers: this thread's, valid until its next call */
static _Thread_local char why_buf[256];

const char *dm_cuda_unavailable(int device) {
    int drv = 0, rt = 0, n = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0)
        return "no CUDA driver (libcuda.so not found: this machine has no NVIDIA driver)";
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) return "the CUDA runtime does not answer";
    if (drv < rt) {
        snprintf(why_buf, sizeof why_buf,
                 "the CUDA driver is too old: it supports CUDA %d.%d, this build's runtime "
                 "needs %d.%d",
                 drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        return why_buf;
    }
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) return "no CUDA device";
    if (e != cudaSuccess) {
        snprintf(why_buf, sizeof why_buf, "no usable CUDA device: %s", cudaGetErrorString(e));
        return why_buf;
    }
    if (device < 0 || device >= n) {
        snprintf(why_buf, sizeof why_buf, "CUDA device %d out of range (this machine has %d: 0..%d)",
                 device, n, n - 1);
        return why_buf;
    }
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
        return "the CUDA device does not answer";
    if (major * 10 + minor < DM_CUDA_MIN_CC) {
        snprintf(why_buf, sizeof why_buf,
                 "CUDA device %d has compute capability %d.%d: this build needs %d.%d or newer",
                 device, major, minor, DM_CUDA_MIN_CC / 10, DM_CUDA_MIN_CC % 10);
        return why_buf;
    }
    return NULL;
}

const char *dm_cuda_error(int err) {
    if (err == DM_CUDA_EBADSHAPE) return "a shape this kernel does not take";
    if (err <= DM_CUDA_EBLAS) return cublasLtGetStatusString((cublasStatus_t)(DM_CUDA_EBLAS - err));
    return cudaGetErrorString((cudaError_t)err);
}

void dm_cuda_device_name(int device, char *buf, size_t n) {
    const char *why = dm_cuda_unavailable(device);
    struct cudaDeviceProp p;
    if (!why && cudaGetDeviceProperties(&p, device) != cudaSuccess) why = "no properties";
    if (why) snprintf(buf, n, "%s", why);
    else
        snprintf(buf, n, "%s, cc %d.%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
                 p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30));
}

int dm_cuda_set_device(int device) { return (int)cudaSetDevice(device); }

int dm_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    return (int)cudaMemGetInfo(free_bytes, total_bytes);
}

int dm_cuda_malloc(void **p, size_t bytes) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) *p = NULL;
    return (int)e;
}

int dm_cuda_free(void *p) { return p ? (int)cudaFree(p) : 0; }

int dm_cuda_upload(void *dst, const void *host_src, size_t bytes, dm_cuda_stream s) {
    return (int)cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s);
}

int dm_cuda_download(void *host_dst, const void *src, size_t bytes, dm_cuda_stream s) {
    cudaError_t e = cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s);
    return (int)(e != cudaSuccess ? e : cudaStreamSynchronize(s)); /* the host reads it next */
}

int dm_cuda_download_async(void *host_dst, const void *src, size_t bytes, dm_cuda_stream s) {
    return (int)cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s);
}

int dm_cuda_host_alloc(void **p, size_t bytes) {
    *p = NULL;
    cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
    if (e != cudaSuccess) *p = NULL;
    return (int)e;
}

int dm_cuda_host_free(void *p) { return p ? (int)cudaFreeHost(p) : 0; }

int dm_cuda_copy(void *dst, const void *src, size_t bytes, dm_cuda_stream s) {
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
}

int dm_cuda_zero(void *p, size_t bytes, dm_cuda_stream s) {
    return (int)cudaMemsetAsync(p, 0, bytes, s);
}

int dm_cuda_fill_bytes(void *p, int byte, size_t bytes, dm_cuda_stream s) {
    return (int)cudaMemsetAsync(p, byte, bytes, s);
}

int dm_cuda_sync(dm_cuda_stream s) {
    cudaError_t e = cudaStreamSynchronize(s);
    return (int)(e != cudaSuccess ? e : cudaGetLastError());
}

int dm_cuda_stream_create(dm_cuda_stream *s) {
    cudaStream_t st = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = e == cudaSuccess ? st : NULL;
    return (int)e;
}

int dm_cuda_stream_destroy(dm_cuda_stream s) { return s ? (int)cudaStreamDestroy(s) : 0; }

struct dm_cuda_timer {
    cudaEvent_t a, b;
};

int dm_cuda_timer_create(dm_cuda_timer **t) {
    *t = calloc(1, sizeof **t);
    if (!*t) return (int)cudaErrorMemoryAllocation;
    cudaError_t e = cudaEventCreate(&(*t)->a);
    if (e == cudaSuccess) e = cudaEventCreate(&(*t)->b);
    if (e != cudaSuccess) {
        dm_cuda_timer_free(*t);
        *t = NULL;
    }
    return (int)e;
}

void dm_cuda_timer_free(dm_cuda_timer *t) {
    if (!t) return;
    if (t->a) cudaEventDestroy(t->a);
    if (t->b) cudaEventDestroy(t->b);
    free(t);
}

int dm_cuda_timer_start(dm_cuda_timer *t, dm_cuda_stream s) { return (int)cudaEventRecord(t->a, s); }
int dm_cuda_timer_stop(dm_cuda_timer *t, dm_cuda_stream s) { return (int)cudaEventRecord(t->b, s); }

int dm_cuda_timer_ms(dm_cuda_timer *t, float *ms) {
    cudaError_t e = cudaEventSynchronize(t->b);
    return (int)(e != cudaSuccess ? e : cudaEventElapsedTime(ms, t->a, t->b));
}

struct dm_cuda_marks {
    int n;
    cudaEvent_t e[];
};

int dm_cuda_marks_create(dm_cuda_marks **m, int n) {
    *m = calloc(1, sizeof **m + (size_t)n * sizeof(cudaEvent_t));
    if (!*m) return (int)cudaErrorMemoryAllocation;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < n && e == cudaSuccess; i++, (*m)->n++) e = cudaEventCreate(&(*m)->e[i]);
    if (e != cudaSuccess) {
        dm_cuda_marks_free(*m);
        *m = NULL;
    }
    return (int)e;
}

void dm_cuda_marks_free(dm_cuda_marks *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++)
        if (m->e[i]) cudaEventDestroy(m->e[i]);
    free(m);
}

int dm_cuda_mark(dm_cuda_marks *m, int i, dm_cuda_stream s) {
    return (int)cudaEventRecord(m->e[i], s);
}

int dm_cuda_marks_ms(dm_cuda_marks *m, int a, int b, float *ms) {
    return (int)cudaEventElapsedTime(ms, m->e[a], m->e[b]); /* cudaErrorNotReady before */
}

struct dm_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

int dm_cuda_capture_begin(dm_cuda_stream s) {
    /* ThreadLocal: this thread's unsafe calls (a synchronous copy, say) fail the capture;
     * other threads' do not */
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) (void)cudaGetLastError(); /* returned here, as capture_end's */
    return (int)e;
}

int dm_cuda_capture_end(dm_cuda_stream s, dm_cuda_graph **g) {
    *g = NULL;
    dm_cuda_graph *r = calloc(1, sizeof *r);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (!r) {
        if (graph) cudaGraphDestroy(graph);
        return (int)cudaErrorMemoryAllocation;
    }
    if (e == cudaSuccess) {
        r->graph = graph;
        e = cudaGraphInstantiate(&r->exec, graph, 0);
    }
    if (e != cudaSuccess) {
        dm_cuda_graph_free(r);
        (void)cudaGetLastError(); /* the capture's error is returned here, not left for the
                                     next launch's check to find */
        return (int)e;
    }
    *g = r;
    return 0;
}

int dm_cuda_graph_launch(dm_cuda_graph *g, dm_cuda_stream s) {
    return (int)cudaGraphLaunch(g->exec, s);
}

void dm_cuda_graph_free(dm_cuda_graph *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}
