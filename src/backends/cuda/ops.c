/* ops.c — the cuda backend's implementations of the ops (ops/oplist.h) over the CUDA
 * kernels (src/kernels/cuda, their cuda.h), on device memory (DM_MEM_CUDA), every kernel
 * on the backend's stream; in fp32, and the products (matmul, the fused head, Newton-Schulz)
 * also on bf16 operands where the policy asks (their copies: mem.c). A call a kernel does
 * not take (one Newton-Schulz step at a time, the Stiefel retraction, the gradient mean of
 * several micro-batches) is declined by supports() with the reason, which the dispatch
 * counts; with nothing else of the backend's memory kind, it stops the process rather than
 * run on the host. Nothing here waits for the stream: the cross-entropy's mean loss, the
 * gradient norm and the clipping factor stay in device memory, where the updates read
 * the factor and the step's end reads the loss and the norm. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cuda/cuda.h"
#include "backends/cuda/priv.h"
#include "ops/delta.h"
#include "ops/matmul.h"
#include "ops/norms.h"
#include "ops/ns.h"
#include "ops/pointwise.h"
#include "ops/seq.h"
#include "ops/update.h"
#include "ref/ns_sched.h"

#define ST(ops) dm_cuda_state_of(ops)
#define S(ops) (ST(ops)->s)
#define CHECK(call, what) dm_cuda_check((call), (what))
#define IMPL(name, sup, run) {name, 0, DM_PREC_FP32, NULL, sup, run, DM_MEM_CUDA}

/* a copy of n floats from src to dst on the stream when they differ (the updates' in-place
 * kernels, given outputs of their own in verify mode) */
static void same(dm_ops *ops, float *dst, const float *src, size_t n) {
    if (dst != src && n) CHECK(dm_cuda_copy(dst, src, n * sizeof(float), S(ops)), "a copy");
}

/* ---- the model's ops ---- */

/* bf16 of x[n] for a product: its copy (the side room's, the weights'), else rounded now
 * into operand scratch `slot` (0, 1: a product's two operands; 2: the fused head's W) */
static const uint16_t *operand(dm_ops *ops, const float *x, size_t n, int slot) {
    dm_cuda_state *st = ST(ops);
    const uint16_t *xb = dm_copies_of(&st->copies, x, n);
    if (xb || !n) return xb;
    CHECK(dm_cuda_room(st, &st->opnd[slot], &st->opnd_cap[slot], n), "bf16 operand scratch");
    CHECK(dm_cuda_bf16_from_f32(st->opnd[slot], x, n, S(ops)), "rounding an operand");
    return st->opnd[slot];
}

/* the dense layer on cuBLASLt: fp32 (bf16 0), or bf16 operands accumulated in f32 */
static void matmul_run(dm_ops *ops, dm_matmul_args *a, int dir, int bf16) {
    dm_cuda_blas *b = ST(ops)->blas;
    size_t N = (size_t)a->N, K = (size_t)a->K, O = (size_t)a->O;
    if (dir == DM_FWD) {
        const void *in = bf16 ? (const void *)operand(ops, a->in, N * K, 0) : a->in;
        const void *W = bf16 ? (const void *)operand(ops, a->W, O * K, 1) : a->W;
        CHECK(dm_cuda_matmul_fwd(b, bf16, a->out, in, W, a->bias, a->N, a->K, a->O, S(ops)),
              "matmul fwd");
    } else if (dir == DM_BWD) {
        const void *dout = bf16 ? (const void *)operand(ops, a->dout, N * O, 0) : a->dout;
        const void *W = bf16 ? (const void *)operand(ops, a->W, O * K, 1) : a->W;
        CHECK(dm_cuda_matmul_bwd_data(b, bf16, a->din, dout, W, a->N, a->K, a->O, a->din_acc,
                                      S(ops)),
              "matmul bwd");
    } else {
        const void *dout = bf16 ? (const void *)operand(ops, a->dout, N * O, 0) : a->dout;
        const void *in = bf16 ? (const void *)operand(ops, a->in, N * K, 1) : a->in;
        CHECK(dm_cuda_matmul_bwd_weight(b, bf16, a->dW, a->dbias, dout, a->dout, in, a->N, a->K,
                                        a->O, S(ops)),
              "matmul bwd_w");
    }
}
static void matmul_cu(dm_ops *ops, void *args, int dir) { matmul_run(ops, args, dir, 0); }
static void matmul_bf16_cu(dm_ops *ops, void *args, int dir) { matmul_run(ops, args, dir, 1); }
/* the bf16 products: where the model's policy asks for them (precision=bf16) */
static const char *bf16_supports(dm_ops *ops, const void *args, int dir) {
    (void)args, (void)dir;
    return dm_cuda_bf16_on(ops) ? NULL : "the policy's matmuls are fp32 (precision=bf16 asks)";
}

