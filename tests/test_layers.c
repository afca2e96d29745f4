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

/* the op layer's seams (docs/backends.md): each forbidden arrow planted in a tree of its
 * own beside the includes that are allowed (the cpu backend calling its kernels, the
 * references and the generic op layer; the fenced backend using the cpu backend's
 * interface; the registry naming a backend; jobs using the op layer's interface; ops
 * using the references) */
TEST(include_layers_catch_seams) {
    static const struct { const char *file, *inc, *said; } BAD[] = {
        {"src/ops/x.c", "backends/cpu/cpu.h",
         "src/ops/x.c (ops, layer 2) includes src/backends/cpu/cpu.h (backends, layer 3): an "
         "include that points up"},
        {"src/optim/o.c", "backends/cpu/kernels/k.h",
         "src/optim/o.c includes src/backends/cpu/kernels/k.h: only the cpu backend"},
        {"src/model/m.c", "backends/cpu/cpu.h",
         "src/model/m.c (model, layer 4) includes src/backends/cpu/cpu.h: above the backends"},
        {"src/optim/o.c", "ref/r.h",
         "src/optim/o.c (optim, layer 5) includes src/ref/r.h: above the backends"},
        {"src/jobs/j.c", "ops/op.h",
         "src/jobs/j.c (jobs, layer 7) includes src/ops/op.h: an internal of the op layer"},
        {"src/backends/fenced/g.c", "backends/cpu/t.h",
         "src/backends/fenced/g.c (the fenced backend) includes src/backends/cpu/t.h: another "
         "backend is reached through its interface, backends/cpu/cpu.h"},
        {"src/backends/fenced/g.c", "backends/cpu/kernels/k.h",
         "src/backends/fenced/g.c includes src/backends/cpu/kernels/k.h: only the cpu backend"},
        {"src/backends/cpu/kernels/k2.c", "ops/op.h",
         "src/backends/cpu/kernels/k2.c (a kernel of the cpu backend) includes src/ops/op.h"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char d[256], cmd[4096], out[8192], path[512];
        t_tmpdir(d, sizeof d);
        snprintf(cmd, sizeof cmd,
                 "cd %s && mkdir -p src/backends/cpu/kernels src/backends/fenced src/ref "
                 "src/ops src/model src/optim src/jobs include && : > include/dormouse.h && "
                 ": > src/backends/cpu/kernels/k.h && : > src/backends/cpu/cpu.h && "
                 ": > src/backends/cpu/t.h && : > src/ref/r.h && : > src/ops/op.h && "
                 ": > src/ops/ops.h && "
                 "printf '#include \"backends/cpu/kernels/k.h\"\\n#include \"ops/op.h\"\\n"
                 "#include \"ref/r.h\"\\n#include \"backends/cpu/t.h\"\\n' > src/backends/cpu/t.c && "
                 "printf '#include \"ref/r.h\"\\n' > src/backends/cpu/kernels/k.c && "
                 "printf '#include \"backends/cpu/cpu.h\"\\n#include \"ops/op.h\"\\n' > "
                 "src/backends/fenced/f.c && "
                 "printf '#include \"backends/cpu/cpu.h\"\\n' > src/backends/registry.c && "
                 "printf '#include \"ref/r.h\"\\n#include \"ops/op.h\"\\n' > src/ops/y.c && "
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
        CHECKF(!strstr(out, "src/backends/cpu/t.c") && !strstr(out, "src/backends/fenced/f.c") &&
                   !strstr(out, "src/backends/registry.c") && !strstr(out, "kernels/k.c") &&
                   !strstr(out, "src/ops/y.c") && !strstr(out, "src/jobs/ok.c"),
               "an allowed include was flagged:\n%s", out);
        t_rmtree(d);
    }
}

/* a circle of modules: optim.c includes its internal header, which includes muon.h, and
 * muon.c includes optim.h (optim_internal.h is optim's: no optim_internal.c). Named, exit
 * 1; the same tree without muon.c's include passes. */
TEST(include_layers_catch_circles) {
    for (int circle = 1; circle >= 0; circle--) {
        char d[256], cmd[4096], out[8192], path[512];
        t_tmpdir(d, sizeof d);
        snprintf(cmd, sizeof cmd,
                 "cd %s && mkdir -p src/optim include && : > include/dormouse.h && "
                 ": > src/optim/optim.h && : > src/optim/muon.h && "
                 "printf '#include \"optim/optim.h\"\\n#include \"optim/optim_internal.h\"\\n' "
                 "> src/optim/optim.c && "
                 "printf '#include \"optim/muon.h\"\\n#include \"optim/optim.h\"\\n' > "
                 "src/optim/optim_internal.h && "
                 "printf '#include \"optim/muon.h\"\\n%s' > src/optim/muon.c",
                 d, circle ? "#include \"optim/optim.h\"\\n" : "");
        CHECK(t_run(cmd, NULL, 0) == 0);
        snprintf(path, sizeof path, "%s/out", d);
        snprintf(cmd, sizeof cmd, LAYERS " %s", d);
        int rc = t_run_out(cmd, path, out, sizeof out);
        if (!circle) {
            CHECKF(rc == 0, "no circle, but exit %d:\n%s", rc, out);
        } else {
            const char *line = strstr(out, "an include circle through the modules:");
            CHECKF(rc == 1 && line, "the circle is not named (exit %d):\n%s", rc, out);
            if (line) {
                const char *end = strchr(line, '\n');
                size_t len = end ? (size_t)(end - line) : strlen(line);
                char one[512];
                snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1),
                         line);
                CHECKF(strstr(one, "src/optim/optim") && strstr(one, "src/optim/muon"),
                       "the circle's modules are not named: %s", one);
            }
        }
        t_rmtree(d);
    }
}
