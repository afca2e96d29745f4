/* test_probe.c — wrong answers without a word, each made impossible (docs/robustness.md):
 * a resume whose data_path names no corpus; a config.json edited between a checkpoint
 * and its resume; a checkpoint of another model planted in a run (train --resume, eval
 * and sample pass over it alike); a shape whose memory plan exceeds the machine, refused
 * before anything is allocated; a data directory or a checkpoint whose final rename never
 * happened; a validation BPB that depends on the machine's bf16. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "stfile.h"

#define RUN10 T_TINY " --set steps=10 --set ckpt_every=1 --set eval_every=0"

/* Run cmd (its output into out; the log in dir); the exit status. */
static int sh(const char *dir, const char *cmd, char *out, size_t n) {
    char log[600];
    snprintf(log, sizeof log, "%s/cmd.log", dir);
    int rc = t_run_out(cmd, log, out, n);
    printf("%s", out);
    return rc;
}

/* A corpus of its own (not the bundled one): 64 KiB of lines from a seeded generator. */
static void own_corpus(const char *path) {
    size_t n = 65536;
    char *b = malloc(n);
    uint64_t x = 88172645463325252ull;
    const char *words[] = {"lorem ", "ipsum ", "dolor ", "sit ", "amet ", "tempus ", "\n"};
    for (size_t i = 0; i < n;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const char *w = words[x % 7];
        for (size_t k = 0; w[k] && i < n; k++) b[i++] = w[k];
    }
    CHECK(t_spit(path, b, n) == 0);
    free(b);
}

/* The number after "val_bpb " in out; NAN when there is none. */
static double bpb_of(const char *out) {
    const char *p = strstr(out, "val_bpb ");
    return p ? atof(p + 8) : NAN;
}

/* F1: a run trained on a corpus of its own whose data_path was emptied: train --resume
 * and eval stop (exit 2) naming the file, rather than go on with the bundled corpus. */
TEST(probe_empty_data_path_stops_resume_and_eval) {
    char d[256], cmd[4096], out[16384], p[400];
    t_tmpdir(d, sizeof d);
    snprintf(p, sizeof p, "%s/own.txt", d);
    own_corpus(p);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --data %s " RUN10 " --until 6", d, p);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(p, sizeof p, "%s/run/data_path", d);
    CHECK(t_spit(p, "", 0) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s/run", d);
    CHECKF(sh(d, cmd, out, sizeof out) == 2, "resume with an empty data_path did not stop");
    CHECK(strstr(out, "data_path names no corpus") != NULL);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s/run", d);
    CHECKF(sh(d, cmd, out, sizeof out) == 2, "eval with an empty data_path did not stop");
    CHECK(strstr(out, "data_path names no corpus") != NULL);
    CHECK(!t_exists(strcat(strcpy(p, d), "/run/ckpt-00000007")));
    t_rmtree(d);
}

/* Set key to the JSON value text in a run's config.json (text edit: the key's line). */
static void edit_config(const char *run, const char *key, const char *value) {
    char p[400], *t;
    snprintf(p, sizeof p, "%s/config.json", run);
    CHECK((t = t_read_text(p)) != NULL);
    if (!t) return;
    cJSON *o = cJSON_Parse(t);
    free(t);
    CHECK(o != NULL);
    cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_Parse(value));
    char *js = cJSON_Print(o);
    CHECK(t_spit(p, js, strlen(js)) == 0);
    free(js);
    cJSON_Delete(o);
}

/* F2: config.json edited after the checkpoint was saved. A key whose change breaks the
 * run's exactness (beta1, seed) stops the resume (exit 2, both values named, nothing
 * written) unless --set states it; a key that may change (steps) is applied and said. */
TEST(probe_config_json_edit_against_checkpoint) {
    char d[256], cmd[4096], out[16384], run[300], p[400];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --data " T_CORPUS " " RUN10 " --until 6",
             run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    const char *breaking[][2] = {{"beta1", "0.8"}, {"seed", "7"}, {"muon_lr", "0.05"}};
    for (int i = 0; i < 3; i++) {
        edit_config(run, breaking[i][0], breaking[i][1]);
        snprintf(p, sizeof p, "%s/config.json", run);
        char *before = t_read_text(p);
        snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until 7", run);
        CHECKF(sh(d, cmd, out, sizeof out) == 2, "%s edited: the resume did not stop",
               breaking[i][0]);
        char want[128];
        snprintf(want, sizeof want, "config.json has %s=%s, its checkpoint of step 6",
                 breaking[i][0], breaking[i][1]);
        CHECKF(strstr(out, want) != NULL, "no refusal naming %s", breaking[i][0]);
        char *after = t_read_text(p);
        CHECK(before && after && !strcmp(before, after)); /* left as it was */
        free(before);
        free(after);
        snprintf(p, sizeof p, "%s/ckpt-00000007", run);
        CHECK(!t_exists(p));
        edit_config(run, breaking[i][0], i == 0 ? "0.9" : i == 1 ? "1" : "0.02");
    }
    /* stated on the command line: applied and said */
    edit_config(run, "beta1", "0.8");
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until 7 --set beta1=0.8", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    CHECK(strstr(out, "changed: beta1 0.9 -> 0.8") != NULL);
    /* a key that may change: applied with a line saying so */
    edit_config(run, "steps", "12");
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until 8", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    CHECK(strstr(out, "changed: steps 10 -> 12") != NULL);
    CHECK(strstr(out, "at step 7 of 12") != NULL);
    CHECK(strstr(out, "changed: beta1") == NULL); /* the checkpoint of step 7 has 0.8 */
    t_rmtree(d);
}