static void embed_cu(dm_ops *ops, void *args, int dir) {
    dm_embed_args *a = args;
    if (dir == DM_FWD)
        CHECK(dm_cuda_embed_fwd(a->out, a->tok, a->w, a->table, a->N, a->C, S(ops)), "embed fwd");
    else
        CHECK(dm_cuda_embed_bwd(a->dtable, a->dout, a->tok, a->w, a->N, a->C,
                                a->V ? a->V : DM_VOCAB, S(ops)),
              "embed bwd");
}

static void norm_cu(dm_ops *ops, void *args, int dir) {
    dm_norm_args *a = args;
    if (a->z && dir == DM_FWD)
        CHECK(dm_cuda_gatednorm_fwd(a->y, a->rstd, a->x, a->z, a->w, a->R, a->C, a->eps, a->act,
                                    S(ops)),
              "gatednorm fwd");
    else if (a->z)
        CHECK(dm_cuda_gatednorm_bwd(a->dx, a->dz, a->dw, a->dy, a->x, a->z, a->w, a->rstd_in,
                                    a->R, a->C, a->act, S(ops)),
              "gatednorm bwd");
    else if (dir == DM_FWD)
        CHECK(dm_cuda_rmsnorm_fwd(a->y, a->rstd, a->x, a->w, a->R, a->C, a->eps, S(ops)),
              "rmsnorm fwd");
    else
        CHECK(dm_cuda_rmsnorm_bwd(a->dx, a->dw, a->dy, a->x, a->w, a->rstd_in, a->R, a->C,
                                  S(ops)),
              "rmsnorm bwd");
}
static void l2_cu(dm_ops *ops, void *args, int dir) {
    dm_norm_args *a = args;
    if (dir == DM_FWD && a->act)
        CHECK(dm_cuda_silu_l2norm_fwd(a->y, a->rstd, a->x, a->R, a->C, a->eps, S(ops)),
              "silu_l2norm fwd");
    else if (dir == DM_FWD)
        CHECK(dm_cuda_l2norm_fwd(a->y, a->rstd, a->x, a->R, a->C, a->eps, S(ops)), "l2norm fwd");
    else if (a->xs)
        CHECK(dm_cuda_silu_l2norm_bwd(a->dx, a->dy, a->x, a->rstd_in, a->xs, a->R, a->C, S(ops)),
              "silu_l2norm bwd");
    else CHECK(dm_cuda_l2norm_bwd(a->dx, a->dy, a->x, a->rstd_in, a->R, a->C, S(ops)), "l2norm bwd");
}

static void conv_cu(dm_ops *ops, void *args, int dir) {
    dm_conv_args *a = args;
    if (dir == DM_FWD)
        CHECK(dm_cuda_conv_fwd(a->y, a->x, a->w, a->B, a->T, a->C, a->W, S(ops)), "conv fwd");
    else
        CHECK(dm_cuda_conv_bwd(a->dx, a->dw, a->dy, a->x, a->w, a->B, a->T, a->C, a->W, S(ops)),
              "conv bwd");
}

static void silu_cu(dm_ops *ops, void *args, int dir) {
    dm_unary_args *a = args;
    if (dir == DM_FWD) CHECK(dm_cuda_silu_fwd(a->y, a->x, a->n, S(ops)), "silu fwd");
    else CHECK(dm_cuda_silu_bwd(a->dx, a->dy, a->x, a->n, S(ops)), "silu bwd");
}
static void sigmoid_cu(dm_ops *ops, void *args, int dir) {
    dm_unary_args *a = args; /* backward: x holds the forward's output */
    if (dir == DM_FWD) CHECK(dm_cuda_sigmoid_fwd(a->y, a->x, a->n, S(ops)), "sigmoid fwd");
    else CHECK(dm_cuda_sigmoid_bwd(a->dx, a->dy, a->x, a->n, S(ops)), "sigmoid bwd");
}

