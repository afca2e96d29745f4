/* version.c — `dormouse --version`: the version, the commit it was built from, what the
 * build holds (backends, MPI, plots) and what this CPU offers. */
#include <stdio.h>
#include <string.h>

#include <dm_commit.h> /* DM_COMMIT, written by cmake/commit.cmake at every build */

#include "cli/cli.h"
#include "cli/commands.h"
#include "model/model.h"  /* dm_model_precision */
#include "ops/backend.h"   /* dm_backend_cuda_missing */
#include "ops/precision.h" /* dm_precision_describe */

#ifndef DM_HAVE_PLPLOT
#define DM_HAVE_PLPLOT 0
#endif

/* The CPU's model name and the flags of /proc/cpuinfo that matter to dormouse's kernels. */
static void cpu_line(char *buf, size_t n) {
    static const char *const wanted[] = {"avx2",     "fma",      "avx512f",  "avx512bw",
                                         "avx512_bf16", "amx_tile", "amx_bf16", "neon",
                                         "asimd",    NULL};
    char line[8192], model[256] = "unknown cpu", have[256] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    int got_flags = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\r\n")] = 0;
        if (!strncmp(line, "model name", 10) && !strcmp(model, "unknown cpu"))
            snprintf(model, sizeof model, "%s", v);
        if ((!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)) && !got_flags) {
            got_flags = 1;
            size_t used = 0;
            for (int i = 0; wanted[i]; i++) {
                char pad[64];
                snprintf(pad, sizeof pad, " %s ", wanted[i]);
                char all[8200];
                snprintf(all, sizeof all, " %s ", v);
                if (strstr(all, pad))
                    used += (size_t)snprintf(have + used, sizeof have - used, "%s%s",
                                             used ? " " : "", wanted[i]);
            }
        }
    }
    if (f) fclose(f);
    snprintf(buf, n, "%s; %s", model, have[0] ? have : "none of avx2 fma avx512f amx");
}

int dm_cmd_version(void) {
    char cpu[600];
    cpu_line(cpu, sizeof cpu);
    const char *cuda = dm_backend_cuda_missing(0);
    /* the precision record of the default config here: what precision=auto runs */
    char prec[512] = "unknown", err[512];
    dm_config c;
    dm_config_default(&c);
    c.threads = 1;
    dm_model *m = dm_model_create(&c, err, sizeof err);
    if (m) dm_precision_describe(dm_model_precision(m), prec, sizeof prec);
    dm_model_free(m);
    printf("dormouse %s (commit %s)\n", DM_VERSION, DM_COMMIT);
    if (DM_HAVE_CUDA)
        printf("backends: cpu (OpenBLAS, oneDNN), cuda (the module libdormouse-cuda.so, "
               "loaded where a device answers; device 0: %s)\n", cuda ? cuda : "answers");
    else
        printf("backends: cpu (OpenBLAS, oneDNN); no cuda: %s\n", cuda);
    printf("mpi: %s; plots: %s\n",
           DM_HAVE_MPI ? "built in (mpirun -np N dormouse train ...)" : "not built (one process)",
           DM_HAVE_PLPLOT ? "PLplot" : "not built (no PLplot)");
    printf("cpu: %s\n", cpu);
    printf("precision=auto here: %s\n", prec);
    return EXIT_OK;
}
