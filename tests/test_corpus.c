/* test_corpus.c — corpora read to the end: a gzip corpus is inflated
 * through every member with its trailer (CRC-32, length) checked, so a truncated file, a
 * bad trailer or bytes after the end are errors; plain files, several members and
 * directories read exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/data.h"

/* load path; 0 ok with the corpus in c, else the error in err */
static int load(const char *path, dm_corpus *c, char *err, size_t n) {
    int rc = dm_corpus_load(c, path, err, n);
    printf("  %s: %s\n", path, rc ? err : "ok");
    return rc;
}

TEST(corpus_gzip_read_to_the_end) {
    char d[256], cmd[2048], p[512], err[1024];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, "cd %s && zcat " T_CORPUS " > plain.txt && cp " T_CORPUS " good.gz"
             " && head -c 50000 good.gz > trunc.gz && cp good.gz crc.gz && cp good.gz len.gz"
             " && cp good.gz tail.gz && printf xyz >> tail.gz"
             " && head -c 1000 plain.txt | gzip -c > two.gz && tail -c +1001 plain.txt | gzip -c"
             " >> two.gz && mkdir dir && cp trunc.gz dir/", d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    /* flip a bit of the CRC-32 (trailer byte 0) and of the length (trailer byte 4) */
    const char *flips[][2] = {{"crc.gz", "8"}, {"len.gz", "4"}};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", d, flips[i][0]);
        size_t n;
        char *b = t_slurp(p, &n);
        CHECK(b && n > 8);
        b[n - (size_t)atoi(flips[i][1])] ^= 1;
        CHECK(t_spit(p, b, n) == 0);
        free(b);
    }
    dm_corpus plain, c;
    snprintf(p, sizeof p, "%s/plain.txt", d);
    CHECK(load(p, &plain, err, sizeof err) == 0 && plain.n > 4000000);
    const char *good[] = {"good.gz", "two.gz"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", d, good[i]);
        CHECK(load(p, &c, err, sizeof err) == 0);
        CHECKF(c.n == plain.n && !memcmp(c.bytes, plain.bytes, c.n), "%s: %zu bytes, not the "
               "%zu of the plain file", good[i], c.n, plain.n);
        CHECK(dm_corpus_crc32(&c) == dm_corpus_crc32(&plain));
        dm_corpus_free(&c);
    }
    const char *bad[][2] = {{"trunc.gz", "is truncated"},
                            {"crc.gz", "incorrect data check"},
                            {"len.gz", "incorrect length check"},
                            {"tail.gz", "bytes after the end of its gzip data"},
                            {"dir", "trunc.gz is truncated"}};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", d, bad[i][0]);
        CHECKF(load(p, &c, err, sizeof err) != 0 && strstr(err, bad[i][1]), "%s: %s", bad[i][0],
               err);
        CHECK(c.bytes == NULL && c.n == 0);
    }
    dm_corpus_free(&plain);
    /* the command: exit 2, one line, no run directory */
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s/trunc.gz --out %s/run " T_TINY, d, d);
    t_expect(cmd, 2, "is truncated", NULL, 0);
    snprintf(p, sizeof p, "%s/run", d);
    CHECK(!t_exists(p));
    t_rmtree(d);
}
