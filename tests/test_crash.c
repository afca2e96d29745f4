/* test_crash.c — kill -9 at random moments: a tiny run with a checkpoint every
 * step is killed again and again — while it starts, trains, saves or prunes — and
 * continued each time (a fresh start while it has no checkpoint, else --resume). After
 * every kill each directory named ckpt-N is complete and loads (model and optimizer), and
 * there are at most three; at the end resume and eval work, and every step's loss, the
 * validation BPB and the final weights equal an uninterrupted run's, to the bit.
 * The kills land at random moments within three times what a one-step run takes here
 * (start-up, a step, a checkpoint), and the run is long enough for all of them (from
 * the time of a step here), so they spread over start-up and training on a fast machine
 * and on a slow build (ASan) alike. DM_CRASHTEST_KILLS sets the number of kills (default
 * 20; `make crashtest`: 270). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "check.h"
#include "dormouse.h"
#include "io/ckpt.h"
#include "optim/optim.h"

#define SETS T_TINY " --set ckpt_every=1 --set eval_every=10"

static void sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000.0 * (long)(ms / 1000)) * 1e6)};
    nanosleep(&ts, NULL);
}

/* Every ckpt-N directory of run loads into m and o; returns how many (-1: one did not). */
static int check_ckpts(const char *run, dm_model *m, dm_optim *o) {
    DIR *d = opendir(run);
    if (!d) return 0;
    struct dirent *e;
    int n = 0;
    char p[1024], err[1024];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "ckpt-", 5) || l < 13 || strspn(e->d_name + 5, "0123456789") != l - 5)
            continue;
        n++;
        snprintf(p, sizeof p, "%s/%s/model.safetensors", run, e->d_name);
        if (dm_ckpt_load(p, m, o, err, sizeof err) != DM_CKPT_OK) {
            printf("  %s does not load: %s\n", e->d_name, err);
            n = -1;
            break;
        }
    }
    closedir(d);
    return n;
}

/* the "step", "loss" and "val_bpb" fields of every metrics line of run into out */
static void metrics_fields(const char *run, const char *out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "grep -o '\"step\": [0-9]*, \"loss\": [^,]*\\|\"val_bpb\": [^,}]*' "
             "%s/metrics.jsonl > %s", run, out);
    CHECK(t_run(cmd, NULL, 0) == 0);
}

