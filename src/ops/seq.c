/* seq.c — the ops at the ends of the network and along the sequence (arguments: seq.h):
 * the byte embedding, the causal depthwise conv and the softmax cross-entropy, each with
 * the serial double-accumulating reference (seq_ref.c). */
#include "ops/seq.h"

#include "ops/op.h"
#include "ref/ref.h"

static void embed_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_embed_args *a = args;
    if (dir == DM_FWD) dm_embed_ref_fwd_ids(a->out, a->tok, a->w, a->table, a->N, a->C);
    else dm_embed_ref_bwd_ids(a->dtable, a->dout, a->tok, a->w, a->N, a->C);
}
static int embed_outputs(void *args, int dir, dm_out *o) {
    dm_embed_args *a = args;
    o[0] = dir == DM_FWD
               ? (dm_out){"y", (void **)&a->out, (size_t)a->N * a->C, DM_OUT_SET}
               : (dm_out){"dtable", (void **)&a->dtable, (size_t)(a->V ? a->V : DM_VOCAB) * a->C,
                             DM_OUT_ACC};
    return 1;
}
static const char *embed_check(const void *args, int dir) {
    const dm_embed_args *a = args;
    if (a->N < 0 || a->C < 0) return "a negative size";
    if (a->w != 0 && a->w != 1 && a->w != 2 && a->w != 4) return "an id width not 1, 2 or 4";
    if (a->V < 0) return "a negative size";
    if (!a->N || !a->C) return NULL;
    if (!a->tok) return "a NULL buffer";
    return dir == DM_FWD ? (!a->out || !a->table ? "a NULL buffer" : NULL)
                         : (!a->dtable || !a->dout ? "a NULL buffer" : NULL);
}

/* the ids' width in bytes */
static double idw(int w) { return w ? w : 1; }
/* the ids and the rows they pick (forward) or the output's gradient (backward) */
static double embed_reads(const void *args, int dir) {
    const dm_embed_args *a = args;
    (void)dir;
    return (double)a->N * (idw(a->w) + 4.0 * a->C);
}

static const dm_impl EMBED_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, embed_ref, DM_MEM_HOST};
const dm_op_def dm_def_embed = {"embed", 1u << DM_FWD | 1u << DM_BWD, &EMBED_REF,
                                sizeof(dm_embed_args), embed_outputs, NULL, embed_check,
                                embed_reads, NULL};

void dm_op_embed_fwd_ids(dm_ops *o, dm_bf *out, const void *ids, int w, const dm_bf *table,
                         int N, int C, int V) {
    dm_embed_args a = {.out = DM_RAW(out), .tok = ids, .table = DM_RAW(table), .N = N, .C = C,
                       .w = w, .V = V};
    dm_op_run(o, DM_OP_EMBED, DM_FWD, &a);
}
void dm_op_embed_bwd_ids(dm_ops *o, dm_bf *dtable, const dm_bf *dout, const void *ids, int w,
                         int N, int C, int V) {
    dm_embed_args a = {.tok = ids, .dtable = DM_RAW(dtable), .dout = DM_RAW(dout), .N = N, .C = C,
                       .w = w, .V = V};
    dm_op_run(o, DM_OP_EMBED, DM_BWD, &a);
}

static void conv_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_conv_args *a = args;
    if (dir == DM_FWD) dm_conv_ref_fwd(a->y, a->x, a->w, a->B, a->T, a->C, a->W);
    else dm_conv_ref_bwd(a->dx, a->dw, a->dy, a->x, a->w, a->B, a->T, a->C, a->W);
}
static int conv_outputs(void *args, int dir, dm_out *o) {
    dm_conv_args *a = args;
    size_t n = (size_t)a->B * a->T * a->C;
    if (dir == DM_FWD) {
        o[0] = (dm_out){"y", (void **)&a->y, n, DM_OUT_SET};
        return 1;
    }
    o[0] = (dm_out){"dx", (void **)&a->dx, n, DM_OUT_SET};
    o[1] = (dm_out){"dw", (void **)&a->dw, (size_t)a->C * a->W, DM_OUT_ACC};
    return 2;
}
static const char *conv_check(const void *args, int dir) {
    const dm_conv_args *a = args;
    if (a->B < 0 || a->T < 0 || a->C < 0 || a->W < 1) return "a negative size or no width";
    if (!a->B || !a->T || !a->C) return NULL;
    if (!a->x || !a->w) return "a NULL buffer";
    return dir == DM_FWD ? (!a->y ? "a NULL buffer" : NULL)
                         : (!a->dx || !a->dw || !a->dy ? "a NULL buffer" : NULL);
}

/* x and the taps (forward); dy, x and the taps (backward) */
static double conv_reads(const void *args, int dir) {
    const dm_conv_args *a = args;
    return 4.0 * ((double)a->B * a->T * a->C * (dir == DM_FWD ? 1 : 2) + (double)a->C * a->W);
}

