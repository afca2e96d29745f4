/* loader.c — the NVIDIA driver's probe and the CUDA module's loader (loader.h), both by
 * dlopen: a program linked with libdormouse needs no CUDA library to start, and maps one
 * only where a device answers. */
#include "ops/cuda/loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DM_CUDA_MODULE_DIR
#define DM_CUDA_MODULE_DIR "/usr/local/lib/dormouse"
#endif
#ifndef DM_CUDA_MODULE_RELDIR
#define DM_CUDA_MODULE_RELDIR "../lib/dormouse"
#endif

/* the formatted answers: this thread's, valid until its next call */
static _Thread_local char why_buf[512];

/* ---- the driver: the few calls of its C API the probe needs (CUresult is an int and
 * CUdevice an int there; declared here so no toolkit header is needed) ---- */
#define CU_SUCCESS 0
#define CU_ERROR_NO_DEVICE 100

static struct {
    int (*init)(unsigned flags);
    int (*device_count)(int *n);
    int (*error_string)(int err, const char **s);
    const char *why; /* NULL: the driver answered */
    int n;           /* its devices */
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static char drv_why[256];

static void drv_open(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        drv.why = "no CUDA driver (libcuda.so.1 not found: this machine has no NVIDIA driver)";
        return;
    }
    *(void **)&drv.init = dlsym(h, "cuInit");
    *(void **)&drv.device_count = dlsym(h, "cuDeviceGetCount");
    *(void **)&drv.error_string = dlsym(h, "cuGetErrorString");
    if (!drv.init || !drv.device_count) {
        drv.why = "the CUDA driver's libcuda.so.1 lacks cuInit or cuDeviceGetCount";
        return;
    }
    int e = drv.init(0);
    if (e == CU_SUCCESS) e = drv.device_count(&drv.n);
    if (e == CU_ERROR_NO_DEVICE || (e == CU_SUCCESS && drv.n == 0)) {
        drv.why = "no CUDA device";
    } else if (e != CU_SUCCESS) {
        const char *s = NULL;
        if (!drv.error_string || drv.error_string(e, &s) != CU_SUCCESS || !s) s = "unknown";
        snprintf(drv_why, sizeof drv_why, "the CUDA driver does not start: %s (error %d)", s, e);
        drv.why = drv_why;
    }
    /* the driver stays loaded: the module's runtime uses the same one */
}

const char *dm_cuda_driver_missing(int device) {
    pthread_once(&drv_once, drv_open);
    if (drv.why) return drv.why;
    if (device < 0 || device >= drv.n) {
        snprintf(why_buf, sizeof why_buf,
                 "CUDA device %d out of range (this machine has %d: 0..%d)", device, drv.n,
                 drv.n - 1);
        return why_buf;
    }
    return NULL;
}

/* ---- the module ---- */
static int is_file(const char *p) { return access(p, F_OK) == 0; }

const char *dm_cuda_module_path(char *buf, size_t n, int *found) {
    const char *env = getenv("DM_CUDA_MODULE");
    *found = 1;
    if (env && env[0]) {
        snprintf(buf, n, "%s", env);
        return buf;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = len > 0 ? (exe[len] = 0, strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = 0;
        snprintf(buf, n, "%s/%s", exe, DM_CUDA_MODULE_FILE);
        if (is_file(buf)) return buf;
        snprintf(buf, n, "%s/%s/%s", exe, DM_CUDA_MODULE_RELDIR, DM_CUDA_MODULE_FILE);
        if (is_file(buf)) return buf;
    }
    snprintf(buf, n, "%s/%s", DM_CUDA_MODULE_DIR, DM_CUDA_MODULE_FILE);
    *found = is_file(buf);
    return buf;
}

const dm_cuda_module *dm_cuda_module_open(const char *path, char *why, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, n, "the CUDA module %s does not load: %s", path, e ? e : "dlopen failed");
        return NULL;
    }
    dm_cuda_entry_fn entry;
    *(void **)&entry = dlsym(h, DM_CUDA_ENTRY_SYMBOL);
    const dm_cuda_module *m = entry ? entry() : NULL;
    if (!entry || !m) {
        snprintf(why, n, "%s is not a dormouse CUDA module (no %s)", path, DM_CUDA_ENTRY_SYMBOL);
    } else if (m->abi != DM_CUDA_MODULE_ABI || m->size != sizeof *m) {
        snprintf(why, n,
                 "the CUDA module %s is of another dormouse (its ABI %d, %zu bytes; this "
                 "program's %d, %zu): rebuild it with this dormouse",
                 path, m->abi, m->size, DM_CUDA_MODULE_ABI, sizeof *m);
    } else {
        return m;
    }
    dlclose(h);
    return NULL;
}

static const dm_cuda_module *mod;
static char mod_why[768];
static pthread_once_t mod_once = PTHREAD_ONCE_INIT;

static void mod_open(void) {
    char path[4096], why[640];
    int found;
    dm_cuda_module_path(path, sizeof path, &found);
    if (!found) {
        snprintf(mod_why, sizeof mod_why,
                 "no CUDA module: %s is neither beside the program, nor in %s from it, "
                 "nor in %s (set DM_CUDA_MODULE to its path)",
                 DM_CUDA_MODULE_FILE, DM_CUDA_MODULE_RELDIR, DM_CUDA_MODULE_DIR);
        return;
    }
    mod = dm_cuda_module_open(path, why, sizeof why);
    if (!mod) snprintf(mod_why, sizeof mod_why, "%s", why);
}

const dm_cuda_module *dm_cuda_module_load(const char **why) {
    pthread_once(&mod_once, mod_open);
    if (why) *why = mod ? NULL : mod_why;
    return mod;
}

static const dm_cuda_module *installed;
void dm_cuda_module_install(const dm_cuda_module *m) { installed = m; }
const dm_cuda_module *dm_cuda_module_installed(void) { return installed; }
