/* test_rundir.c — run directories that nothing can damage: one writer at a time, nothing
 * left by a failed command, a resume that cannot run touches nothing and trains only on
 * its own corpus, --out naming a file, pruning and a killed writer's leftovers, falling
 * back to the newest checkpoint that loads. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "io/ckpt.h"
#include "io/rundir.h"

#define TRAIN DM_CLI " train --data " T_CORPUS " " T_TINY

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* wait up to 30 s for run to hold a checkpoint. Not a fixed name: with ckpt_every=1 a
 * tiny model writes a checkpoint every few ms and pruning removes ckpt-2 before a poll
 * may see it (the test failed 2 runs in 15 so). */
static int wait_for_ckpt(const char *run) {
    char p[600], err[512];
    for (int i = 0; i < 3000; i++) {
        if (dm_ckpt_resolve(run, p, sizeof p, err, sizeof err) == 0) return 1;
        sleep_ms(10);
    }
    return 0;
}

/* the seed in a run's config.json, and in its newest checkpoint */
static long long seed_of(const char *run, long long *ckpt_seed) {
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/config.json", run);
    char *t = t_slurp(p, NULL);
    cJSON *o = t ? cJSON_Parse(t) : NULL, *s = cJSON_GetObjectItem(o, "seed");
    long long seed = cJSON_IsString(s) ? atoll(s->valuestring) : cJSON_IsNumber(s) ? (long long)s->valuedouble : -1;
    cJSON_Delete(o);
    free(t);
    dm_config c;
    *ckpt_seed = -1;
    if (dm_ckpt_resolve(run, p, sizeof p, err, sizeof err) == 0 &&
        dm_ckpt_read_config(p, &c, NULL, err, sizeof err) == 0)
        *ckpt_seed = (long long)c.seed;
    return seed;
}

/* the pid of a process that has exited (and was reaped) */
static int dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (int)p;
}

/* Case 1: two writers of one run directory. */
TEST(rundir_second_writer_refused) {
    char d[256], run[512], cmd[4096], p[800], needle[700];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, TRAIN " --out %s --set seed=1 --set steps=1000000 "
             "--set ckpt_every=1 --set eval_every=0", run);
    int a = t_spawn(cmd, NULL);
    CHECKF(wait_for_ckpt(run), "the first training wrote no checkpoint");
    snprintf(needle, sizeof needle, "%s is in use by process %d", run, a);
    snprintf(cmd, sizeof cmd, TRAIN " --out %s --set seed=2 --set steps=5", run);
    t_expect(cmd, 2, needle, NULL, 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --set steps=2000000", run);
    t_expect(cmd, 2, needle, NULL, 0);
    kill(a, SIGTERM);
    int rc = t_wait(a);
    CHECKF(rc == 143, "the first training exited %d after SIGTERM, expected 143", rc);
    long long cs, s = seed_of(run, &cs);
    CHECKF(s == 1 && cs == 1, "config.json seed %lld, checkpoint seed %lld: both must be 1", s, cs);
    snprintf(p, sizeof p, "%s/.lock", run);
    CHECKF(!t_exists(p), "the lock file outlived its writer");

    /* a stale lock (its process gone) is taken over */
    char text[32];
    int n = snprintf(text, sizeof text, "%d\n", dead_pid());
    CHECK(t_spit(p, text, (size_t)n) == 0);
    long step = 0;
    dm_config c;
    char mp[600], err[512];
    CHECK(dm_ckpt_resolve(run, mp, sizeof mp, err, sizeof err) == 0);
    CHECK(dm_ckpt_read_config(mp, &c, &step, err, sizeof err) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until %ld", run, step + 1);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "resume over a stale lock: exit %d %s", rc, err);

    /* held by this process: train, resume, an A/B sweep and one of its cells refuse */
    int fd;
    CHECK(dm_lock_dir(run, &fd, err, sizeof err) == DM_RUNDIR_OK);
    snprintf(needle, sizeof needle, "in use by process %d", (int)getpid());
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until %ld", run, step + 5);
    t_expect(cmd, 2, needle, NULL, 0);
    dm_unlock_dir(run, fd);
    char ab[512], cell[700];
    snprintf(ab, sizeof ab, "%s/ab", d);
    snprintf(cell, sizeof cell, "%s/control/seed1", ab);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", cell);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s --data " T_CORPUS " --set d_model=32 "
             "--set n_layer=1 --set n_head=2 --set head_dim=16 --set gate_rank=8 --set "
             "batch_size=2 --set seq_len=32 --set eval_window=1024 --set threads=1 --steps 2 "
             "--seeds 1 --no-history", ab);
    CHECK(dm_lock_dir(cell, &fd, err, sizeof err) == DM_RUNDIR_OK);
    t_expect(cmd, 2, needle, NULL, 0);
    dm_unlock_dir(cell, fd);
    CHECK(dm_lock_dir(ab, &fd, err, sizeof err) == DM_RUNDIR_OK);
    t_expect(cmd, 2, needle, NULL, 0);
    dm_unlock_dir(ab, fd);
    snprintf(p, sizeof p, "%s/summary.json", cell);
    CHECK(!t_exists(p));
    rc = t_run(cmd, err, sizeof err); /* free again: the sweep runs */
    CHECKF(rc == 0 && t_exists(p), "sweep after the locks: exit %d %s", rc, err);
    t_rmtree(d);
}