static void swiglu_cu(dm_ops *ops, void *args, int dir) {
    dm_swiglu_args *a = args;
    if (dir == DM_FWD) CHECK(dm_cuda_swiglu_fwd(a->h, a->a, a->b, a->n, S(ops)), "swiglu fwd");
    else
        CHECK(dm_cuda_swiglu_bwd(a->da, a->db, a->dh, a->a, a->b, a->n, S(ops)), "swiglu bwd");
}

static void gate_cu(dm_ops *ops, void *args, int dir) {
    dm_gate_args *a = args;
    if (dir == DM_FWD)
        CHECK(dm_cuda_gate_fwd(a->g, a->f, a->A_log, a->dt_bias, a->N, a->H, a->Cg, a->lb,
                               S(ops)),
              "gate fwd");
    else
        CHECK(dm_cuda_gate_bwd(a->df, a->dA_log, a->ddt_bias, a->dg, a->f, a->A_log, a->dt_bias,
                               a->N, a->H, a->Cg, a->lb, S(ops)),
              "gate bwd");
}

static void add_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_add_args *a = args;
    CHECK(dm_cuda_add_inplace(a->y, a->x, a->n, S(ops)), "add");
}

/* the per-row losses of a forward: the caller's, else the backend's own (grown to N) */
static float *losses_of(dm_ops *ops, float *losses, int N) {
    dm_cuda_state *st = ST(ops);
    if (losses) return losses;
    if (st->losses_cap < (size_t)N) {
        dm_cuda_free(st->losses);
        st->losses = NULL;
        CHECK(dm_cuda_malloc((void **)&st->losses, (size_t)N * sizeof(float)),
              "the cross-entropy's losses");
        st->losses_cap = (size_t)N;
    }
    return st->losses;
}
/* forward: the losses and their mean into a double of device memory */
static void xent_cu(dm_ops *ops, void *args, int dir) {
    dm_xent_args *a = args;
    if (dir != DM_FWD) {
        CHECK(dm_cuda_xent_bwd(a->dlogits, a->logits, a->targets, a->w, a->N, a->V, a->scale,
                               S(ops)),
              "xent bwd");
        return;
    }
    CHECK(dm_cuda_xent_fwd(losses_of(ops, a->losses, a->N), a->mean, a->logits, a->targets, a->w,
                           a->N, a->V, S(ops)),
          "xent fwd");
}
/* the head and the cross-entropy over rows in chunks of R, each chunk's logits made in
 * work[R,V] by cuBLASLt (and made again in the backward): forward, the chunk's losses,
 * then the mean of all N; backward, dlogits in place of the logits, then dx = dlogits W
 * and dW += dlogits^T x. bf16: each product on bf16 operands (x's rows from the final
 * norm's copy, W from the weights' copy, the chunk's dlogits rounded once for both) */
static void head_xent_run(dm_ops *ops, dm_head_xent_args *a, int dir, int bf16) {
    dm_cuda_blas *b = ST(ops)->blas;
    float *losses = dir == DM_FWD ? losses_of(ops, a->losses, a->N) : NULL;
    size_t wid = (size_t)(a->w ? a->w : 1), D = (size_t)a->D, V = (size_t)a->V;
    const void *W = bf16 ? (const void *)operand(ops, a->W, V * D, 2) : a->W;
    for (int r0 = 0; r0 < a->N; r0 += a->R) {
        int n = a->N - r0 < a->R ? a->N - r0 : a->R;
        const float *xf = a->x + (size_t)r0 * D;
        const void *t = (const char *)a->targets + (size_t)r0 * wid;
        const void *x = bf16 ? (const void *)operand(ops, xf, (size_t)n * D, 0) : xf;
        CHECK(dm_cuda_matmul_fwd(b, bf16, a->work, x, W, NULL, n, a->D, a->V, S(ops)),
              "head_xent logits");
        if (dir == DM_FWD) {
            CHECK(dm_cuda_xent_fwd(losses + r0, NULL, a->work, t, a->w, n, a->V, S(ops)),
                  "head_xent fwd");
            continue;
        }
        CHECK(dm_cuda_xent_bwd(a->work, a->work, t, a->w, n, a->V, a->scale, S(ops)),
              "head_xent bwd");
        const void *dl = bf16 ? (const void *)operand(ops, a->work, (size_t)n * V, 1) : a->work;
        CHECK(dm_cuda_matmul_bwd_data(b, bf16, a->dx + (size_t)r0 * D, dl, W, n, a->D, a->V, 0,
                                      S(ops)),
              "head_xent dx");
        CHECK(dm_cuda_matmul_bwd_weight(b, bf16, a->dW, NULL, dl, a->work, x, n, a->D, a->V,
                                        S(ops)),
              "head_xent dW");
    }
    if (dir == DM_FWD) CHECK(dm_cuda_mean(a->mean, losses, a->N, S(ops)), "head_xent mean");
}
static void head_xent_cu(dm_ops *ops, void *args, int dir) { head_xent_run(ops, args, dir, 0); }
static void head_xent_bf16_cu(dm_ops *ops, void *args, int dir) {
    head_xent_run(ops, args, dir, 1);
}

