/* test_gate_selftest.c — the test gate (scripts/test_gate.sh) never hides a failure.
 *
 * Each case builds a dummy CTest project (tests/fixtures/gate/CMakeLists.txt) in a
 * temporary directory, with test outcomes and designed-red markers of its own, runs the
 * gate on it — directly, through `| tee` under pipefail, and through the real Makefile's
 * `test` recipe — and checks its exit status and what it names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define GATE "bash " DM_SOURCE_DIR "/scripts/test_gate.sh"

/* A dummy project under a fresh temp dir d: cases ("NAME pass|fail|crash" lines) and
 * designed-red markers; configured into d/build. */
static void project(char *d, size_t n, const char *cases, const char *red) {
    char path[512], cmd[1024];
    t_tmpdir(d, n);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/src/tests && cp " DM_SOURCE_DIR
             "/tests/fixtures/gate/CMakeLists.txt %s/src/", d, d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(path, sizeof path, "%s/src/cases.txt", d);
    FILE *f = fopen(path, "w");
    fputs(cases, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/src/tests/designed_red.txt", d);
    f = fopen(path, "w");
    fputs("# Designed-red tests of the dummy project: name  # why\n", f);
    fputs(red, f);
    fclose(f);
    char err[2048];
    snprintf(cmd, sizeof cmd, "cmake -S %s/src -B %s/build >/dev/null", d, d);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "cmake on the dummy project failed: %s", err);
}

/* Run `sh -c cmd` with stdout+stderr into d/out; return the exit status, text in out. */
static int run(const char *d, const char *cmd, char *out, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/out", d);
    return t_run_out(cmd, path, out, n);
}

/* The gate on d/build three ways: directly, piped through tee (pipefail: the pipeline
 * has the gate's status), and as the recipe of the real Makefile's `test` target (with
 * `build` taken as done). Checks all three agree with `want_red`; returns the direct
 * output in out. */
static void gate_all_ways(const char *d, int want_red, char *out, size_t n) {
    char cmd[1024], tmp[16384];
    snprintf(cmd, sizeof cmd, GATE " %s/build 2", d);
    int rc = run(d, cmd, out, n);
    CHECKF((rc != 0) == want_red, "gate exit %d, expected %s:\n%s", rc,
           want_red ? "non-zero" : "0", out);
    snprintf(cmd, sizeof cmd, "bash -o pipefail -c '" GATE " %s/build 2 | tee %s/tee.log'", d, d);
    rc = run(d, cmd, tmp, sizeof tmp);
    CHECKF((rc != 0) == want_red, "gate | tee: exit %d", rc);
    snprintf(cmd, sizeof cmd, "make -s -C " DM_SOURCE_DIR " -o build test BUILD=%s/build JOBS=2", d);
    rc = run(d, cmd, tmp, sizeof tmp);
    CHECKF((rc != 0) == want_red, "make test: exit %d:\n%s", rc, tmp);
    snprintf(cmd, sizeof cmd, "bash -o pipefail -c 'make -s -C " DM_SOURCE_DIR
             " -o build test BUILD=%s/build JOBS=2 | tee %s/tee2.log'", d, d);
    rc = run(d, cmd, tmp, sizeof tmp);
    CHECKF((rc != 0) == want_red, "make test | tee: exit %d", rc);
}

TEST(gate_red_on_failing_test) {
    char d[256], out[16384];
    project(d, sizeof d, "ok_one pass\nbad_two fail\nok_three pass\n", "");
    gate_all_ways(d, 1, out, sizeof out);
    CHECKF(strstr(out, "failed: bad_two (Failed)") != NULL, "the failure is not named:\n%s", out);
    CHECK(strstr(out, "test gate: FAILED") != NULL);
    t_rmtree(d);
}

TEST(gate_green_when_all_pass) {
    char d[256], out[16384];
    project(d, sizeof d, "ok_one pass\nok_two pass\n", "");
    gate_all_ways(d, 0, out, sizeof out);
    CHECKF(strstr(out, "all 2 tests passed") != NULL, "no pass summary:\n%s", out);
    t_rmtree(d);
}

TEST(gate_designed_red_failure_stays_green) {
    char d[256], out[16384];
    project(d, sizeof d, "ok_one pass\ngap_two fail\n", "gap_two  # a known gap\n");
    gate_all_ways(d, 0, out, sizeof out);
    CHECKF(strstr(out, "designed-red") && strstr(out, "gap_two  # a known gap"),
           "the designed-red test is not listed in the summary:\n%s", out);
    t_rmtree(d);
}

TEST(gate_designed_red_pass_turns_red) {
    char d[256], out[16384];
    project(d, sizeof d, "ok_one pass\ngap_two pass\n", "gap_two  # a gap now closed\n");
    gate_all_ways(d, 1, out, sizeof out);
    CHECKF(strstr(out, "UNEXPECTED PASS: gap_two") != NULL, "the pass is not named:\n%s", out);
    CHECKF(strstr(out, "remove its marker from tests/designed_red.txt") != NULL,
           "no instruction to remove the marker:\n%s", out);
    t_rmtree(d);
}

TEST(gate_skip_is_listed_and_green) {
    char d[256], out[16384];
    project(d, sizeof d, "ok_one pass\nnot_here skip\n", "");
    gate_all_ways(d, 0, out, sizeof out);
    CHECKF(strstr(out, "skipped on this machine") && strstr(out, "not_here: no such feature here"),
           "the skipped test and its reason are not listed:\n%s", out);
    CHECKF(strstr(out, "1 passed, 1 skipped") != NULL, "the summary does not count the skip:\n%s",
           out);
    t_rmtree(d);
}

TEST(gate_red_on_crash_or_no_tests) {
    char d[256], out[16384], cmd[1024];
    /* a crash is never an expected failure, designed-red or not */
    project(d, sizeof d, "ok_one pass\ngap_two crash\n", "gap_two  # a known gap\n");
    snprintf(cmd, sizeof cmd, GATE " %s/build 2", d);
    CHECKF(run(d, cmd, out, sizeof out) != 0, "a crash kept the gate green:\n%s", out);
    CHECKF(strstr(out, "gap_two (SEGFAULT)") != NULL, "the crash is not named:\n%s", out);
    t_rmtree(d);
    /* a project without tests, and a directory that was never configured */
    project(d, sizeof d, "", "");
    snprintf(cmd, sizeof cmd, GATE " %s/build 2", d);
    CHECKF(run(d, cmd, out, sizeof out) != 0, "no tests kept the gate green:\n%s", out);
    snprintf(cmd, sizeof cmd, GATE " %s/nothing 2", d);
    CHECKF(run(d, cmd, out, sizeof out) != 0, "an unconfigured dir kept the gate green:\n%s", out);
    t_rmtree(d);
}