/* A tiny run into DIR/run (path into run) with the given --set flags; 0 when it trained. */
static int new_run(const char *d, char *run, size_t n, const char *sets) {
    char cmd[4096], err[4096];
    snprintf(run, n, "%s/run", d);
    snprintf(cmd, sizeof cmd, TRAIN " --out %s %s", run, sets);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "run: %d %s", rc, err);
    return rc;
}

/* the names in dir, sorted, as one string */
static void listing(const char *dir, char *buf, size_t n) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s 2>/dev/null | tr '\\n' ' ' >&2", dir);
    t_run(cmd, buf, n);
}

/* Case 7: a failed command leaves the directory as it found it. */
TEST(rundir_failed_commands_leave_nothing) {
    char d[256], run[512], cmd[4096], err[4096], ls[1024];
    int rc;
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/new/run", d);
    /* out of memory at start: neither the run nor its parent is left (under ASan, its
     * allocator must return NULL as malloc does, not abort) */
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=allocator_may_return_null=1 " TRAIN
             " --out %s --set batch_size=1000000", run);
    t_expect(cmd, 1, "out of memory", NULL, 0);
    snprintf(cmd, sizeof cmd, "%s/new", d);
    CHECKF(!t_exists(cmd), "a failed run left %s", cmd);
    /* a run that diverges (weight decay of 10 x lr 10: a NaN by step 6) before any
     * checkpoint: nothing kept, and the message says so */
    const char *nan = " --set lr=10 --set grad_clip=0 --set optimizer=adamw --set weight_decay=10";
    snprintf(cmd, sizeof cmd, TRAIN " --out %s%s --set steps=60", run, nan);
    t_expect(cmd, 1, "no checkpoint was saved", err, sizeof err);
    CHECK(strstr(err, " is nan at step ") != NULL || strstr(err, " is -nan at step ") != NULL);
    CHECK(!t_exists(run));
    /* ... and with a checkpoint every step the last one before the NaN is kept and loads
     * (weights holding a NaN are never saved: test_ckptfile, ckptfile_nonfinite_refused).
     * Its weights are the ones the NaN step ran on, so its evaluation may itself be NaN
     * (the machine's kernels decide): loading means its files verify and eval runs. */
    snprintf(cmd, sizeof cmd, TRAIN " --out %s%s --set steps=60 --set ckpt_every=1", run, nan);
    t_expect(cmd, 1, "is kept", err, sizeof err);
    CHECKF(strstr(err, "its weights gave this loss") != NULL, "the message: %s", err);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", run);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0 || (rc == 1 && strstr(err, "evaluation gave NaN")),
           "the kept checkpoint does not load: exit %d %s", rc, err);
    snprintf(cmd, sizeof cmd, "rm -rf %s", run);
    t_run(cmd, NULL, 0);
    /* a resume that fails before its first checkpoint: the checkpoint it started from is
     * named as kept, and the run's files are back as they were */
    snprintf(cmd, sizeof cmd, TRAIN " --out %s --set steps=2 --set optimizer=adamw && "
             "cp -a %s %s.snap", run, run, run);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --set steps=60 --set lr=10 --set "
             "grad_clip=0 --set weight_decay=10", run);
    t_expect(cmd, 1, "the checkpoint of step 2 in", NULL, 0);
    snprintf(cmd, sizeof cmd, "diff -r %s %s.snap >&2", run, run);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "the failed resume changed the run: %s", err);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s.snap", run, run);
    t_run(cmd, NULL, 0);
    /* a full disk (files over 1 KiB refused) at start, into an existing directory that
     * holds a file of the user's: only that file is left */
    snprintf(run, sizeof run, "%s/mine", d);
    snprintf(cmd, sizeof cmd, "mkdir %s && echo notes > %s/notes.txt", run, run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 1; " TRAIN " --out %s --set steps=2", run);
    t_expect(cmd, 1, "File too large", NULL, 0);
    listing(run, ls, sizeof ls);
    CHECKF(!strcmp(ls, "notes.txt "), "left: %s", ls);
    /* ... and at the first checkpoint (files over 8 KiB): one line on stderr, nothing left */
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 8; " TRAIN " --out %s/full --set steps=2",
             d);
    t_expect(cmd, 1, "no checkpoint was saved", err, sizeof err);
    CHECK(strstr(err, "cannot write") != NULL);
    snprintf(cmd, sizeof cmd, "%s/full", d);
    CHECK(!t_exists(cmd));
    t_rmtree(d);
}

