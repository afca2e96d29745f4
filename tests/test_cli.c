/* test_cli.c — the `dormouse` command on bad input (each case a clear one-line error,
 * exit code 2, no crash, no partial output files), and on SIGTERM. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "io/ckpt.h"

#define CORPUS T_CORPUS
#define TINY T_TINY

/* Run cmd; expect exit `code`, a single stderr line containing `needle`. */
static void expect(const char *cmd, int code, const char *needle) {
    t_expect(cmd, code, needle, NULL, 0);
}

TEST(cli_bad_corpus) {
    char d[256], cmd[2048], run[512], f[512];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s/missing.txt --out %s " TINY, d, run);
    expect(cmd, 2, "not found");
    CHECKF(!t_exists(run), "run directory created for a failed run");
    snprintf(f, sizeof f, "%s/empty.txt", d);
    fclose(fopen(f, "w"));
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY, f, run);
    expect(cmd, 2, "empty");
    CHECK(!t_exists(run));
    snprintf(f, sizeof f, "%s/small.txt", d);
    FILE *fp = fopen(f, "w");
    for (int i = 0; i < 100; i++) fputs("In the beginning. ", fp); /* 1800 bytes < 1024+33+... */
    fclose(fp);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY " --set eval_window=1800", f, run);
    expect(cmd, 2, "too small");
    CHECK(!t_exists(run));
    snprintf(f, sizeof f, "%s/emptydir", d);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && " DM_CLI " train --data %s --out %s " TINY, f, f, run);
    expect(cmd, 2, "no regular files");
    t_rmtree(d);
}

TEST(cli_bad_flags_and_keys) {
    char d[256], cmd[2048], run[512];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --set no_such_key=3", run);
    expect(cmd, 2, "no_such_key");
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --set n_head=0", run);
    expect(cmd, 2, "n_head");
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --set mixer=mamba", run);
    expect(cmd, 2, "kda|gdn");
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --set head_dim=32", run);
    expect(cmd, 2, "head_dim");
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --set lr", run);
    expect(cmd, 2, "key=value");
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --bogus", run);
    expect(cmd, 2, "unknown option --bogus");
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --until", run);
    expect(cmd, 2, "needs a value");
    snprintf(cmd, sizeof cmd, "echo '{\"d_model\": \"wide\"}' > %s/c.json && " DM_CLI
             " train --out %s --config %s/c.json", d, run, d);
    expect(cmd, 2, "d_model");
    snprintf(cmd, sizeof cmd, "echo 'not json' > %s/c.json && " DM_CLI
             " train --out %s --config %s/c.json", d, run, d);
    expect(cmd, 2, "JSON");
    CHECK(!t_exists(run));
    expect(DM_CLI " frobnicate", 2, "unknown command");
    expect(DM_CLI " sample", 2, "missing CKPT");
    expect(DM_CLI " sample x --temperature -1", 2, "--temperature");
    t_rmtree(d);
}

TEST(cli_bad_checkpoints) {
    char d[256], cmd[4096], run[512], err[4096];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY " --set steps=2", CORPUS, run);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "tiny training run failed (%d): %s", rc, err);
    /* the good checkpoint evaluates */
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s", run, CORPUS);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    /* truncated */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/trunc && cp %s/ckpt-00000002/model.safetensors %s/trunc/ && "
             "truncate -s -1000 %s/trunc/model.safetensors && " DM_CLI " eval %s/trunc",
             d, run, d, d, d);
    expect(cmd, 2, "truncated");
    /* truncated inside the header */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/trunc2 && head -c 100 %s/ckpt-00000002/model.safetensors > "
             "%s/trunc2/model.safetensors && " DM_CLI " eval %s/trunc2", d, run, d, d);
    expect(cmd, 2, "not a safetensors checkpoint");
    /* not a checkpoint at all */
    snprintf(cmd, sizeof cmd, "echo 'hello world, not a checkpoint' > %s/x.safetensors && " DM_CLI
             " eval %s/x.safetensors", d, d);
    expect(cmd, 2, "not a safetensors checkpoint");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s/nothing-here", d);
    expect(cmd, 2, "not found");
    /* config that disagrees with the flags */
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --set d_model=64", run);
    expect(cmd, 2, "d_model");
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --set n_layer=3", run);
    expect(cmd, 2, "n_layer");
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY, CORPUS, run);
    expect(cmd, 2, "already holds a run");
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s/nothing", d);
    expect(cmd, 2, "not a run directory");
    /* nothing was written into the run by the failed commands */
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 7", run);
    CHECKF(t_run(cmd, NULL, 0) == 0, "run directory changed by failed commands");
    t_rmtree(d);
}