/* F3: the checkpoint of another model (its own checksums, all valid) planted as the
 * newest of a run: eval, sample and train --resume all pass over it with the same note
 * and use the run's checkpoint before it. */
TEST(probe_planted_checkpoint_same_for_train_eval_sample) {
    char d[256], cmd[4096], out[16384], run[300];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --data " T_CORPUS " " RUN10 " --until 6",
             run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/other --data " T_CORPUS " " RUN10
             " --set d_model=64 --set n_head=4 --until 7 && cp -r %s/other/ckpt-00000007 %s/",
             d, d, run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    const char *note = "ckpt-00000007/model.safetensors is not a checkpoint of";
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    CHECK(strstr(out, note) && strstr(out, "d_model=64, the run's config.json d_model=32"));
    CHECK(strstr(out, "checkpoint step 6") != NULL);
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --len 8 --seed 1", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    CHECK(strstr(out, note) != NULL);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --until 8", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    CHECK(strstr(out, note) && strstr(out, "resuming") && strstr(out, "at step 6 of 10"));
    t_rmtree(d);
}

/* F4: shapes whose memory plan exceeds the machine (or its ulimit -v) are refused at
 * once, exit 1, with the plan and what the machine has, by train and by plan --reps 0:
 * nothing allocated, so they end in well under a minute. */
TEST(probe_giant_shape_refused_before_allocating) {
    char d[256], cmd[4096], out[16384];
    t_tmpdir(d, sizeof d);
    const char *shapes[2] = {
        /* beyond any machine: 64 layers of d_model 65536 (tens of TiB) */
        "--set d_model=65536 --set n_head=64 --set head_dim=1024 --set n_layer=64",
        /* d_model 16384 in 16 heads of 1024 (about 92 GiB) under a 4 GB address space */
        "--set d_model=16384 --set n_head=16 --set head_dim=1024"};
    for (int i = 0; i < 2; i++) {
        const char *cmds[2] = {"train --out %s/g --data " T_CORPUS " %s --set steps=1",
                               "plan --reps 0 %s"};
        for (int k = 0; k < 2; k++) {
            char inner[1024];
            if (k == 0) snprintf(inner, sizeof inner, cmds[0], d, shapes[i]);
            else snprintf(inner, sizeof inner, cmds[1], shapes[i]);
            snprintf(cmd, sizeof cmd, "ulimit -v 4000000; " DM_CLI " %s", inner);
            time_t t0 = time(NULL);
            CHECKF(sh(d, cmd, out, sizeof out) == 1, "%s did not exit 1", inner);
            CHECK(strstr(out, "the memory plan needs at least") != NULL);
            CHECK(strstr(out, "this machine has") != NULL);
            if (i == 1) CHECK(strstr(out, "ulimit -v") != NULL);
            CHECK(time(NULL) - t0 < 60);
        }
        char g[300];
        snprintf(g, sizeof g, "%s/g", d);
        CHECK(!t_exists(g)); /* a refused run leaves nothing */
    }
    t_rmtree(d);
}

/* F5: only what was renamed into place counts: a complete prepared data directory still
 * named DIR.partial-PID (a prepare killed between its last write and its rename) is not
 * a corpus, and a complete ckpt-NNNNNNNN.tmp is not a checkpoint. */
TEST(probe_unrenamed_directories_do_not_count) {
    char d[256], cmd[4096], out[16384];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, DM_CLI " prepare --vocab 256 --out %s/data " T_CORPUS " && mv %s/data "
             "%s/data.partial-4242", d, d, d);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --data %s/data.partial-4242 " RUN10,
             d, d);
    CHECKF(sh(d, cmd, out, sizeof out) == 2, "a .partial-PID data directory was trained on");
    CHECK(strstr(out, "never renamed") != NULL);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --data " T_CORPUS " " RUN10
             " --until 6 && cp -r %s/run/ckpt-00000006 %s/run/ckpt-00000009.tmp", d, d, d);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    const char *paths[2] = {"ckpt-00000009.tmp", "ckpt-00000009.tmp/model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI " eval %s/run/%s", d, paths[i]);
        CHECKF(sh(d, cmd, out, sizeof out) == 2, "eval accepted %s", paths[i]);
        CHECK(strstr(out, "is not a checkpoint") != NULL);
    }
    t_rmtree(d);
}

