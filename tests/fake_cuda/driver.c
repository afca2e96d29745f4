/* driver.c — a stand-in for the NVIDIA driver's libcuda.so.1 (tests/cuda_module.sh): the
 * calls of its C API that src/ops/cuda/loader.c's probe makes, answering as a machine
 * with $DM_FAKE_CUDA_DEVICES devices (default 1; 0: cuInit says "no device"). Lets a
 * machine without a GPU reach the step after the probe: loading the CUDA module. */
#include <stdlib.h>

#define FAKE_NO_DEVICE 100

static int devices(void) {
    const char *s = getenv("DM_FAKE_CUDA_DEVICES");
    return s && s[0] ? atoi(s) : 1;
}

int cuInit(unsigned flags) {
    (void)flags;
    return devices() > 0 ? 0 : FAKE_NO_DEVICE;
}

int cuDeviceGetCount(int *n) {
    *n = devices();
    return 0;
}

int cuGetErrorString(int err, const char **s) {
    *s = err == FAKE_NO_DEVICE ? "no CUDA-capable device is detected" : "fake error";
    return 0;
}