TEST(cli_help_and_sample) {
    char d[256], cmd[4096], err[4096];
    t_tmpdir(d, sizeof d);
    CHECK(t_run(DM_CLI " --help", err, sizeof err) == 0);
    CHECK(t_run(DM_CLI " train --help | grep -q retract_every", err, sizeof err) == 0);
    CHECK(t_run(DM_CLI " eval --help", err, sizeof err) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s/run " TINY " --set steps=2 && "
             DM_CLI " sample %s/run --len 20 --prompt Amen --seed 3 > %s/s1 && "
             DM_CLI " sample %s/run --len 20 --prompt Amen --seed 3 > %s/s2 && cmp %s/s1 %s/s2 && "
             "test $(head -c 4 %s/s1) = Amen && test $(wc -c < %s/s1) -eq 25",
             CORPUS, d, d, d, d, d, d, d, d, d);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "sample: %d %s", rc, err);
    t_rmtree(d);
}

/* The "model keys cannot change" refusal is one check: resume, eval, sample and the
 * checkpoint loader give the same line. */
TEST(cli_model_key_refusal_same_everywhere) {
    char d[256], cmd[4096], run[512], err[4096], dir[4096], want[DM_ERRLEN], line[DM_ERRLEN + 16];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY " --set steps=2", CORPUS, run);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "tiny training run failed (%d): %s", rc, err);
    /* what the check says for n_layer 1 -> 3 */
    dm_config saved, asked;
    long step;
    CHECK(dm_ckpt_resolve(run, dir, sizeof dir, err, sizeof err) == 0);
    CHECK(dm_ckpt_read_config(dir, &saved, &step, err, sizeof err) == 0);
    asked = saved;
    asked.n_layer = 3;
    CHECK(dm_config_check_model(&saved, &asked, want, sizeof want) != 0);
    snprintf(line, sizeof line, "error: %s\n", want);
    printf("  %s", line);
    const char *cmds[] = {"train --resume %s --set n_layer=3", "eval %s --set n_layer=3",
                          "sample %s --set n_layer=3"};
    for (int i = 0; i < 3; i++) {
        char c[1024];
        snprintf(c, sizeof c, cmds[i], run);
        snprintf(cmd, sizeof cmd, DM_CLI " %s", c);
        rc = t_run(cmd, err, sizeof err);
        CHECKF(rc == 2 && !strcmp(err, line), "dormouse %s: exit %d, %s", c, rc, err);
    }
    /* the loader, given a model of another depth */
    dm_model *m = dm_model_create(&asked, err, sizeof err);
    CHECK(m != NULL);
    if (m) CHECK(dm_ckpt_load(dir, m, NULL, err, sizeof err) != 0 && !strcmp(err, want));
    dm_model_free(m);
    t_rmtree(d);
}

/* SIGTERM (as SIGINT) stops training after the current step with a checkpoint, exit 143
 * (128 + SIGTERM); the run resumes from it. */
TEST(cli_train_interrupt_saves_checkpoint) {
    char d[256], cmd[4096], run[512], err[4096], dir[4096];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY " --set steps=1000000 "
             "--set eval_every=0 & pid=$!; "
             "for i in $(seq 300); do [ -s %s/metrics.jsonl ] && break; sleep 0.1; done; "
             "kill -TERM $pid; wait $pid", CORPUS, run, run);
    int rc = t_run(cmd, err, sizeof err);
    printf("  [%d] %s", rc, err);
    CHECKF(rc == 143, "interrupted training exited %d (143 expected for SIGTERM)", rc);
    CHECKF(strstr(err, "interrupted at step ") && strstr(err, "--resume"), "stderr: %s", err);
    CHECK(strstr(err, "error:") == NULL);
    long step = 0;
    dm_config saved;
    CHECK(dm_ckpt_resolve(run, dir, sizeof dir, err, sizeof err) == 0);
    CHECK(dm_ckpt_read_config(dir, &saved, &step, err, sizeof err) == 0 && step >= 1);
    /* two more steps from the checkpoint */
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until %ld", run, step + 2);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "resume after the interrupt: %d %s", rc, err);
    CHECK(dm_ckpt_resolve(run, dir, sizeof dir, err, sizeof err) == 0);
    long step2 = 0;
    CHECK(dm_ckpt_read_config(dir, &saved, &step2, err, sizeof err) == 0 && step2 == step + 2);
    t_rmtree(d);
}