static const char *delta_supports(dm_ops *ops, const void *args, int dir) {
    (void)ops, (void)dir;
    const dm_delta_dims *d = ((const dm_delta_args *)args)->d;
    return d->dk > 256 || d->dv > 256 ? "head_dim above 256" : NULL;
}
static const char *chunked_selected(const dm_ops *ops, const void *args, int dir) {
    (void)dir;
    if (ops->kda_impl == DM_IMPL_REFERENCE) return "kda_impl=reference";
    return dm_cuda_delta_chunk_fits(((const dm_delta_args *)args)->d)
               ? NULL
               : "a chunk's tiles do not fit the device's shared memory";
}
static void delta_chunked_cu(dm_ops *ops, void *args, int dir) {
    dm_delta_args *a = args;
    if (dir == DM_FWD)
        CHECK(dm_cuda_delta_chunk_fwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o, a->hT,
                                      S(ops)),
              "delta chunked fwd");
    else
        CHECK(dm_cuda_delta_chunk_bwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->dO,
                                      a->dhT, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0,
                                      ops->scratch, S(ops)),
              "delta chunked bwd");
}
/* the tensor-core core: where the products are bf16 (precision=bf16) and its tiles fit */
static const char *tc_selected(const dm_ops *ops, const void *args, int dir) {
    (void)dir;
    if (ops->kda_impl == DM_IMPL_REFERENCE) return "kda_impl=reference";
    if (!dm_cuda_bf16_on(ops)) return "the policy's products are fp32 (precision=bf16 asks)";
    return dm_cuda_delta_tc_fits(((const dm_delta_args *)args)->d)
               ? NULL
               : "head dims not multiples of 16 up to 128, or tiles past shared memory";
}
static void delta_tc_cu(dm_ops *ops, void *args, int dir) {
    dm_delta_args *a = args;
    if (dir == DM_FWD)
        CHECK(dm_cuda_delta_tc_fwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o, a->hT,
                                   a->saved, ops->scratch, S(ops)),
              "delta tensor-core fwd");
    else
        CHECK(dm_cuda_delta_tc_bwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->saved_in,
                                   a->dO, a->dhT, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0,
                                   ops->scratch, S(ops)),
              "delta tensor-core bwd");
}
static void delta_serial_cu(dm_ops *ops, void *args, int dir) {
    dm_delta_args *a = args;
    if (dir == DM_FWD)
        CHECK(dm_cuda_delta_serial_fwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o, a->hT,
                                       S(ops)),
              "delta serial fwd");
    else
        CHECK(dm_cuda_delta_serial_bwd(a->d, a->q, a->k, a->v, a->g, a->beta, a->h0, a->dO,
                                       a->dhT, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0,
                                       ops->scratch, S(ops)),
              "delta serial bwd");
}

/* ---- the optimizer's ops ---- */

static void grad_add_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_sum_args *a = args; /* acc = g (first) or acc + g, in out */
    if (a->first) same(ops, a->out, a->g, a->n);
    else {
        same(ops, a->out, a->acc, a->n);
        CHECK(dm_cuda_add_inplace(a->out, a->g, a->n, S(ops)), "grad_add");
    }
}
/* out = acc / A (kernels/optim.c's: times the float 1 / A) */
static void grad_mean_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_sum_args *a = args;
    if (a->A == 1) same(ops, a->out, a->acc, a->n);
    else CHECK(dm_cuda_scale(a->out, a->acc, 1.0f / (float)a->A, a->n, S(ops)), "grad_mean");
}
/* the norm (the square root of the sum of squares) and the clipping factor, in device memory */
static void grad_norm_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_gnorm_args *a = args;
    dm_cuda_state *st = ST(ops);
    CHECK(dm_cuda_grad_norm(a->norm, a->gscale, a->g, a->n, a->clip, st->dbl, st->s),
          "grad_norm");
}
static void adamw_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_adamw_args *a = args;
    same(ops, a->po, a->p, a->n);
    same(ops, a->m1o, a->m1, a->n);
    same(ops, a->m2o, a->m2, a->n);
    CHECK(dm_cuda_adamw(a->po, a->g, a->m1o, a->m2o, a->n, a->hyper, a->b1, a->b2, a->eps,
                        a->gscale, a->cautious, S(ops)),
          "adamw");
}
static void momentum_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_mom_args *a = args;
    same(ops, a->momo, a->mom, a->n);
    CHECK(dm_cuda_muon_momentum(a->momo, a->g, a->u, a->n, a->beta, a->gscale, S(ops)),
          "momentum");
}
static void muon_update_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_apply_args *a = args;
    same(ops, a->wo, a->w, a->n);
    CHECK(dm_cuda_muon_update(a->wo, a->x, a->n, a->ds, a->cautious, S(ops)),
          "muon_update");
}

