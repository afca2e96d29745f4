/* precision.h — the precision record: whether a model's bf16 products are active, for its
 * matrix products and for Muon's Newton–Schulz, decided once when the model is made
 * (dm_model_create), by its backend as part of the execution policy (ops/policy.h; the
 * cpu's dm_precision_decide in backends/cpu/precision.c) from `precision`, `ns_precision`,
 * the CPU's bf16 and oneDNN, with the reason when they are not. The model (its bf16 weight
 * copy), the plan (the arena's bf16 copies), the memory report, the op layer, Muon, bench
 * and the summary read this record; none decides again. docs/bf16.md says what the bf16
 * products round. */
#ifndef DM_PRECISION_H
#define DM_PRECISION_H

#include <stddef.h>

#include "dormouse.h"

typedef struct dm_precision {
    int matmul_bf16;        /* the model's matrix products take bf16 operands */
    int ns_bf16;            /* Muon's Newton-Schulz products do */
    const char *why;        /* why the CPU's bf16 is not used (NULL: it has it) */
    const char *matmul_why; /* why the matmuls stay fp32 although precision allows bf16
                               (NULL when they do not, or when precision=fp32) */
    const char *ns_why;     /* why Newton-Schulz stays fp32 although ns_precision allows
                               bf16 (NULL when it does not, or when ns_precision=fp32) */
    const char *matmul_via; /* bf16 matmuls on a stand-in for the CPU's bf16 kernels (the
                               cpu's reference bf16 path), named; NULL: on the kernels */
} dm_precision;

/* The rule of the matrix products: bf16 unless precision=fp32 or the CPU lacks bf16
 * (cpu_why). The record and the op layer (dm_ops_bf16_active) both apply it. */
static inline int dm_precision_matmul(int precision, const char *cpu_why) {
    return precision != DM_PRECISION_FP32 && !cpu_why;
}

/* The record of config c on a CPU whose bf16 is missing for the reason cpu_why (NULL: it
 * has it; dm_cpu_bf16_missing(), or a pretended reason in tests). 0; or 1 with the
 * one-line refusal in err when precision=bf16, or ns_precision=bf16 under Muon, asks for
 * bf16 products this machine cannot run (the record is filled either way). */
int dm_precision_decide(dm_precision *p, const dm_config *c, const char *cpu_why, char *err,
                        size_t errlen);

/* The record in one line, as bench and the run's summary print it: "matmuls bf16,
 * Newton-Schulz fp32 (reason)" and the like; the reason is the CPU's when the matmuls stay
 * fp32 although precision allowed bf16, else Newton-Schulz's. */
void dm_precision_describe(const dm_precision *p, char *buf, size_t n);

#endif
