/* table.c — the cpu backend's implementations of every op (ops/oplist.h), each list defined
 * beside its kernels calls in this folder (matmul.c, delta.c, norms.c, pointwise.c, seq.c,
 * update.c, ns.c); dispatch asks them in order, then the op's reference. And what its op
 * layers ask besides the ops. */
#include "backends/cpu/cpu.h"
#include "backends/cpu/kernels/kernels.h" /* dm_cpu_bf16_missing */
#include "backends/cpu/kernels/retract.h" /* dm_retract_init */

#define DM_CPU_LIST(NAME, name) extern const dm_impl_list dm_cpu_##name;
DM_OP_LIST(DM_CPU_LIST)
#undef DM_CPU_LIST

#define DM_CPU_ROW(NAME, name) [DM_OP_##NAME] = &dm_cpu_##name,
const dm_impl_list *const dm_cpu_impls[DM_OP_COUNT] = {DM_OP_LIST(DM_CPU_ROW)};
#undef DM_CPU_ROW

const dm_backend_calls dm_cpu_calls = {
    .bf16_missing = dm_cpu_bf16_missing,
    .side_bytes = dm_cpu_side_bytes,
    .product_scratch = dm_cpu_product_scratch,
    .side_room = dm_cpu_side_room,
    .side_clear = dm_cpu_side_clear,
    .side_written = dm_cpu_side_written,
    .forget_bf16 = dm_cpu_forget_bf16,
    .reserve_bf16_weights = dm_cpu_reserve_bf16_weights,
    .dout_bf16 = dm_cpu_dout_bf16,
    .dout_forget = dm_cpu_dout_forget,
    .set_weights = dm_cpu_set_weights,
    .ns_bf16_context = dm_cpu_ns_bf16_context,
    .ns_work = dm_cpu_ns_work,
    .ns_threaded = dm_cpu_ns_threaded,
    .retract_work = dm_cpu_retract_work,
    .retract_init = dm_retract_init,
};
