/* policy.c — the cpu backend's execution policy (ops/policy.h), decided once when a model
 * is made: the thread pool (the config's threads, which a job sets to its share of the
 * machine; 0: all cores), set here with every thread flushing denormals
 * (dm_set_threads; dm_denormals_flushed reads the mode back), the GEMM engine
 * (oneDNN unless gemm=openblas or oneDNN cannot run here), the delta core's path for the
 * model's shape, the norms' kernels and the precision record (precision.c). */
#include <omp.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "ops/policy.h"

/* why oneDNN cannot run an f32 matmul here (NULL: it can): a context made and freed (the
 * op layer makes its own on its first matmul) */
static const char *onednn_missing(void) {
    const char *why = NULL;
    dm_onednn *d = dm_onednn_create(&why);
    if (!d) return why ? why : "oneDNN cannot make a context";
    why = dm_onednn_supports(d, 0, 1, 64, 64, 64, 64, 64, 64, 1.0f, 0.0f);
    dm_onednn_free(d);
    return why;
}

int dm_cpu_policy(dm_backend *be, const dm_config *c, dm_ops *ops, const dm_delta_dims *d,
                  dm_policy *p, char *err, size_t errlen) {
    /* a model's pool is set now; a plan of no model (be NULL) only counts it */
    int threads = be ? dm_set_threads(c->threads)
                     : c->threads > 0 ? c->threads : omp_get_num_procs();
    *p = (dm_policy){.backend = be ? be->name : "cpu", .threads = threads,
                     .ftz = dm_denormals_flushed(), .chunk = c->chunk_size};
    p->gemm = DM_GEMM_OPENBLAS;
    if (c->gemm != DM_GEMM_OPENBLAS) {
        p->gemm_why = onednn_missing();
        if (!p->gemm_why) p->gemm = DM_GEMM_ONEDNN;
    }
    const char *why = NULL;
    p->delta = dm_ops_delta_chunked(ops, d, &why) ? DM_IMPL_CHUNKED : DM_IMPL_REFERENCE;
    if (c->kda_impl != DM_IMPL_REFERENCE) p->delta_why = why;
    p->norm = c->norm_impl == DM_IMPL_REFERENCE ? DM_IMPL_REFERENCE : DM_IMPL_CHUNKED;
    /* where the CPU lacks bf16, DM_CPU_BF16_REFERENCE puts the reference bf16 path in its
     * place: the products bf16 allows run there (the hardware kernel still declines) */
    const char *hw_why = ops->bf16_why;
    int stand_in = hw_why && dm_cpu_bf16_reference();
    int rc = dm_precision_decide(&p->prec, c, stand_in ? NULL : hw_why, err, errlen);
    if (stand_in && p->prec.matmul_bf16)
        p->prec.matmul_via = "the reference bf16 path: DM_CPU_BF16_REFERENCE is set";
    return rc;
}

/* the pool of policy p again when another model's (or the caller) left another size */
void dm_cpu_apply(dm_backend *be, const dm_policy *p) {
    (void)be;
    if (omp_get_max_threads() != p->threads) dm_set_threads(p->threads);
}
