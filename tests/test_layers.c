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
             "printf '#include \"kernels/cpu/k.h\"\\n' > src/ops/ops.h && : > src/kernels/cpu/k.h && "
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
