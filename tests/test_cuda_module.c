/* test_cuda_module.c — the CUDA module's loader (src/ops/cuda/loader.c) on any machine:
 * where the module is looked for, a missing file or a stranger refused with a reason that
 * names it, the stand-in module (tests/fake_cuda/module.c) accepted, the module this build
 * made loaded and asked, and the driver's probe answering on a machine with or without
 * one. tests/cuda_module.sh checks the command around it. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/cuda/loader.h"

/* one line, not empty */
static int one_line(const char *s) { return s && s[0] && !strchr(s, '\n'); }

TEST(cuda_module_path_order) {
    char buf[4096];
    int found = 0;
    setenv("DM_CUDA_MODULE", "/nowhere/at/all/libdormouse-cuda.so", 1);
    CHECK(!strcmp(dm_cuda_module_path(buf, sizeof buf, &found),
                  "/nowhere/at/all/libdormouse-cuda.so") && found == 1);
    setenv("DM_CUDA_MODULE", "", 1); /* empty: as if unset */
    dm_cuda_module_path(buf, sizeof buf, &found);
    CHECKF(strstr(buf, "/" DM_CUDA_MODULE_FILE), "%s", buf);
    unsetenv("DM_CUDA_MODULE");
    dm_cuda_module_path(buf, sizeof buf, &found);
    printf("  the module is looked for at %s (%s)\n", buf, found ? "there" : "absent");
    if (DM_CUDA_MODULE_BUILT[0]) { /* the build puts it beside the programs, this one too */
        CHECKF(found && !strcmp(buf, DM_CUDA_MODULE_BUILT), "%s, built at %s", buf,
               DM_CUDA_MODULE_BUILT);
    }
}

TEST(cuda_module_missing_says_why) {
    char why[1024];
    const char *path = "/nonexistent/dir/" DM_CUDA_MODULE_FILE;
    CHECK(dm_cuda_module_open(path, why, sizeof why) == NULL);
    printf("  %s\n", why);
    CHECKF(one_line(why) && strstr(why, "the CUDA module") && strstr(why, path) &&
               strstr(why, "No such file"), "%s", why);
    /* a file that is no shared object at all */
    CHECK(dm_cuda_module_open(DM_SOURCE_DIR "/CMakeLists.txt", why, sizeof why) == NULL);
    CHECKF(one_line(why) && strstr(why, "CMakeLists.txt") && strstr(why, "does not load"), "%s",
           why);
}

TEST(cuda_module_refuses_a_stranger) {
    char why[1024];
    CHECK(dm_cuda_module_open(DM_FAKE_MODULE_NO_ENTRY, why, sizeof why) == NULL);
    printf("  %s\n", why);
    CHECKF(one_line(why) && strstr(why, DM_FAKE_MODULE_NO_ENTRY) &&
               strstr(why, "not a dormouse CUDA module") && strstr(why, DM_CUDA_ENTRY_SYMBOL),
           "%s", why);
    CHECK(dm_cuda_module_open(DM_FAKE_MODULE_OLD_ABI, why, sizeof why) == NULL);
    printf("  %s\n", why);
    CHECKF(one_line(why) && strstr(why, DM_FAKE_MODULE_OLD_ABI) &&
               strstr(why, "another dormouse") && strstr(why, "rebuild"), "%s", why);
    const dm_cuda_module *m = dm_cuda_module_open(DM_FAKE_MODULE_OK, why, sizeof why);
    CHECKF(m != NULL, "%s", why);
    if (m) {
        CHECK(m->abi == DM_CUDA_MODULE_ABI && !strcmp(m->what, "fake"));
        CHECK(strstr(m->unavailable(0), "fake CUDA module") != NULL);
    }
}

/* the module this build made: it loads here (its cuBLASLt found through its rpath) and
 * its probe answers; on a machine without a GPU with the reason */
TEST(cuda_module_built_loads_and_answers) {
    if (!DM_CUDA_MODULE_BUILT[0]) {
        t_skip("this build has no CUDA module (no CUDA toolkit at configure time, or DM_CUDA=OFF)");
        return;
    }
    char why[1024];
    const dm_cuda_module *m = dm_cuda_module_open(DM_CUDA_MODULE_BUILT, why, sizeof why);
    CHECKF(m != NULL, "%s", why);
    if (!m) return;
    printf("  %s: %s\n", DM_CUDA_MODULE_BUILT, m->what);
    CHECKF(strstr(m->what, "CUDA runtime") && strstr(m->what, "cuBLASLt"), "%s", m->what);
    const char *w0 = m->unavailable(0);
    printf("  device 0: %s\n", w0 ? w0 : "usable");
    CHECK(!w0 || one_line(w0));
    const char *big = m->unavailable(1 << 20);
    CHECK(one_line(big));
    CHECK(one_line(m->error(-1)));
    /* the process-wide load finds the same module (beside this program) */
    const char *lw = NULL;
    const dm_cuda_module *l = dm_cuda_module_load(&lw);
    CHECKF(l == m && lw == NULL, "%s", lw ? lw : "another module");
}

TEST(cuda_driver_probe_answers) {
    const char *w0 = dm_cuda_driver_missing(0);
    printf("  device 0: %s\n", w0 ? w0 : "the driver shows it");
    CHECK(!w0 || one_line(w0));
    const char *big = dm_cuda_driver_missing(1 << 20), *neg = dm_cuda_driver_missing(-1);
    CHECK(one_line(big) && one_line(neg));
    if (!w0) CHECKF(strstr(big, "out of range") != NULL, "%s", big);
}
