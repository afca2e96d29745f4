/* common.h — what every kernel backend (backends/cpu/kernels, ref, later kernels/cuda)
 * shares: the small enums that select a variant of a kernel. */
#ifndef DM_KERNELS_COMMON_H
#define DM_KERNELS_COMMON_H

/* the output gate of the per-head gated RMSNorm: sigmoid (KDA) or silu (GDN) */
enum { DM_GATE_SIGMOID = 0, DM_GATE_SWISH = 1 };

#endif