static const dm_impl CONV_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, conv_ref, DM_MEM_HOST};
const dm_op_def dm_def_conv = {"conv", 1u << DM_FWD | 1u << DM_BWD, &CONV_REF,
                               sizeof(dm_conv_args),
                               conv_outputs, NULL, conv_check, conv_reads, NULL};

void dm_op_conv_fwd(dm_ops *o, dm_bf *y, const dm_bf *x, const dm_bf *w, int B, int T, int C,
                    int W) {
    dm_conv_args a = {.y = DM_RAW(y), .x = DM_RAW(x), .w = DM_RAW(w), .B = B, .T = T, .C = C,
                      .W = W};
    dm_op_run(o, DM_OP_CONV, DM_FWD, &a);
}
void dm_op_conv_bwd(dm_ops *o, dm_bf *dx, dm_bf *dw, const dm_bf *dy, const dm_bf *x,
                    const dm_bf *w, int B, int T, int C, int W) {
    dm_conv_args a = {.x = DM_RAW(x), .w = DM_RAW(w), .dx = DM_RAW(dx),
                      .dw = DM_RAW(dw), .dy = DM_RAW(dy), .B = B, .T = T, .C = C, .W = W};
    dm_op_run(o, DM_OP_CONV, DM_BWD, &a);
}

static void xent_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_xent_args *a = args;
    if (dir == DM_FWD)
        *a->mean = dm_xent_ref_fwd_ids(a->losses, a->logits, a->targets, a->w, a->N, a->V);
    else dm_xent_ref_bwd_ids(a->dlogits, a->logits, a->targets, a->w, a->N, a->V, a->scale);
}
static int xent_outputs(void *args, int dir, dm_out *o) {
    dm_xent_args *a = args;
    if (dir == DM_BWD) {
        o[0] = (dm_out){"dlogits", (void **)&a->dlogits, (size_t)a->N * a->V, DM_OUT_SET};
        return 1;
    }
    int n = 0;
    o[n++] = (dm_out){"loss", (void **)&a->mean, 1, DM_OUT_F64};
    if (a->losses) o[n++] = (dm_out){"losses", (void **)&a->losses, (size_t)a->N, DM_OUT_SET};
    return n;
}
static const char *xent_check(const void *args, int dir) {
    const dm_xent_args *a = args;
    if (a->N < 0 || a->V < 1) return "a negative size or no vocabulary";
    if (a->w != 0 && a->w != 1 && a->w != 2 && a->w != 4) return "an id width not 1, 2 or 4";
    if (dir == DM_FWD && !a->mean) return "a NULL buffer";
    if (!a->N) return NULL;
    if (!a->logits || !a->targets) return "a NULL buffer";
    return dir == DM_BWD && !a->dlogits ? "a NULL buffer" : NULL;
}

/* the logits and the targets */
static double xent_reads(const void *args, int dir) {
    const dm_xent_args *a = args;
    (void)dir;
    return (double)a->N * (4.0 * a->V + idw(a->w));
}

static const dm_impl XENT_REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, xent_ref, DM_MEM_HOST};
const dm_op_def dm_def_xent = {"xent", 1u << DM_FWD | 1u << DM_BWD, &XENT_REF,
                               sizeof(dm_xent_args),
                               xent_outputs, NULL, xent_check, xent_reads, NULL};

void dm_op_xent_fwd_ids(dm_ops *o, double *mean, dm_bf *losses, const dm_bf *logits,
                        const void *targets, int w, int N, int V) {
    dm_xent_args a = {.losses = DM_RAW(losses), .mean = mean, .logits = DM_RAW(logits),
                      .targets = targets, .w = w, .N = N, .V = V};
    dm_op_run(o, DM_OP_XENT, DM_FWD, &a);
}
void dm_op_xent_bwd_ids(dm_ops *o, dm_bf *dlogits, const dm_bf *logits, const void *targets,
                        int w, int N, int V, float scale) {
    dm_xent_args a = {.logits = DM_RAW(logits), .targets = targets, .w = w,
                      .dlogits = DM_RAW(dlogits), .N = N, .V = V, .scale = scale};
    dm_op_run(o, DM_OP_XENT, DM_BWD, &a);
}

/* The rows of a head_xent call in chunks of R: the chunk's x, targets and losses. */
static const void *ids_at(const void *t, int w, int r0) {
    return (const char *)t + (size_t)r0 * (size_t)(w ? w : 1);
}

