/* comm_nompi.c (test) — the comm of a build without MPI (src/base/comm.c with
 * src/base/comm_nompi.c), built and run in every build as the CTest case
 * comm_without_mpi: one process works and every collective is a no-op; a launch by an MPI
 * launcher is refused with the packages to install. Standalone (no libdormouse, which
 * holds the MPI transport in an MPI build): exits 0 on success, 1 on a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/comm.h"

static int failures;
#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            printf("  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                  \
            failures++;                                                                \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                       "MPI_LOCALNRANKS", "PMIX_RANK"};
    for (int i = 0; i < 5; i++) unsetenv(vars[i]);
    char err[512] = "";
    dm_comm *c = NULL;
    /* one process: rank 0 of 1, the collectives move nothing and succeed */
    EXPECT(dm_comm_start(&argc, &argv, &c, err, sizeof err) == 0 && c);
    EXPECT(dm_comm_rank(c) == 0 && dm_comm_size(c) == 1 && dm_comm_local_size(c) == 1);
    EXPECT(!dm_comm_is_mpi(c) && dm_comm_error(c)[0] == 0);
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    size_t off[2] = {0, 4};
    EXPECT(dm_comm_allgather(c, a, off, sizeof(float)) == 0 && a[3] == 4);
    EXPECT(dm_comm_alltoall_shards(c, a, b, off) == 0 && !memcmp(a, b, sizeof a));
    EXPECT(dm_comm_bcast(c, a, 4, sizeof(float), 0) == 0);
    int code = 2, stop = 1;
    char msg[64] = "mine";
    EXPECT(dm_comm_agree(c, &code, msg, sizeof msg, &stop) == 0);
    EXPECT(code == 2 && stop == 1 && !strcmp(msg, "mine"));
    dm_comm_stats st = dm_comm_get_stats(c);
    EXPECT(st.bytes == 0 && st.calls == 0);
    dm_comm_end(c, 0);
    /* NULL is one process too */
    EXPECT(dm_comm_rank(NULL) == 0 && dm_comm_size(NULL) == 1);
    EXPECT(dm_comm_allgather(NULL, a, off, sizeof(float)) == 0);
    /* started by mpirun (Open MPI) or by Hydra: refused, naming what to install */
    const char *launch[2][2] = {{"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_SIZE", "4"}};
    for (int i = 0; i < 2; i++) {
        setenv(launch[i][0], launch[i][1], 1);
        c = NULL;
        err[0] = 0;
        EXPECT(dm_comm_start(&argc, &argv, &c, err, sizeof err) == 1 && c == NULL);
        printf("  %s=%s: %s\n", launch[i][0], launch[i][1], err);
        EXPECT(strstr(err, "built without MPI") && strstr(err, "libopenmpi-dev"));
        unsetenv(launch[i][0]);
    }
    printf("%s comm_without_mpi\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
