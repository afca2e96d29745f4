/* buffer.h — the handle of a backend's memory (ops/backend.h, docs/backends.md).
 *
 * The ops take their float buffers as pointers to dm_bf, a float of a backend's memory
 * (ops.h, optim_ops.h), and the model and the optimizer hold theirs so: a handle to
 * offset (dm_bf is one float wide), to pass to the ops and to the backend's copies, which
 * the host cannot read as a float (it is a struct) and which host memory (float *) does
 * not become without saying so: passing a host array where the backend's memory is
 * expected does not compile (-Werror=incompatible-pointer-types). dm_bm() says so, for
 * the holders of host memory that the cpu backend takes as its own (tests of the ops, the
 * public delta core). Behind the op layer's entry points an implementation reads the
 * floats again (DM_RAW, ops/op.h): a backend knows its own memory. */
#ifndef DM_OPS_BUFFER_H
#define DM_OPS_BUFFER_H

typedef struct dm_bf {
    float in_backend_memory;
} dm_bf;

/* host floats as the cpu backend's memory */
#define dm_bm(p) _Generic((p), const float *: (const dm_bf *)(const void *)(p), \
                               float *: (dm_bf *)(void *)(p))

#endif
