/* module.c — stand-ins for the CUDA module (kernels/cuda/entry.h), built three ways for
 * tests/test_cuda_module.c and tests/cuda_module.sh:
 *   FAKE_MODULE_OK       the right ABI; its probe answers FAKE_REASON, and loading it
 *                        writes the file $DM_FAKE_MODULE_MARK (when set): the proof that
 *                        a program loaded it;
 *   FAKE_MODULE_OLD_ABI  an entry whose table has another ABI number;
 *   FAKE_MODULE_NO_ENTRY no entry symbol at all. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/entry.h"

#define FAKE_REASON "the fake CUDA module answers: no device here"

#if FAKE_MODULE_NO_ENTRY
int dm_fake_cuda_module_nothing(void) { return 0; }
#else
static const char *fake_unavailable(int device) {
    (void)device;
    return FAKE_REASON;
}
static void fake_device_name(int device, char *buf, size_t n) {
    (void)device;
    snprintf(buf, n, "%s", FAKE_REASON);
}
static const char *fake_error(int err) {
    (void)err;
    return "fake";
}

static const dm_cuda_module table = {
#if FAKE_MODULE_OLD_ABI
    .abi = DM_CUDA_MODULE_ABI + 1000,
#else
    .abi = DM_CUDA_MODULE_ABI,
#endif
    .size = sizeof(dm_cuda_module),
    .what = "fake",
    .unavailable = fake_unavailable,
    .device_name = fake_device_name,
    .error = fake_error,
};

__attribute__((constructor)) static void fake_loaded(void) {
    const char *mark = getenv("DM_FAKE_MODULE_MARK");
    FILE *f = mark && mark[0] ? fopen(mark, "w") : NULL;
    if (f) {
        fputs("loaded\n", f);
        fclose(f);
    }
}

const dm_cuda_module *dm_cuda_module_entry(void) { return &table; }
#endif