/* Case 8: a resume that cannot train is refused and changes nothing; the corpus on
 * resume is the run's own; summary.json is valid JSON (null where a value is absent). */
TEST(rundir_resume_guards) {
    char d[256], run[512], cmd[4096], err[4096], p[600];
    t_tmpdir(d, sizeof d);
    new_run(d, run, sizeof run, "--set steps=4");
    int rc;
    snprintf(p, sizeof p, "%s/summary.json", run);
    char *sj = t_slurp(p, NULL);
    cJSON *o = sj ? cJSON_Parse(sj) : NULL;
    CHECKF(o != NULL, "summary.json is not JSON: %s", sj ? sj : "(missing)");
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(o, "val_bpb")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "verify_max_rel")));
    cJSON_Delete(o);
    free(sj);
    snprintf(cmd, sizeof cmd, "cp -a %s %s/snap", run, d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    char same[1200];
    snprintf(same, sizeof same, "diff -r %s %s/snap >&2", run, d);
    const char *refused[][2] = {
        {"--set steps=2", "is at step 4, steps=2: nothing to train"},
        {"", "is at step 4, steps=4: nothing to train"},
        {"--set steps=8 --until 3", "--until 3"},
        {"--set steps=8 --data " DM_SOURCE_DIR "/README.md", "is not the one"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s %s", run, refused[i][0]);
        t_expect(cmd, 2, refused[i][1], NULL, 0);
        rc = t_run(same, err, sizeof err);
        CHECKF(rc == 0, "the refused resume changed the run: %s", err);
    }
    /* steps=0 for a fresh run */
    snprintf(cmd, sizeof cmd, TRAIN " --out %s/zero --set steps=0", d);
    t_expect(cmd, 2, "steps", NULL, 0);
    snprintf(p, sizeof p, "%s/zero", d);
    CHECK(!t_exists(p));
    /* the same bytes under another name are the same corpus: the resume trains */
    snprintf(cmd, sizeof cmd, "zcat " T_CORPUS " > %s/kjv.txt && " DM_CLI " train --resume %s "
             "--set steps=5 --data %s/kjv.txt", d, run, d);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "resume on the same bytes: %d %s", rc, err);
    snprintf(p, sizeof p, "%s/data_path", run);
    char *dp = t_slurp(p, NULL);
    CHECKF(dp && strstr(dp, "/kjv.txt\nbytes ") && strstr(dp, " crc32 "), "data_path: %s", dp);
    free(dp);
    t_rmtree(d);
}

