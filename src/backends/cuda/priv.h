/* priv.h — the cuda backend's private state (inside src/backends/cuda only). */
#ifndef DM_BACKENDS_CUDA_PRIV_H
#define DM_BACKENDS_CUDA_PRIV_H

#include <stddef.h>

#include "kernels/cuda/cuda.h"
#include "ops/backend.h"
#include "ops/copies.h"
#include "ops/ops.h"

#define DM_CUDA_PUT_OLD 8 /* staging set aside before a put waits (mem.c: cu_put) */

typedef struct {
    int device;
    dm_cuda_stream s;  /* every kernel, copy and zeroing of the backend runs on it */
    dm_cuda_blas *blas;
    double *dbl;       /* device doubles: the sum of squares' work (DM_CUDA_SUMSQ_BLOCKS) */
    double *slice_sq;  /* per-slice sums of squares of the sphere retraction */
    int slice_cap;
    float *losses;     /* cross-entropy's per-row losses when the caller wants none */
    size_t losses_cap;
    /* bf16 products (precision=bf16): the copies in the side room and the weights' copy
     * (ops/copies.h), the weights' copy's memory, a matmul backward's dout rounded once,
     * and operands rounded for a product (all device memory, grown on demand) */
    dm_copies copies;
    uint16_t *wts_b, *dbuf, *opnd[3];
    size_t wts_cap, dcap, opnd_cap[3];
    /* the step's marks (events) and its asynchronous read: page-locked staging, then the
     * caller's bytes at the read's end */
    dm_cuda_marks *marks;
    int n_marks;
    void *stage, *read_dst;
    size_t stage_cap, read_bytes;
    /* queued copies from the host (dm_backend_put): page-locked staging, used up to
     * put_used since the stream was last waited for */
    unsigned char *put_buf;
    size_t put_cap, put_used;
    /* staging outgrown since the last wait: freed once the stream is waited for (its
     * copies may still be reading it until then) */
    unsigned char *put_old[DM_CUDA_PUT_OLD];
    int n_put_old;
    int capturing; /* 1 between dm_backend_capture_begin and _end (mem.c) */
} dm_cuda_state;

/* a kernel's or the runtime's error code rc: a lost device context, as on a GPU: one line
 * naming what failed, then the process stops */
void dm_cuda_check(int rc, const char *what);

/* n bf16 values of device memory in *buf (of *cap), grown when short (the stream waited
 * for first: queued work may read the old buffer); 0 ok, else the runtime's error */
int dm_cuda_room(dm_cuda_state *st, uint16_t **buf, size_t *cap, size_t n);
/* 1 when the model's policy runs the matmuls on bf16 operands */
int dm_cuda_bf16_on(const struct dm_ops *ops);

/* the state of the backend the op layer is bound to */
static inline dm_cuda_state *dm_cuda_state_of(const struct dm_ops *ops) {
    return (dm_cuda_state *)ops->be->priv;
}

#endif
