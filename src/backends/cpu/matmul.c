/* matmul.c — the cpu backend's dense layer (ops/matmul.c defines the op): in bf16
 * (precision=bf16: operands rounded to bf16, f32 accumulation) oneDNN's bf16 matmul and its
 * reference (the rounded operands through the f32 GEMM); in fp32 oneDNN's matmul and
 * OpenBLAS (dm_gemm), before the op's double-precision reference. The `gemm` setting:
 * openblas, onednn (OpenBLAS where oneDNN declines), or auto (the measured rule below).
 * The bf16 kernels read the operands' bf16 copies where the op layer holds them
 * (copies.c). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/ctx.h"
#include "ops/matmul.h"
#include "ops/op.h"
#include "ops/policy.h"

/* The GEMM a direction runs: C[M,Nc] = op(A) op(B) (+ C when beta) */
typedef struct { int ta, tb, M, Nc, K, lda, ldb, ldc; float beta; } mm_gemm;
static mm_gemm product(const dm_matmul_args *a, int dir) {
    if (dir == DM_FWD) return (mm_gemm){0, 1, a->N, a->O, a->K, a->K, a->K, a->O, 0.0f};
    if (dir == DM_BWD)
        return (mm_gemm){0, 0, a->N, a->K, a->O, a->O, a->K, a->K, a->din_acc ? 1.0f : 0.0f};
    return (mm_gemm){1, 0, a->O, a->K, a->N, a->O, a->K, a->K, 1.0f};
}

/* ---- oneDNN ---- */

static const char *onednn_selected(const dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    if (ops->gemm == DM_GEMM_OPENBLAS) return "gemm=openblas";
    return NULL;
}

/* the op layer's oneDNN context, made on first use (NULL: why, in c->onednn_why) */
static struct dm_onednn *onednn_of(dm_cpu_ctx *c) {
    if (!c->onednn && !c->onednn_why) c->onednn = dm_onednn_create(&c->onednn_why);
    return c->onednn;
}

static const char *onednn_supports(dm_ops *ops, const void *args, int dir) {
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (!onednn_of(c)) return c->onednn_why;
    mm_gemm g = product(args, dir);
    return dm_onednn_supports(c->onednn, g.ta, g.tb, g.M, g.Nc, g.K, g.lda, g.ldb, g.ldc,
                              1.0f, g.beta);
}

static void run_be(const dm_gemm_be *be, dm_matmul_args *a, int dir) {
    if (dir == DM_FWD) dm_matmul_fwd(be, a->out, a->in, a->W, a->bias, a->N, a->K, a->O);
    else if (dir == DM_BWD) dm_matmul_bwd_data(be, a->din, a->dout, a->W, a->N, a->K, a->O, a->din_acc);
    else dm_matmul_bwd_weight(be, a->dW, a->dbias, a->dout, a->in, a->N, a->K, a->O);
}

static void onednn_run(dm_ops *ops, void *args, int dir) {
    dm_gemm_be be = {dm_onednn_gemm, dm_cpu_ctx_of(ops)->onednn};
    run_be(&be, args, dir);
}

/* ---- bf16 products: operands rounded to bf16, f32 accumulation and outputs ---- */

/* n bf16 values of x: its copy (dm_copies_of), else rounded now into *scratch (advanced past
 * them) */
static const uint16_t *as_bf16(const dm_cpu_ctx *c, const float *x, size_t n,
                               uint16_t **scratch) {
    const uint16_t *xb = dm_copies_of(&c->copies, x, n);
    if (xb) return xb;
    uint16_t *p = *scratch;
    dm_bf16_from_f32(p, x, n);
    *scratch += (n + 31) & ~(size_t)31;
    return p;
}

/* operand scratch: room for the operands a direction may round, as f32 (the reference
 * bf16 path) or bf16 (half of it) */