/* Case 10: --out naming a regular file. */
TEST(rundir_out_is_a_file) {
    char d[256], cmd[2048];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, "echo mine > %s/f && " TRAIN " --out %s/f --set steps=2", d, d);
    t_expect(cmd, 2, "is not a directory", NULL, 0);
    snprintf(cmd, sizeof cmd, "test \"$(cat %s/f)\" = mine", d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    t_rmtree(d);
}

/* Case 11: pruning keeps the two newest, by rename then delete; what a killed writer
 * left (ckpt-N.tmp, ckpt-N.del) is never read and goes at the next save; a checkpoint
 * beyond the one resumed from (a damaged one skipped) goes too. */
TEST(rundir_pruning_and_leftovers) {
    char d[256], run[512], cmd[4096], ls[1024];
    t_tmpdir(d, sizeof d);
    new_run(d, run, sizeof run, "--set steps=5 --set ckpt_every=1");
    listing(run, ls, sizeof ls);
    CHECKF(!strcmp(ls, "ckpt-00000004 ckpt-00000005 config.json data_path dispatch.txt "
                       "metrics.jsonl params.txt summary.json "), "after the run: %s", ls);
    /* a half-deleted ckpt-3 being pruned, a half-written ckpt-6, an empty ckpt-9 */
    snprintf(cmd, sizeof cmd, "cd %s && mkdir ckpt-00000003.del ckpt-00000006.tmp ckpt-00000009 "
             "&& cp ckpt-00000005/model.safetensors ckpt-00000003.del/ && "
             "cp ckpt-00000005/model.safetensors ckpt-00000006.tmp/", run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", run);
    t_expect(cmd, 0, "ckpt-00000009/model.safetensors", NULL, 0); /* skipped: the note */
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --set steps=7", run);
    t_expect(cmd, 0, "note: skipping", NULL, 0);
    listing(run, ls, sizeof ls);
    CHECKF(!strcmp(ls, "ckpt-00000006 ckpt-00000007 config.json data_path dispatch.txt "
                       "metrics.jsonl params.txt summary.json "), "after the resume: %s", ls);
    t_rmtree(d);
}

/* the losses of a run's metrics.jsonl, as text, one per line */
static void losses(const char *run, char *buf, size_t n) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "grep -o '\"step\": [0-9]*, \"loss\": [^,]*' %s/metrics.jsonl >&2",
             run);
    t_run(cmd, buf, n);
}

/* Case 12: the newest checkpoint damaged, eval and --resume use the one before it (with a
 * note), and the resumed run still gives an uninterrupted run's losses. */
