/* test_fuzz.c — the fuzz corpus replayed through the fuzz targets (fuzz/targets.h) in the
 * plain build: every seed of fuzz/corpus/T and every input of fuzz/regress/T (each one
 * crashed or hit undefined behaviour once) runs through the same entry point as the
 * libFuzzer harness. A crash fails the case (under `make asan`, so does a sanitizer
 * report); an input named accept-* must be accepted, reject-* refused. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "targets.h"

/* Every file of dir through fn; returns how many ran. */
static int replay(const char *dir, int (*fn)(const uint8_t *, size_t)) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int ran = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        CHECKF(f != NULL, "cannot open %s", path);
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
        size_t got = fread(buf, 1, (size_t)n, f);
        fclose(f);
        int rc = fn(buf, got);
        free(buf);
        ran++;
        if (!strncmp(e->d_name, "accept-", 7))
            CHECKF(rc == 0, "%s: refused, expected accepted", path);
        if (!strncmp(e->d_name, "reject-", 7))
            CHECKF(rc != 0, "%s: accepted, expected refused", path);
    }
    closedir(d);
    return ran;
}

static void replay_target(const char *t, int (*fn)(const uint8_t *, size_t)) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", DM_SOURCE_DIR, t);
    int seeds = replay(dir, fn);
    snprintf(dir, sizeof dir, "%s/fuzz/regress/%s", DM_SOURCE_DIR, t);
    int regress = replay(dir, fn);
    printf("  %s: %d seeds, %d regression inputs\n", t, seeds, regress);
    CHECKF(seeds > 0, "no seeds in fuzz/corpus/%s", t);
}

TEST(fuzz_replay_safetensors) { replay_target("safetensors", dm_fuzz_safetensors); }
TEST(fuzz_replay_ckpt) { replay_target("ckpt", dm_fuzz_ckpt); }
TEST(fuzz_replay_config) { replay_target("config", dm_fuzz_config); }
