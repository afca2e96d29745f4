/* matmul.c — the dense layer as an op (arguments: matmul.h): forward (out = in W^T + b),
 * the data gradient (bwd: din = dout W) and the weight gradient (bwd_w: dW += dout^T in,
 * dbias += sums), with the double-precision reference (matmul_ref.c). */
#include "ops/matmul.h"

#include "ops/backend.h"
#include "ops/op.h"
#include "ref/ref.h"

static void ref_run(dm_ops *ops, void *args, int dir) {
    (void)ops;
    dm_matmul_args *a = args;
    if (dir == DM_FWD) dm_matmul_ref_fwd(a->out, a->in, a->W, a->bias, a->N, a->K, a->O);
    else if (dir == DM_BWD)
        dm_matmul_ref_bwd_data(a->din, a->dout, a->W, a->N, a->K, a->O, a->din_acc);
    else dm_matmul_ref_bwd_weight(a->dW, a->dbias, a->dout, a->in, a->N, a->K, a->O);
}

static int outputs(void *args, int dir, dm_out *o) {
    dm_matmul_args *a = args;
    size_t N = (size_t)a->N, K = (size_t)a->K, O = (size_t)a->O;
    if (dir == DM_FWD) {
        o[0] = (dm_out){"y", (void **)&a->out, N * O, DM_OUT_SET};
        return 1;
    }
    if (dir == DM_BWD) {
        o[0] = (dm_out){"dx", (void **)&a->din, N * K, a->din_acc ? DM_OUT_ACC : DM_OUT_SET};
        return 1;
    }
    o[0] = (dm_out){"dW", (void **)&a->dW, O * K, DM_OUT_ACC};
    if (!a->dbias) return 1;
    o[1] = (dm_out){"dbias", (void **)&a->dbias, O, DM_OUT_ACC};
    return 2;
}

static double flops(const void *args, int dir) {
    const dm_matmul_args *a = args;
    (void)dir;
    return 2.0 * a->N * a->K * a->O;
}

static const char *check(const void *args, int dir) {
    const dm_matmul_args *a = args;
    if (a->N < 0 || a->K < 0 || a->O < 0) return "a negative size";
    if (dir == DM_FWD)
        return a->N && a->O && (!a->out || (a->K && (!a->in || !a->W))) ? "a NULL buffer"
                                                                        : NULL;
    if (dir == DM_BWD) return a->N && a->K && (!a->din || !a->dout || !a->W) ? "a NULL buffer"
                                                                             : NULL;
    return a->O && a->K && (!a->dW || (a->N && (!a->dout || !a->in))) ? "a NULL buffer" : NULL;
}

static int asked(const void *args) { return ((const dm_matmul_args *)args)->prec; }

static const dm_impl REF = {"reference", 1, DM_PREC_FP32, NULL, NULL, ref_run, DM_MEM_HOST};
const dm_op_def dm_def_matmul = {"matmul", 1u << DM_FWD | 1u << DM_BWD | 1u << DM_BWD_W, &REF,
                                 sizeof(dm_matmul_args), outputs, flops, check,
                                 NULL /* bound by its FLOPs */, asked};

void dm_op_matmul_fwd(dm_ops *o, dm_bf *out, const dm_bf *in, const dm_bf *W, const dm_bf *bias,
                      int N, int K, int O) {
    dm_matmul_args a = {.out = DM_RAW(out), .in = DM_RAW(in), .W = DM_RAW(W), .bias = DM_RAW(bias),
                        .N = N, .K = K, .O = O, .prec = o->precision};
    dm_op_run(o, DM_OP_MATMUL, DM_FWD, &a);
}

void dm_op_matmul_bwd(dm_ops *o, dm_bf *din, dm_bf *dW, dm_bf *dbias, const dm_bf *dout,
                      const dm_bf *in, const dm_bf *W, int N, int K, int O, int din_acc) {
    dm_matmul_args a = {.in = DM_RAW(in), .W = DM_RAW(W), .din = DM_RAW(din), .dout = DM_RAW(dout),
                        .din_acc = din_acc, .dW = DM_RAW(dW), .dbias = DM_RAW(dbias), .N = N,
                        .K = K, .O = O, .prec = o->precision};
    /* both products read dout: the backend may keep one copy of it for both (its side
     * room's, or made here and forgotten after them) */
    const dm_backend_vt *vt = o->be ? o->be->vt : dm_backend_regs[0].vt;
    const dm_backend_calls *c = vt ? vt->calls : NULL;
    size_t nd = (size_t)(N > 0 ? N : 0) * (size_t)(O > 0 ? O : 0);
    int made = c && c->dout_bf16 ? c->dout_bf16(o, DM_RAW(dout), nd, din != NULL) : 0;
    if (din) dm_op_run(o, DM_OP_MATMUL, DM_BWD, &a);
    dm_op_run(o, DM_OP_MATMUL, DM_BWD_W, &a);
    if (c && c->dout_forget) c->dout_forget(o, made);
}