/* F6: a checkpoint's BPB does not depend on the machine. The same weights, once with the
 * config of a run that asked for bf16 products and once with precision=fp32, evaluated
 * where bf16 is missing (DM_CPU_NO_BF16=1) and where it may be present: one number, said
 * to come from fp32 products. */
TEST(probe_eval_bpb_independent_of_machine_bf16) {
    char d[256], cmd[4096], out[16384], run[300], p[400];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s --data " T_CORPUS " " RUN10
             " --set precision=fp32 --set ns_precision=fp32 --until 6", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s/ckpt-00000006", run);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    double fp32 = bpb_of(out);
    CHECK(isfinite(fp32) && strstr(out, "fp32 products"));
    /* the same file, its config saying precision=bf16 (as a bf16 machine's run writes it) */
    snprintf(p, sizeof p, "%s/ckpt-00000006/model.safetensors", run);
    t_stf f;
    CHECK(t_st_read(p, &f) == 0);
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(f.hdr, "__metadata__");
    cJSON *cj = cJSON_Parse(cJSON_GetObjectItemCaseSensitive(meta, "config")->valuestring);
    cJSON_ReplaceItemInObjectCaseSensitive(cj, "precision", cJSON_CreateString("bf16"));
    char *js = cJSON_PrintUnformatted(cj);
    t_st_set_meta(&f, "config", js);
    t_st_write(p, &f, 0, 1);
    free(js);
    cJSON_Delete(cj);
    t_st_free(&f);
    const char *env[2] = {"DM_CPU_NO_BF16=1 ", ""};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s" DM_CLI " eval %s/ckpt-00000006", env[i], run);
        CHECKF(sh(d, cmd, out, sizeof out) == 0, "eval of a bf16 run's checkpoint failed (%s)",
               env[i]);
        double got = bpb_of(out);
        CHECKF(got == fp32, "eval gave %.6f, the fp32 number is %.6f", got, fp32);
        CHECK(strstr(out, "fp32 products") != NULL);
    }
    t_rmtree(d);
}

/* F6, the training side: a run's val_bpb (metrics.jsonl, summary.json) is the number
 * `dormouse eval` gives for its checkpoint, also where the training steps run bf16 (then
 * the run scores an fp32 copy of its weights). */
TEST(probe_train_val_bpb_is_eval_number) {
    char d[256], cmd[4096], out[16384], p[400];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --data " T_CORPUS " " T_TINY
             " --set steps=5 --set eval_every=0", d);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(p, sizeof p, "%s/run/summary.json", d);
    char *sum = t_read_text(p);
    const char *v = sum ? strstr(sum, "\"val_bpb\": ") : NULL;
    CHECK(v != NULL);
    double trained = v ? atof(v + 11) : NAN;
    free(sum);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s/run", d);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    double evald = bpb_of(out);
    CHECKF(isfinite(trained) && fabs(trained - evald) < 5e-7, "train's val_bpb %.6f, eval's %.6f",
           trained, evald);
    t_rmtree(d);
}

/* A second dormouse with threads=0 (all cores) beside one that trains: it takes a fair
 * share of the cores and says so, naming the busy one. (Alone it takes them all, quietly;
 * not checked here: on a shared machine other dormice may be busy.) */
TEST(probe_second_process_takes_a_fair_share) {
    char d[256], cmd[4096], out[16384], p[400], want[64];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --data " T_CORPUS " " RUN10
             " --until 6", d);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/busy --data " T_CORPUS " " T_TINY
             " --set steps=1000000 --set eval_every=0", d);
    int pid = t_spawn(cmd, NULL);
    snprintf(p, sizeof p, "%s/busy/metrics.jsonl", d);
    struct timespec nap = {0, 50000000L};
    for (int i = 0; i < 600 && !t_exists(p); i++) nanosleep(&nap, NULL); /* training now */
    for (int i = 0; i < 6; i++) nanosleep(&nap, NULL);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s/run --set threads=0", d);
    CHECK(sh(d, cmd, out, sizeof out) == 0);
    snprintf(want, sizeof want, "pid %d at ", pid);
    CHECKF(strstr(out, "note: threads=") && strstr(out, want) && strstr(out, "fair share"),
           "no fair share beside pid %d", pid);
    kill(pid, SIGTERM);
    t_wait(pid);
    t_rmtree(d);
}