static void *operand_scratch(dm_cpu_ctx *c, const dm_matmul_args *a, int dir) {
    size_t N = (size_t)a->N, K = (size_t)a->K, O = (size_t)a->O;
    size_t need = (dir == DM_FWD ? N * K + O * K : dir == DM_BWD ? N * O + O * K : N * O + N * K);
    need = (need + 128) * sizeof(float);
    if (need > c->bcap) {
        void *p = realloc(c->bbuf, need);
        if (!p) return NULL;
        c->bbuf = p;
        c->bcap = need;
    }
    return c->bbuf;
}

static const char *bf16_supports(dm_ops *ops, const void *args, int dir) {
    if (ops->bf16_why) return ops->bf16_why;
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    if (!operand_scratch(c, args, dir)) return "out of memory for bf16 operands";
    if (!onednn_of(c)) return c->onednn_why;
    mm_gemm g = product(args, dir);
    return dm_onednn_supports_bf16(c->onednn, g.ta, g.tb, g.M, g.Nc, g.K, g.lda, g.ldb, g.ldc,
                                   1.0f, g.beta);
}

static void bf16_run(dm_ops *ops, void *args, int dir) {
    dm_matmul_args *a = args;
    dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    uint16_t *s = c->bbuf;
    size_t N = (size_t)a->N, K = (size_t)a->K, O = (size_t)a->O;
    mm_gemm g = product(a, dir);
    if (dir == DM_FWD) {
        if (a->N > 0 && a->O > 0 && a->K > 0) {
            const uint16_t *in = as_bf16(c, a->in, N * K, &s), *W = as_bf16(c, a->W, O * K, &s);
            dm_onednn_gemm_bf16(c->onednn, 0, 1, g.M, g.Nc, g.K, 1.0f, in, g.lda, W, g.ldb,
                                g.beta, a->out, g.ldc);
        }
        if (a->N > 0 && a->O > 0) dm_matmul_bias(a->out, a->bias, a->N, a->K, a->O);
    } else if (dir == DM_BWD) {
        const uint16_t *dout = as_bf16(c, a->dout, N * O, &s), *W = as_bf16(c, a->W, O * K, &s);
        dm_onednn_gemm_bf16(c->onednn, 0, 0, g.M, g.Nc, g.K, 1.0f, dout, g.lda, W, g.ldb,
                            g.beta, a->din, g.ldc);
    } else {
        const uint16_t *dout = as_bf16(c, a->dout, N * O, &s), *in = as_bf16(c, a->in, N * K, &s);
        dm_onednn_gemm_bf16(c->onednn, 1, 0, g.M, g.Nc, g.K, 1.0f, dout, g.lda, in, g.ldb,
                            g.beta, a->dW, g.ldc);
        if (a->dbias) dm_matmul_bias_grad(a->dbias, a->dout, a->N, a->O);
    }
}

/* the reference bf16 path: the operands rounded to bf16 values (kept in f32), then the f32
 * products of OpenBLAS (each product of two bf16 values is exact in f32). Where it stands
 * in for the kernel (the policy's matmul_via: DM_CPU_BF16_REFERENCE), an operand with a
 * copy (dm_copies_of) is read from it, as the kernel reads it, so a copy that is not
 * bf16 of its tensor changes the result; as the kernel's oracle it rounds every operand
 * itself. */
static const float *rounded(const dm_cpu_ctx *c, const float *x, size_t n, int copies,
                            float **scratch) {
    float *p = *scratch;
    const uint16_t *xb = copies ? dm_copies_of(&c->copies, x, n) : NULL;
    if (xb)
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)xb[i] << 16;
            memcpy(p + i, &u, sizeof u);
        }
    else dm_bf16_round(p, x, n);
    *scratch += (n + 15) & ~(size_t)15;
    return p;
}

static const char *ref_bf16_supports(dm_ops *ops, const void *args, int dir) {
    return operand_scratch(dm_cpu_ctx_of(ops), args, dir) ? NULL : "out of memory for bf16 operands";
}

