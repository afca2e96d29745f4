/* fuzz_safetensors.c — the libFuzzer harness of the safetensors target (fuzz/targets.h); built by
 * `make fuzz` with clang. */
#include <stddef.h>
#include <stdint.h>

#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    dm_fuzz_safetensors(data, n);
    return 0;
}