static const char *ns_supports(dm_ops *ops, const void *args, int dir) {
    (void)ops, (void)dir;
    const dm_ns_args *a = args;
    if (a->t >= 0) return "one step at a time (verify mode) has no CUDA kernel yet";
    return dm_ns_sched_steps(a->s) > 16 ? "a schedule of more than 16 steps" : NULL;
}
/* the whole iteration, its products in f32 or (ns_bf16) on bf16 operands */
static void ns_run(dm_ops *ops, dm_ns_args *a, int bf16) {
    float abc[16][3];
    int steps = dm_ns_sched_steps(a->s);
    for (int t = 0; t < steps; t++) {
        double c[3];
        dm_ns_sched_coeffs(a->s, t, c);
        abc[t][0] = (float)c[0], abc[t][1] = (float)c[1], abc[t][2] = (float)c[2];
    }
    int (*ns)(dm_cuda_blas *, float *, const float *, int, int, int, const float (*)[3], int,
              double, float *, dm_cuda_stream) = bf16 ? dm_cuda_ns_bf16 : dm_cuda_ns;
    CHECK(ns(ST(ops)->blas, a->out, a->G, a->n, a->rows, a->cols, (const float(*)[3])abc, steps,
             dm_ns_sched_safety(a->s), a->work, S(ops)),
          bf16 ? "ns_bf16" : "ns");
}
static void ns_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    ns_run(ops, args, 0);
}
static void ns_bf16_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    ns_run(ops, args, 1);
}

static void retract_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_retract_args *a = args;
    dm_cuda_state *st = ST(ops);
    if (st->slice_cap < a->n) {
        dm_cuda_free(st->slice_sq);
        st->slice_sq = NULL;
        CHECK(dm_cuda_malloc((void **)&st->slice_sq, (size_t)a->n * sizeof(double)),
              "the retraction's norms");
        st->slice_cap = a->n;
    }
    size_t len = (size_t)a->rows * a->cols;
    same(ops, a->out, a->W, (size_t)a->n * len);
    if (a->stiefel)
        CHECK(dm_cuda_retract_stiefel(st->blas, a->out, a->c, a->n, a->rows, a->cols, a->work,
                                      st->s),
              "retract (stiefel)");
    else CHECK(dm_cuda_retract_sphere(a->out, a->c, a->n, len, st->slice_sq, st->s), "retract");
}

static const char *normuon_supports(dm_ops *ops, const void *args, int dir) {
    (void)ops, (void)dir;
    return dm_cuda_normuon_fits(((const dm_normuon_args *)args)->rows)
               ? NULL
               : "a slice of more than 6,144 rows (their sums of squares in shared memory)";
}
static void normuon_cu(dm_ops *ops, void *args, int dir) {
    (void)dir;
    dm_normuon_args *a = args;
    size_t len = (size_t)a->n * a->rows * a->cols;
    same(ops, a->xo, a->x, len);
    same(ops, a->vo, a->v, (size_t)a->n * a->rows);
    CHECK(dm_cuda_normuon(a->xo, a->vo, a->n, a->rows, a->cols, a->beta2, a->eps, S(ops)),
          "normuon");
}

