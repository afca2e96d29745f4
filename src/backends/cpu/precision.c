/* precision.c — the precision record (ops/precision.h); the cpu backend's (src/backends/cpu/):
 * it asks the CPU and oneDNN */
#include "ops/precision.h"

#include <stdio.h>

#include "backends/cpu/kernels/onednn.h"

/* why oneDNN cannot run Newton-Schulz's bf16 products here (NULL: it can): a context and
 * one bf16 matmul of NS's kind, made and freed */
static const char *ns_library_missing(void) {
    const char *why = NULL;
    dm_onednn *d = dm_onednn_create(&why);
    if (!d) return why ? why : "oneDNN cannot make a context";
    if (dm_onednn_supports_bf16(d, 0, 1, 64, 64, 64, 64, 64, 64, 1.0f, 0.0f))
        why = "oneDNN has no bf16 matmul on this CPU";
    dm_onednn_free(d);
    return why;
}

static int refuse(const char *key, const char *why, char *err, size_t errlen) {
    if (err) snprintf(err, errlen, "%s=bf16: %s; use %s=auto or fp32", key, why, key);
    return 1;
}

int dm_precision_decide(dm_precision *p, const dm_config *c, const char *cpu_why, char *err,
                        size_t errlen) {
    p->why = cpu_why;
    p->matmul_why = c->precision != DM_PRECISION_FP32 ? cpu_why : NULL;
    p->matmul_bf16 = dm_precision_matmul(c->precision, cpu_why);
    p->ns_bf16 = 0;
    p->ns_why = NULL;
    if (c->optimizer == DM_OPT_MUON && c->ns_precision != DM_PRECISION_FP32) {
        p->ns_why = cpu_why ? cpu_why : ns_library_missing();
        p->ns_bf16 = !p->ns_why;
    }
    if (c->precision == DM_PRECISION_BF16 && cpu_why)
        return refuse("precision", cpu_why, err, errlen);
    if (c->ns_precision == DM_PRECISION_BF16 && p->ns_why)
        return refuse("ns_precision", p->ns_why, err, errlen);
    return 0;
}
