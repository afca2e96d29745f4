/* policy.h — the execution policy of a model: how its ops run, decided once when the model
 * is made (dm_model_create) by its backend (dm_backend_vt.policy) from the machine and the
 * config, then only read: the op layer, the model, Muon, the run's header (its policy:
 * line) and its summary.json ("policy") read this record; none decides again. */
#ifndef DM_POLICY_H
#define DM_POLICY_H

#include <stddef.h>

#include "ops/precision.h"

typedef struct dm_policy {
    const char *backend;   /* the backend that decided it ("cpu") */
    int threads;           /* the thread pool the ops run on */
    int ftz;               /* 1: the pool's threads flush denormals to zero (FTZ and DAZ) */
    int gemm;              /* the fp32 matmuls' engine: DM_GEMM_ONEDNN (where it takes a
                              call; OpenBLAS where it declines) or DM_GEMM_OPENBLAS */
    const char *gemm_why;  /* why not oneDNN although gemm allowed it (NULL: none) */
    int delta;             /* the delta core's path for this model: DM_IMPL_CHUNKED or
                              DM_IMPL_REFERENCE */
    const char *delta_why; /* why the reference although kda_impl allowed chunked */
    const char *delta_how; /* how the chunked path runs, where the backend says (NULL) */
    int chunk;             /* the chunked path's chunk size */
    int norm;              /* the RMSNorms: DM_IMPL_CHUNKED (fused) or DM_IMPL_REFERENCE */
    dm_precision prec;     /* precision per op family: matmuls, Newton-Schulz */
} dm_policy;

/* One line for a run's header: "cpu, 2 threads, FTZ off, gemm onednn, delta chunked
 * (chunk 32), norms fused, matmuls fp32, Newton-Schulz fp32 (...)". */
void dm_policy_describe(const dm_policy *p, char *buf, size_t n);
/* The record as one JSON object (a line with its newline), for the run directory's
 * summary.json. */
void dm_policy_json(const dm_policy *p, char *buf, size_t n);

#endif