/* ---- the table ---- */
#define LIST1(var, name, sup, run)                                                         \
    static const dm_impl var##_I[] = {IMPL(name, sup, run)};                               \
    static const dm_impl_list var = DM_IMPL_LIST(var##_I);

LIST1(EMBED, "cuda", NULL, embed_cu)
LIST1(RMSNORM, "cuda", NULL, norm_cu)
LIST1(GATEDNORM, "cuda", NULL, norm_cu)
LIST1(CONV, "cuda", NULL, conv_cu)
LIST1(SILU, "cuda", NULL, silu_cu)
LIST1(L2NORM, "cuda", NULL, l2_cu)
LIST1(GATE, "cuda", NULL, gate_cu)
LIST1(SIGMOID, "cuda", NULL, sigmoid_cu)
LIST1(SWIGLU, "cuda", NULL, swiglu_cu)
LIST1(XENT, "cuda", NULL, xent_cu)
LIST1(ADD, "cuda", NULL, add_cu)
LIST1(GRAD_ADD, "cuda", NULL, grad_add_cu)
LIST1(GRAD_MEAN, "cuda", NULL, grad_mean_cu)
LIST1(GRAD_NORM, "cuda", NULL, grad_norm_cu)
LIST1(ADAMW, "cuda", NULL, adamw_cu)
LIST1(MOMENTUM, "cuda", NULL, momentum_cu)
LIST1(NS, "cublaslt", ns_supports, ns_cu)
LIST1(MUON_UPDATE, "cuda", NULL, muon_update_cu)
LIST1(NORMUON, "cuda", normuon_supports, normuon_cu)
LIST1(RETRACT, "cuda", NULL, retract_cu)

/* the products: on bf16 operands where the policy asks for them, else fp32 */
static const dm_impl MATMUL_I[] = {
    {"cublaslt-bf16", 0, DM_PREC_BF16, NULL, bf16_supports, matmul_bf16_cu, DM_MEM_CUDA},
    IMPL("cublaslt", NULL, matmul_cu),
};
static const dm_impl_list MATMUL = DM_IMPL_LIST(MATMUL_I);
static const dm_impl HEAD_XENT_I[] = {
    {"cublaslt-bf16", 0, DM_PREC_BF16, NULL, bf16_supports, head_xent_bf16_cu, DM_MEM_CUDA},
    IMPL("cuda", NULL, head_xent_cu),
};
static const dm_impl_list HEAD_XENT = DM_IMPL_LIST(HEAD_XENT_I);
static const dm_impl NS_BF16_I[] = {
    {"cublaslt-bf16", 0, DM_PREC_BF16, NULL, ns_supports, ns_bf16_cu, DM_MEM_CUDA}};
static const dm_impl_list NS_BF16 = DM_IMPL_LIST(NS_BF16_I);

/* the delta core: on the tensor cores where the products are bf16, chunked in fp32, then
 * the serial forward and backward (the oracle) */
static const dm_impl DELTA_I[] = {
    {"chunked-tc", 0, DM_PREC_BF16, tc_selected, delta_supports, delta_tc_cu, DM_MEM_CUDA},
    {"chunked", 0, DM_PREC_FP32, chunked_selected, delta_supports, delta_chunked_cu, DM_MEM_CUDA},
    {"serial", 0, DM_PREC_FP32, NULL, delta_supports, delta_serial_cu, DM_MEM_CUDA},
};
static const dm_impl_list DELTA = DM_IMPL_LIST(DELTA_I);

const dm_impl_list *const dm_cuda_impls[DM_OP_COUNT] = {
    [DM_OP_MATMUL] = &MATMUL,   [DM_OP_EMBED] = &EMBED,         [DM_OP_RMSNORM] = &RMSNORM,
    [DM_OP_GATEDNORM] = &GATEDNORM, [DM_OP_CONV] = &CONV,       [DM_OP_SILU] = &SILU,
    [DM_OP_L2NORM] = &L2NORM,   [DM_OP_GATE] = &GATE,           [DM_OP_SIGMOID] = &SIGMOID,
    [DM_OP_SWIGLU] = &SWIGLU,   [DM_OP_XENT] = &XENT,           [DM_OP_DELTA] = &DELTA,
    [DM_OP_HEAD_XENT] = &HEAD_XENT,
    [DM_OP_ADD] = &ADD,         [DM_OP_GRAD_ADD] = &GRAD_ADD,   [DM_OP_GRAD_MEAN] = &GRAD_MEAN,
    [DM_OP_GRAD_NORM] = &GRAD_NORM, [DM_OP_ADAMW] = &ADAMW,     [DM_OP_MOMENTUM] = &MOMENTUM,
    [DM_OP_NS] = &NS,           [DM_OP_NS_BF16] = &NS_BF16,     [DM_OP_MUON_UPDATE] = &MUON_UPDATE,
    [DM_OP_RETRACT] = &RETRACT, [DM_OP_NORMUON] = &NORMUON,
};