TEST(rundir_fallback_to_loadable) {
    char d[256], run[512], ref[512], cmd[4096], err[4096], out[8192], a[8192], b[8192];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(ref, sizeof ref, "%s/ref", d);
    snprintf(cmd, sizeof cmd, TRAIN " --out %s --set steps=6 --set eval_every=0", ref);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    snprintf(cmd, sizeof cmd, TRAIN " --out %s --set steps=6 --set eval_every=0 --set "
             "ckpt_every=1 --until 4", run);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    snprintf(cmd, sizeof cmd, "truncate -s -100 %s/ckpt-00000004/model.safetensors", run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s > %s/eval.txt", run, d);
    t_expect(cmd, 0, "ckpt-00000004/model.safetensors is truncated", NULL, 0);
    snprintf(cmd, sizeof cmd, "%s/eval.txt", d);
    char *ev = t_slurp(cmd, NULL);
    CHECKF(ev && strstr(ev, "checkpoint step 3)"), "eval used: %s", ev ? ev : "(nothing)");
    free(ev);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s/ckpt-00000004", run); /* asked for by name */
    t_expect(cmd, 2, "truncated", NULL, 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s", run);
    t_expect(cmd, 0, "note: skipping a checkpoint that does not load", NULL, 0);
    losses(ref, a, sizeof a);
    losses(run, b, sizeof b);
    CHECKF(!strcmp(a, b) && strstr(a, "\"step\": 6"), "losses differ:\n%s\nvs\n%s", a, b);
    /* nothing loads: an error, naming the newest's problem */
    snprintf(cmd, sizeof cmd, "truncate -s -100 %s/ckpt-00000005/model.safetensors "
             "%s/ckpt-00000006/model.safetensors", run, run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", run);
    t_expect(cmd, 2, "ckpt-00000006/model.safetensors is truncated", out, sizeof out);
    CHECK(strstr(out, "older checkpoint") != NULL);
    t_rmtree(d);
}

/* Case 11, watched as it happens: while a run saves a checkpoint every step and prunes
 * the old ones, inotify reports every file deleted inside a ckpt-N directory together
 * with the renames of those directories, in order: no file may be deleted from a
 * directory while it still carries the name ckpt-N (pruning renames it to ckpt-N.del
 * first). */
TEST(rundir_pruning_is_atomic) {
    char d[256], run[512], cmd[4096];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, "mkdir %s", run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    int in = inotify_init1(IN_NONBLOCK);
    if (in < 0) {
        t_skip("no inotify");
        t_rmtree(d);
        return;
    }
    inotify_add_watch(in, run, IN_MOVED_TO | IN_MOVED_FROM);
    enum { MAXW = 4096 };
    static int live[MAXW];       /* by watch descriptor: 1 while named ckpt-N */
    static long long step_of[MAXW]; /* by watch descriptor: its N */
    memset(live, 0, sizeof live);
    snprintf(cmd, sizeof cmd, TRAIN " --out %s --set steps=12 --set ckpt_every=1", run);
    int pid = t_spawn(cmd, NULL), rc = -1, deleted = 0, in_place = 0, renamed = 0;
    char buf[1 << 16] __attribute__((aligned(8)));
    for (int done = 0; !done;) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            done = 1; /* read what is left, then stop */
        }
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            for (char *p = buf; p < buf + n;) {
                struct inotify_event *e = (struct inotify_event *)p;
                p += sizeof *e + e->len;
                long long step;
                int is_ckpt = e->len && sscanf(e->name, "ckpt-%lld", &step) == 1 &&
                              strspn(e->name + 5, "0123456789") == strlen(e->name + 5);
                if (e->mask & IN_MOVED_TO && is_ckpt) { /* a new checkpoint: watch inside */
                    char sub[1024];
                    snprintf(sub, sizeof sub, "%s/%s", run, e->name);
                    int wd = inotify_add_watch(in, sub, IN_DELETE);
                    if (wd >= 0 && wd < MAXW) live[wd] = 1, step_of[wd] = step;
                } else if (e->mask & IN_MOVED_FROM && is_ckpt) { /* renamed to ckpt-N.del */
                    renamed++;
                    for (int w = 0; w < MAXW; w++)
                        if (live[w] && step_of[w] == step) live[w] = 0;                } else if (e->mask & IN_DELETE && e->wd >= 0 && e->wd < MAXW) {
                    deleted++;
                    in_place += live[e->wd];
                }
            }
        if (!done) sleep_ms(1);
    }
    close(in);
    printf("  %d files deleted from checkpoint directories, %d while named ckpt-N; %d renamed "
           "away\n", deleted, in_place, renamed);
    CHECKF(rc == 0, "the run exited %d", rc);
    CHECKF(deleted > 0, "saw no pruning");
    CHECKF(in_place == 0, "%d files deleted from a directory still named ckpt-N", in_place);
    t_rmtree(d);
}