TEST(crash_kill9_resume_exact) {
    const char *env = getenv("DM_CRASHTEST_KILLS");
    int kills = env ? atoi(env) : 20;
    if (kills < 1) kills = 20;
    char d[256], corpus[512], run[512], ref[512], cmd[4096], err[4096];
    t_tmpdir(d, sizeof d);
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(ref, sizeof ref, "%s/ref", d);
    snprintf(cmd, sizeof cmd, "zcat " T_CORPUS " | head -c 300000 > %s", corpus);
    CHECK(t_run(cmd, NULL, 0) == 0);
    /* the time of a one-step run (start-up dominates it) and of a step, here */
    double ms[2];
    for (int i = 0; i < 2; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s/probe%d " SETS
                 " --set steps=%d", corpus, d, i, i ? 21 : 1);
        CHECK(t_run(cmd, err, sizeof err) == 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms[i] = 1e3 * (t1.tv_sec - t0.tv_sec) + 1e-6 * (t1.tv_nsec - t0.tv_nsec);
    }
    double one_ms = ms[0], step_ms = (ms[1] - ms[0]) / 20;
    if (step_ms < 0.5) step_ms = 0.5;
    /* a kill lands on average 1.5 one-step runs in, about half of one after start-up:
     * twice that progress per kill */
    int steps = 20 + (int)(kills * one_ms / step_ms);
    printf("  a one-step run %.0f ms, a step %.1f ms: %d steps\n", one_ms, step_ms, steps);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " SETS " --set steps=%d", corpus,
             ref, steps);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "the uninterrupted run: %d %s", rc, err);

    /* the model and optimizer the checkpoints must load into */
    dm_config c;
    char mp[1024];
    CHECK(dm_ckpt_resolve(ref, mp, sizeof mp, err, sizeof err) == 0);
    CHECK(dm_ckpt_read_config(mp, &c, NULL, err, sizeof err) == 0);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);

    dm_rng r;
    dm_rng_seed(&r, 10, 0xC4A54);
    int killed = 0, resumed = 0, most = 0, bad = 0, finished = 0;
    for (int i = 0; i < kills && !bad && !finished; i++) {
        int has = dm_ckpt_resolve(run, mp, sizeof mp, err, sizeof err) == 0;
        if (has) snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s", run);
        else snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " SETS " --set steps=%d",
                      corpus, run, steps);
        resumed += has;
        int pid = t_spawn(cmd, NULL);
        sleep_ms(3 * one_ms * dm_rng_uniform(&r));
        kill(pid, SIGKILL);
        rc = t_wait(pid);
        killed += rc == -SIGKILL;
        finished = rc == 0;
        CHECKF(rc == -SIGKILL || rc == 0, "kill %d: exit %d before the kill", i, rc);
        int n = check_ckpts(run, m, o);
        if (n > most) most = n;
        if (n < 0 || n > 3) {
            CHECKF(0, "after kill %d: %s", i, n < 0 ? "a checkpoint does not load" : "> 3 checkpoints");
            bad = 1;
        }
    }
    printf("  %d runs killed with SIGKILL within %.0f ms of their start, %d of them resumed "
           "runs, at most %d checkpoints at once; %s\n", killed, 3 * one_ms, resumed, most,
           finished ? "the run finished" : "unfinished");
    CHECKF(resumed > 0, "no kill landed after the first checkpoint");
    /* finish, then the same run as the uninterrupted one */
    if (dm_ckpt_resolve(run, mp, sizeof mp, err, sizeof err) == 0)
        snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s", run);
    else
        snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " SETS " --set steps=%d",
                 corpus, run, steps);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0 || (finished && rc == 2), "final resume: %d %s", rc, err);
    char ma[600], mb[600];
    snprintf(ma, sizeof ma, "%s/ref.txt", d);
    snprintf(mb, sizeof mb, "%s/run.txt", d);
    metrics_fields(ref, ma);
    metrics_fields(run, mb);
    snprintf(cmd, sizeof cmd, "test $(grep -c '\"step\"' %s) -eq %d && cmp %s %s >&2", mb, steps,
             ma, mb);
    rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "the killed run's steps, losses or BPB differ from the uninterrupted "
           "run's: %s", err);
    char ea[4096], eb[4096];
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s | grep val_bpb | cut -d' ' -f2 >&2",
             ref, corpus);
    CHECK(t_run(cmd, ea, sizeof ea) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s | grep val_bpb | cut -d' ' -f2 >&2",
             run, corpus);
    CHECK(t_run(cmd, eb, sizeof eb) == 0);
    printf("  eval: %s vs %s", ea, eb);
    CHECKF(ea[0] && !strcmp(ea, eb), "eval %s vs %s", ea, eb);
    /* the final weights, bit for bit */
    size_t np = dm_model_num_params(m);
    float *pa = t_alloc(np);
    CHECK(dm_ckpt_resolve(ref, mp, sizeof mp, err, sizeof err) == 0);
    CHECK(dm_ckpt_load(mp, m, NULL, err, sizeof err) == 0);
    memcpy(pa, dm_model_params(m), np * sizeof(float));
    CHECK(dm_ckpt_resolve(run, mp, sizeof mp, err, sizeof err) == 0);
    CHECK(dm_ckpt_load(mp, m, NULL, err, sizeof err) == 0);
    CHECKF(strstr(mp, "ckpt-") && !memcmp(pa, dm_model_params(m), np * sizeof(float)),
           "final weights differ (%s)", mp);
    free(pa);
    dm_optim_free(o);
    dm_model_free(m);
    t_rmtree(d);
}