static void head_xent_ref(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_head_xent_args *a = args;
    double sum = 0;
    for (int r0 = 0; r0 < a->N; r0 += a->R) {
        int n = a->N - r0 < a->R ? a->N - r0 : a->R;
        const float *x = a->x + (size_t)r0 * a->D;
        const void *t = ids_at(a->targets, a->w, r0);
        dm_matmul_ref_fwd(a->work, x, a->W, NULL, n, a->D, a->V);
        if (dir == DM_FWD) {
            sum += n * dm_xent_ref_fwd_ids(a->losses ? a->losses + r0 : NULL, a->work, t, a->w,
                                           n, a->V);
            continue;
        }
        dm_xent_ref_bwd_ids(a->work, a->work, t, a->w, n, a->V, a->scale);
        dm_matmul_ref_bwd_data(a->dx + (size_t)r0 * a->D, a->work, a->W, n, a->D, a->V, 0);
        dm_matmul_ref_bwd_weight(a->dW, NULL, a->work, x, n, a->D, a->V);
    }
    if (dir == DM_FWD) *a->mean = a->N ? sum / a->N : 0;
}
static int head_xent_outputs(void *args, int dir, dm_out *o) {
    dm_head_xent_args *a = args;
    if (dir == DM_BWD) {
        o[0] = (dm_out){"dx", (void **)&a->dx, (size_t)a->N * a->D, DM_OUT_SET};
        o[1] = (dm_out){"dW", (void **)&a->dW, (size_t)a->V * a->D, DM_OUT_ACC};
        return 2;
    }
    int n = 0;
    o[n++] = (dm_out){"loss", (void **)&a->mean, 1, DM_OUT_F64};
    if (a->losses) o[n++] = (dm_out){"losses", (void **)&a->losses, (size_t)a->N, DM_OUT_SET};
    return n;
}
static double head_xent_flops(const void *args, int dir) {
    const dm_head_xent_args *a = args;
    return (dir == DM_FWD ? 2.0 : 6.0) * a->N * a->D * a->V;
}
static const char *head_xent_check(const void *args, int dir) {
    const dm_head_xent_args *a = args;
    if (a->N < 0 || a->D < 0 || a->V < 1 || a->R < 1)
        return "a negative size, no vocabulary or no chunk";
    if (a->w != 0 && a->w != 1 && a->w != 2 && a->w != 4) return "an id width not 1, 2 or 4";
    if (dir == DM_FWD && !a->mean) return "a NULL buffer";
    if (!a->N) return NULL;
    if (!a->x || !a->W || !a->targets || !a->work) return "a NULL buffer";
    return dir == DM_BWD && (!a->dx || !a->dW) ? "a NULL buffer" : NULL;
}

/* x, the targets, and W once per chunk of rows (the backward reads both once more) */
static double head_xent_reads(const void *args, int dir) {
    const dm_head_xent_args *a = args;
    double chunks = a->R > 0 ? (double)((a->N + a->R - 1) / a->R) : 0;
    double once = (double)a->N * (4.0 * a->D + idw(a->w)) + chunks * 4.0 * a->V * a->D;
    return dir == DM_FWD ? once : 2.0 * once;
}

static int head_xent_asked(const void *args) { return ((const dm_head_xent_args *)args)->prec; }

static const dm_impl HEAD_XENT_REF = {"reference", 1,    DM_PREC_FP32, NULL, NULL,
                                      head_xent_ref, DM_MEM_HOST};
const dm_op_def dm_def_head_xent = {"head_xent",         1u << DM_FWD | 1u << DM_BWD,
                                    &HEAD_XENT_REF,      sizeof(dm_head_xent_args),
                                    head_xent_outputs,   head_xent_flops,
                                    head_xent_check,     head_xent_reads,
                                    head_xent_asked};

void dm_op_head_xent_fwd(dm_ops *o, double *mean, dm_bf *losses, const dm_bf *x, const dm_bf *W,
                         const void *targets, int w, dm_bf *work, int N, int D, int V, int R) {
    dm_head_xent_args a = {.losses = DM_RAW(losses), .mean = mean, .x = DM_RAW(x), .W = DM_RAW(W),
                           .targets = targets, .w = w, .work = DM_RAW(work), .N = N, .D = D, .V = V,
                           .R = R, .prec = o->precision};
    dm_op_run(o, DM_OP_HEAD_XENT, DM_FWD, &a);
}
void dm_op_head_xent_bwd(dm_ops *o, dm_bf *dx, dm_bf *dW, const dm_bf *x, const dm_bf *W,
                         const void *targets, int w, dm_bf *work, int N, int D, int V, int R,
                         float scale) {
    dm_head_xent_args a = {.x = DM_RAW(x), .W = DM_RAW(W), .targets = targets, .w = w,
                           .dx = DM_RAW(dx), .dW = DM_RAW(dW), .work = DM_RAW(work), .N = N, .D = D,
                           .V = V, .R = R, .scale = scale, .prec = o->precision};
    dm_op_run(o, DM_OP_HEAD_XENT, DM_BWD, &a);
}