/* 1 when process pid has a file descriptor open on the file target (a real path) */
static int has_open(int pid, const char *target) {
    char dir[64], p[400], link[4096];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(p, link, sizeof link - 1);
        if (n > 0) {
            link[n] = 0;
            found = !strcmp(link, target);
        }
    }
    closedir(d);
    return found;
}

/* Case 10: a signal while the command is still setting up (reading its corpus, before
 * any step) ends it in order: exit 128 + the signal (130 SIGINT, 143 SIGTERM), one line
 * on stderr, nothing written. The command is caught with its corpus open. */
TEST(cli_signal_during_setup) {
    char d[256], run[512], cmd[8192], errp[512], corpus[4096];
    t_tmpdir(d, sizeof d);
    if (!realpath(CORPUS, corpus) || !t_exists("/proc/self/fd")) {
        t_skip("no /proc to watch the command's open files");
        t_rmtree(d);
        return;
    }
    const int sigs[] = {SIGINT, SIGTERM, SIGTERM, SIGINT};
    for (int i = 0; i < 4; i++) {
        snprintf(run, sizeof run, "%s/run%d", d, i);
        snprintf(errp, sizeof errp, "%s/err%d", d, i);
        snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY " --set steps=3",
                 corpus, run);
        int caught = 0, rc = 0;
        for (int attempt = 0; attempt < 20 && !caught; attempt++) {
            int pid = t_spawn(cmd, errp);
            for (int k = 0; k < 200000 && !caught; k++) {
                if (has_open(pid, corpus)) {
                    kill(pid, sigs[i]);
                    caught = 1;
                }
                if (!caught && kill(pid, 0) != 0) break; /* gone (a zombie still answers) */
            }
            if (!caught) kill(pid, SIGKILL);
            rc = t_wait(pid);
            if (!caught) t_rmtree(run);
        }
        CHECKF(caught, "never saw the command with its corpus open");
        if (!caught) break;
        char *err = t_slurp(errp, NULL);
        printf("  signal %d while reading the corpus: exit %d, %s", sigs[i], rc, err ? err : "\n");
        CHECKF(rc == 128 + sigs[i], "exit %d, expected %d (%s)", rc, 128 + sigs[i],
               rc < 0 ? "killed by the signal" : "an exit code");
        CHECKF(err && strstr(err, "interrupted before the first step") &&
               strchr(err, '\n') == err + strlen(err) - 1, "stderr: %s", err ? err : "");
        CHECKF(!t_exists(run), "the interrupted command left %s", run);
        free(err);
    }
    t_rmtree(d);
}

/* `dormouse --version`: the version of the build, a commit (or "unknown" outside git),
 * the backends, MPI and plots as built, and this CPU with its bf16 answer. */
TEST(cli_version_says_build_and_cpu) {
    char d[256], cmd[1024], out[4096], log[400];
    t_tmpdir(d, sizeof d);
    snprintf(log, sizeof log, "%s/v.log", d);
    snprintf(cmd, sizeof cmd, DM_CLI " --version");
    CHECK(t_run_out(cmd, log, out, sizeof out) == 0);
    printf("%s", out);
    CHECK(!strncmp(out, "dormouse ", 9) && strstr(out, " (commit "));
    CHECK(strstr(out, "\nbackends: cpu (OpenBLAS, oneDNN)") != NULL);
    CHECK(strstr(out, DM_HAVE_CUDA ? "cuda (the module libdormouse-cuda.so, loaded where a "
                                     "device answers; device 0: "
                                   : "no cuda: ") != NULL);
    CHECK(strstr(out, "\nmpi: ") && strstr(out, "; plots: "));
    CHECK(strstr(out, "\ncpu: ") && strstr(out, "\nprecision=auto here: matmuls "));
    t_rmtree(d);
}