static void ref_bf16_run(dm_ops *ops, void *args, int dir) {
    dm_matmul_args *a = args;
    const dm_cpu_ctx *c = dm_cpu_ctx_of(ops);
    int copies = ops->policy && ops->policy->prec.matmul_via; /* standing in */
    float *s = c->bbuf;
    size_t N = (size_t)a->N, K = (size_t)a->K, O = (size_t)a->O;
    if (dir == DM_FWD) {
        const float *in = rounded(c, a->in, N * K, copies, &s);
        const float *W = rounded(c, a->W, O * K, copies, &s);
        dm_matmul_fwd(NULL, a->out, in, W, a->bias, a->N, a->K, a->O);
    } else if (dir == DM_BWD) {
        const float *dout = rounded(c, a->dout, N * O, copies, &s);
        const float *W = rounded(c, a->W, O * K, copies, &s);
        dm_matmul_bwd_data(NULL, a->din, dout, W, a->N, a->K, a->O, a->din_acc);
    } else {
        const float *dout = rounded(c, a->dout, N * O, copies, &s);
        const float *in = rounded(c, a->in, N * K, copies, &s);
        dm_matmul_bwd_weight(NULL, a->dW, NULL, dout, in, a->N, a->K, a->O);
        if (a->dbias && a->N > 0 && a->O > 0) dm_matmul_bias_grad(a->dbias, a->dout, a->N, a->O);
    }
}

const char *dm_cpu_matmul_bf16_supports(dm_ops *ops, const dm_matmul_args *a, int dir,
                                        int hw) {
    return hw ? bf16_supports(ops, a, dir) : ref_bf16_supports(ops, a, dir);
}
void dm_cpu_matmul_bf16_run(dm_ops *ops, dm_matmul_args *a, int dir, int hw) {
    if (hw) bf16_run(ops, a, dir);
    else ref_bf16_run(ops, a, dir);
}

/* ---- OpenBLAS ---- */

static void openblas_run(dm_ops *ops, void *args, int dir) {
    (void)ops;
    run_be(NULL, args, dir);
}

/* ---- the roofline's record (ops/atlas.h): the product a call ran and on which kernel ---- */

static void noted(dm_ops *ops, void (*run)(dm_ops *, void *, int), int kind, void *args,
                  int dir) {
    if (!ops->atlas) {
        run(ops, args, dir);
        return;
    }
    static const char *const LABEL[DM_NDIR] = {"matmul.fwd", "matmul.bwd", "matmul.bwd_w"};
    double t0 = dm_now();
    run(ops, args, dir);
    mm_gemm g = product(args, dir);
    if (g.M <= 0 || g.Nc <= 0 || g.K <= 0) return;
    dm_atlas_gemm s = {.label = LABEL[dir], .kind = kind, .n = 1, .reps = 1, .slices = 1,
                       .tiled = 1, .prod = {{g.ta, g.tb, g.M, g.Nc, g.K, g.beta != 0.0f}}};
    dm_atlas_gemm_add(ops->atlas, &s, dm_now() - t0);
}
static void bf16_noted(dm_ops *o, void *a, int d) {
    noted(o, bf16_run, DM_GEMM_BF16_ONEDNN, a, d);
}
static void ref_bf16_noted(dm_ops *o, void *a, int d) {
    noted(o, ref_bf16_run, DM_GEMM_F32_OPENBLAS, a, d);
}
static void onednn_noted(dm_ops *o, void *a, int d) {
    noted(o, onednn_run, DM_GEMM_F32_ONEDNN, a, d);
}
static void openblas_noted(dm_ops *o, void *a, int d) {
    noted(o, openblas_run, DM_GEMM_F32_OPENBLAS, a, d);
}

static const dm_impl IMPL[] = {
    {"onednn-bf16", 0, DM_PREC_BF16, NULL, bf16_supports, bf16_noted, DM_MEM_HOST},
    {"reference-bf16", 1, DM_PREC_BF16, NULL, ref_bf16_supports, ref_bf16_noted, DM_MEM_HOST},
    {"onednn", 0, DM_PREC_FP32, onednn_selected, onednn_supports, onednn_noted, DM_MEM_HOST},
    {"openblas", 0, DM_PREC_FP32, NULL, NULL, openblas_noted, DM_MEM_HOST},
};
const dm_impl_list dm_cpu_matmul = DM_IMPL_LIST(IMPL);
