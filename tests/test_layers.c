/* test_layers.c — the include-layer rule (docs/architecture.md section 2,
 * scripts/layers.sh): the source tree keeps it, and the check catches an include that
 * points up. */
#include <stdio.h>
#include <string.h>

#include "check.h"

#define LAYERS "bash " DM_SOURCE_DIR "/scripts/layers.sh"

TEST(include_layers_point_down) {
    char err[4096];
    int rc = t_run(LAYERS " " DM_SOURCE_DIR, err, sizeof err);
    CHECKF(rc == 0, "scripts/layers.sh on the source tree: exit %d\n%s", rc, err);
}

/* a tree with one upward include (a kernel that includes the op layer), one that names a
 * missing header, and one file outside every layer folder: each is named, exit 1 */
TEST(include_layers_catch_upward) {
    char d[256], cmd[2048], out[8192];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir -p src/kernels/cpu src/ops src/stray include && "
             "printf '#include \"ops/ops.h\"\\n#include \"dormouse.h\"\\n' > src/kernels/cpu/k.c && "
             "printf '#include \"kernels/k.h\"\\n' > src/ops/ops.h && : > src/kernels/k.h && "
             "printf '#include \"nowhere.h\"\\n' > src/ops/x.c && : > src/stray/s.c && "
             ": > include/dormouse.h", d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/out", d);
    snprintf(cmd, sizeof cmd, LAYERS " %s", d);
    int rc = t_run_out(cmd, path, out, sizeof out);
    CHECKF(rc == 1, "exit %d, expected 1:\n%s", rc, out);
    CHECKF(strstr(out, "src/kernels/cpu/k.c (kernels, layer 1) includes src/ops/ops.h (ops, layer 2)"),
           "the upward include is not named:\n%s", out);
    CHECKF(strstr(out, "includes \"nowhere.h\""), "the missing header is not named:\n%s", out);
    CHECKF(strstr(out, "src/stray/s.c is not in a layer folder"), "the stray file is not named:\n%s",
           out);
    CHECKF(!strstr(out, "ops/ops.h (ops, layer 2) includes"), "a downward include was flagged:\n%s",
           out);
    t_rmtree(d);
}

/* the op layer's seams (docs/backends.md): the three forbidden arrows, each planted in a
 * tree of its own beside the includes that are allowed (the cpu backend's table calling
 * kernels/cpu, jobs using the op layer's interface, ops using the references) */
TEST(include_layers_catch_seams) {
    static const struct { const char *file, *inc, *said; } BAD[] = {
        {"src/optim/o.c", "kernels/cpu/k.h",
         "src/optim/o.c (optim, layer 4) includes src/kernels/cpu/k.h: above the op layer"},
        {"src/jobs/j.c", "ops/op.h",
         "src/jobs/j.c (jobs, layer 6) includes src/ops/op.h: an internal of the op layer"},
        {"src/ops/x.c", "kernels/cpu/k.h",
         "src/ops/x.c (ops) includes src/kernels/cpu/k.h: only the cpu backend's own table"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char d[256], cmd[4096], out[8192], path[512];
        t_tmpdir(d, sizeof d);
        snprintf(cmd, sizeof cmd,
                 "cd %s && mkdir -p src/kernels/cpu src/kernels/ref src/ops/cpu src/optim "
                 "src/jobs include && : > include/dormouse.h && : > src/kernels/cpu/k.h && "
                 ": > src/kernels/ref/r.h && : > src/ops/op.h && : > src/ops/ops.h && "
                 "printf '#include \"kernels/cpu/k.h\"\\n#include \"ops/op.h\"\\n' > "
                 "src/ops/cpu/t.c && "
                 "printf '#include \"kernels/ref/r.h\"\\n#include \"ops/op.h\"\\n' > src/ops/y.c && "
                 "printf '#include \"ops/ops.h\"\\n' > src/jobs/ok.c && "
                 "printf '#include \"%s\"\\n' > %s",
                 d, BAD[i].inc, BAD[i].file);
        CHECK(t_run(cmd, NULL, 0) == 0);
        snprintf(path, sizeof path, "%s/out", d);
        snprintf(cmd, sizeof cmd, LAYERS " %s", d);
        int rc = t_run_out(cmd, path, out, sizeof out);
        CHECKF(rc == 1, "%s including %s: exit %d, expected 1:\n%s", BAD[i].file, BAD[i].inc, rc,
               out);
        CHECKF(strstr(out, BAD[i].said), "%s including %s is not named:\n%s", BAD[i].file,
               BAD[i].inc, out);
        CHECKF(!strstr(out, "src/ops/cpu/t.c") && !strstr(out, "src/ops/y.c") &&
                   !strstr(out, "src/jobs/ok.c"),
               "an allowed include was flagged:\n%s", out);
        t_rmtree(d);
    }
}
