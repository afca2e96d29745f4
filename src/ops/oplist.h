/* oplist.h — the ops, written once: each X(NAME, name) gives DM_OP_NAME (ops.h), its
 * definition dm_def_name (op.h, in its family's file of src/ops/) and a backend's
 * implementations of it (a backend's table, ops/op.h: dm_impl_list). Order: the model's
 * ops, then the optimizer's (ops/optim_ops.h); the counters and reports follow it. */
#ifndef DM_OPLIST_H
#define DM_OPLIST_H

#define DM_OP_LIST(X)                                                                      \
    X(MATMUL, matmul) X(EMBED, embed) X(RMSNORM, rmsnorm) X(GATEDNORM, gatednorm)          \
    X(CONV, conv) X(SILU, silu) X(L2NORM, l2norm) X(GATE, gate) X(SIGMOID, sigmoid)        \
    X(SWIGLU, swiglu) X(XENT, xent) X(HEAD_XENT, head_xent) X(DELTA, delta) X(ADD, add)    \
    X(GRAD_ADD, grad_add) X(GRAD_MEAN, grad_mean) X(GRAD_NORM, grad_norm) X(ADAMW, adamw)  \
    X(MOMENTUM, momentum) X(NS, ns) X(NS_BF16, ns_bf16) X(NORMUON, normuon)                \
    X(MUON_UPDATE, muon_update) X(RETRACT, retract)

#endif
