/* test_dist.c — data-parallel training under mpirun (base/comm.h, optim/gradsum.h,
 * jobs/step.h; docs/scaling.md): N ranks give the bits of one process with the same
 * step batch (every step's loss, the final parameters and optimizer state), checkpoints
 * resume under any N, a rank that dies or fails stops the job with the last checkpoint
 * intact, bench reports the traffic. Each case is skipped, with the reason, in a build
 * without MPI. The launcher runs oversubscribed and as root where CI does. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "io/ckpt.h"
#include "jobs/train.h"
#include "optim/optim.h"

#define CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz"

static int have_mpi(void) {
    if (DM_MPIEXEC[0]) return 1;
    t_skip("this build has no MPI (CMake found none; Debian: libopenmpi-dev openmpi-bin)");
    return 0;
}

/* A small model whose Muon has both kinds of units: head slices of W_q / W_k and small
 * matrices (the stack path) and the MLP matrices (alone, GEMMs tiled): 338,370 parameters;
 * short sequences keep it fast (and `make asan` bearable). */
static const char *const BASE[] = {
    "d_model=128", "n_layer=1", "n_head=2", "head_dim=64", "gate_rank=16", "batch_size=1",
    "seq_len=32", "steps=8", "warmup_steps=2", "eval_every=4", "log_every=1",
    "eval_window=1024", "threads=1",
};
#define NBASE ((int)(sizeof BASE / sizeof BASE[0]))

typedef struct {
    const char *k[32];
    int n;
} keys;

/* BASE and then the extra "key=value" items (NULL-terminated) */
static keys with(const char *first, ...) {
    keys ks = {{0}, 0};
    for (int i = 0; i < NBASE; i++) ks.k[ks.n++] = BASE[i];
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s && ks.n < 32; s = va_arg(ap, const char *)) ks.k[ks.n++] = s;
    va_end(ap);
    return ks;
}

static void sets_text(const keys *ks, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < ks->n && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, " --set %s", ks->k[i]);
}

/* `mpirun -np np dormouse train --out out [--resume] [--until U]` with the keys (none on a
 * resume); the exit status, the output in out.log */
static int mpi_train(int np, const char *out, const keys *ks, int resume, long until) {
    char cmd[8192], sets[4096], log[600], text[16384], u[64] = "";
    if (ks) sets_text(ks, sets, sizeof sets);
    else sets[0] = 0;
    if (until > 0) snprintf(u, sizeof u, " --until %ld", until);
    snprintf(cmd, sizeof cmd, T_MPIRUN " -np %d " DM_CLI " train %s %s --data %s%s%s", np,
             resume ? "--resume" : "--out", out, CORPUS, sets, u);
    snprintf(log, sizeof log, "%s.log", out);
    int rc = t_run_out(cmd, log, text, sizeof text);
    if (rc != 0) printf("%s\n", text);
    return rc;
}

/* One process, in this one: dm_train with the keys (NULL on a resume) */
static int solo_train(const char *out, const keys *ks, int resume, long until) {
    dm_train_args a = {.data = CORPUS, .out = out, .sets = ks ? ks->k : NULL,
                       .n_sets = ks ? ks->n : 0, .resume = resume, .until = until};
    dm_status st = dm_train(&a, NULL);
    if (st.code != DM_JOB_OK) printf("  train %s: %d %s\n", out, st.code, st.msg);
    return st.code;
}

/* The losses of metrics.jsonl (one line per step: log_every 1) into loss[0..max) */
static int read_losses(const char *dir, float *loss, int max) {
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < max && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line), *v = cJSON_GetObjectItemCaseSensitive(o, "loss");
        loss[n++] = cJSON_IsNumber(v) ? (float)v->valuedouble : NAN;
        cJSON_Delete(o);
    }
    if (f) fclose(f);
    return n;
}

/* The newest checkpoint of run into a model and optimizer of the config it holds */
static dm_model *load_run(const char *run, dm_optim **opt, long *step) {
    char dir[4096], err[512];
    dm_config c;
    if (dm_ckpt_resolve(run, dir, sizeof dir, err, sizeof err) ||
        dm_ckpt_read_config(dir, &c, step, err, sizeof err)) {
        printf("  %s: %s\n", run, err);
        return NULL;
    }
    dm_model *m = dm_model_create(&c, err, sizeof err);
    *opt = m ? dm_optim_create(m, &c, err, sizeof err) : NULL;
    if (!*opt || dm_ckpt_load(dir, m, *opt, err, sizeof err)) {
        printf("  %s: %s\n", run, err);
        dm_optim_free(*opt);
        dm_model_free(m);
        return NULL;
    }
    return m;
}

/* Runs a and b: the same loss at every one of `steps` steps and the same final parameters
 * and optimizer state, bit for bit */
static void same_bits(const char *a, const char *b, int steps) {
    float la[64], lb[64];
    int na = read_losses(a, la, 64), nb = read_losses(b, lb, 64);
    CHECKF(na == steps && nb == steps, "metrics lines %d and %d, expected %d", na, nb, steps);
    for (int i = 0; i < na && i < nb; i++)
        CHECKF(memcmp(&la[i], &lb[i], sizeof(float)) == 0, "step %d: loss %.9g vs %.9g", i + 1,
               la[i], lb[i]);
    dm_optim *oa = NULL, *ob = NULL;
    long sa = 0, sb = 0;
    dm_model *ma = load_run(a, &oa, &sa), *mb = load_run(b, &ob, &sb);
    CHECK(ma && mb && sa == steps && sb == steps);
    if (ma && mb) {
        size_t np = dm_model_num_params(ma);
        CHECKF(memcmp(dm_model_params(ma), dm_model_params(mb), np * sizeof(float)) == 0,
               "final parameters differ");
        dm_optim_buf ba[DM_OPTIM_MAX_BUFS], bb[DM_OPTIM_MAX_BUFS];
        int ka = dm_optim_state(oa, ba, DM_OPTIM_MAX_BUFS), kb = dm_optim_state(ob, bb, DM_OPTIM_MAX_BUFS);
        CHECK(ka == kb && ka >= 2);
        for (int i = 0; i < ka && i < kb; i++)
            CHECKF(ba[i].n == bb[i].n && !memcmp(ba[i].data, bb[i].data, ba[i].n * sizeof(float)),
                   "optimizer state %s differs", ba[i].name);
        printf("  %s == %s: %d losses (last %.9g), %zu parameters, %d state buffers\n", a, b, na,
               la[na - 1], np, ka);
    }
    dm_optim_free(oa);
    dm_optim_free(ob);
    dm_model_free(ma);
    dm_model_free(mb);
}

/* a member of summary.json's "memory" object of run dir (-1 when missing) */
static double memory_figure(const char *dir, const char *key) {
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *text = t_slurp(path, NULL);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "memory"), key);
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    cJSON_Delete(o);
    free(text);
    return x;
}

/* The memory report counts the gradient sum: one process with grad_accum > 1 holds a
 * buffer in the parameters' layout; rank 0 of np holds its shard of it and np shard-sized
 * receive slots (shards: about P/np, cut 16-float aligned), and with Muon the buffer its
 * units are all-gathered through (at most the parameters) */
static void exchange_counted(const char *one, const char *many, int np) {
    double P = memory_figure(one, "parameters_bytes"), x1 = memory_figure(one, "exchange_bytes");
    double xn = memory_figure(many, "exchange_bytes"), lo = (np + 1) * (P / np - 64);
    CHECKF(P > 0 && x1 == P, "one process: exchange %.0f bytes, parameters %.0f", x1, P);
    CHECKF(xn >= lo && xn <= lo + P + (np + 1) * 64.0,
           "%d ranks: exchange %.0f bytes, expected %.0f + at most the parameters", np, xn, lo);
}

/* mpirun -np np with grad_accum A == one process with grad_accum A, bitwise */
static void np_equals_one(int np, const keys *ks) {
    if (!have_mpi()) return;
    char d[256], one[300], many[300];
    t_tmpdir(d, sizeof d);
    snprintf(one, sizeof one, "%s/one", d);
    snprintf(many, sizeof many, "%s/np%d", d, np);
    CHECK(solo_train(one, ks, 0, 0) == DM_JOB_OK);
    CHECK(mpi_train(np, many, ks, 0, 0) == 0);
    same_bits(one, many, 8);
    exchange_counted(one, many, np);
    t_rmtree(d);
}

/* np 2 (grad_accum 2) == one process, with `extra` keys */
static void np2(const char *mixer, const char *optimizer, const char *extra) {
    keys ks = with(mixer, optimizer, extra, "grad_accum=2", NULL);
    np_equals_one(2, &ks);
}

TEST(dist_np2_equals_one_process_kda_muon) { np2("mixer=kda", "optimizer=muon", "retract=stiefel"); }
TEST(dist_np2_equals_one_process_kda_adamw) { np2("mixer=kda", "optimizer=adamw", "retract=off"); }
TEST(dist_np2_equals_one_process_gdn_muon) { np2("mixer=gdn", "optimizer=muon", "retract=sphere"); }
TEST(dist_np2_equals_one_process_gdn_adamw) { np2("mixer=gdn", "optimizer=adamw", "retract=off"); }

/* NorMuon's moments are computed by each unit's owner and all-gathered with it, and the
 * cautious decay is elementwise: np 2 equals one process, and resumed under np 2 from a
 * checkpoint of rank 0 equals the uninterrupted run */
TEST(dist_np2_equals_one_process_normuon) {
    np2("mixer=kda", "optimizer=muon", "muon_norm=neuron");
    if (!have_mpi()) return;
    keys ks = with("grad_accum=2", "muon_norm=neuron", "cautious_wd=1", "weight_decay=0.5",
                   NULL);
    char d[256], a[300], b[300];
    t_tmpdir(d, sizeof d);
    snprintf(a, sizeof a, "%s/one", d);
    snprintf(b, sizeof b, "%s/halves", d);
    CHECK(solo_train(a, &ks, 0, 0) == DM_JOB_OK);
    CHECK(mpi_train(2, b, &ks, 0, 4) == 0);
    CHECK(mpi_train(2, b, NULL, 1, 0) == 0);
    same_bits(a, b, 8);
    t_rmtree(d);
}

/* three ranks: Muon's units split three ways, the window's forwards too */
TEST(dist_np3_equals_one_process) {
    keys ks = with("mixer=kda", "optimizer=muon", "grad_accum=3", NULL);
    np_equals_one(3, &ks);
}

/* two micro-batches per rank: the sum still runs in micro-batch order 0, 1, 2, 3 */
TEST(dist_np2_accum4_equals_one_process) {
    keys ks = with("mixer=kda", "optimizer=muon", "grad_accum=4", NULL);
    np_equals_one(2, &ks);
}

/* An MPI run stopped at step 4 and resumed under MPI == the uninterrupted MPI run */
TEST(dist_resume_equals_uninterrupted) {
    if (!have_mpi()) return;
    keys ks = with("grad_accum=2", NULL);
    char d[256], a[300], b[300];
    t_tmpdir(d, sizeof d);
    snprintf(a, sizeof a, "%s/whole", d);
    snprintf(b, sizeof b, "%s/halves", d);
    CHECK(mpi_train(2, a, &ks, 0, 0) == 0);
    CHECK(mpi_train(2, b, &ks, 0, 4) == 0);
    CHECK(mpi_train(2, b, NULL, 1, 0) == 0);
    same_bits(a, b, 8);
    t_rmtree(d);
}

/* A checkpoint does not depend on N: an MPI run resumed in one process, and a one-process
 * run resumed under MPI (three ranks), both equal the uninterrupted one-process run */
TEST(dist_resume_across_process_counts) {
    if (!have_mpi()) return;
    keys ks = with("grad_accum=6", NULL);
    char d[256], one[300], x[300], y[300];
    t_tmpdir(d, sizeof d);
    snprintf(one, sizeof one, "%s/one", d);
    snprintf(x, sizeof x, "%s/mpi_then_one", d);
    snprintf(y, sizeof y, "%s/one_then_mpi", d);
    CHECK(solo_train(one, &ks, 0, 0) == DM_JOB_OK);
    CHECK(mpi_train(2, x, &ks, 0, 4) == 0);
    CHECK(solo_train(x, NULL, 1, 0) == DM_JOB_OK);
    same_bits(one, x, 8);
    CHECK(solo_train(y, &ks, 0, 3) == DM_JOB_OK);
    CHECK(mpi_train(3, y, NULL, 1, 0) == 0);
    same_bits(one, y, 8);
    t_rmtree(d);
}

/* a long run of a smaller model, checkpoints every 5 steps */
static keys long_run(void) {
    return with("grad_accum=2", "steps=1000000", "ckpt_every=5", "eval_every=0", "d_model=32",
                "n_head=2", "head_dim=16", "gate_rank=8", NULL);
}

/* The step of run's newest checkpoint when it loads (model and optimizer), else -1 */
static long loads_at(const char *run) {
    long step = -1;
    dm_optim *o = NULL;
    dm_model *m = load_run(run, &o, &step);
    dm_optim_free(o);
    dm_model_free(m);
    return m ? step : -1;
}

/* Start the long run (with extra "key=value" when not NULL) under mpirun -np 2 in the
 * background, each rank's pid in d/pid.R; wait for its checkpoint at step 10; send `sig`
 * to rank 1; wait (at most 60 s) for the launcher to end: its exit status in *rc, the
 * milliseconds from the signal to its end in *ms; its output in out. */
static void signal_rank(const char *d, const char *run, int sig, const char *extra, int *rc,
                        int *ms, char *out, size_t n) {
    char cmd[8192], sets[2048], log[600];
    keys ks = long_run();
    if (extra) ks.k[ks.n++] = extra;
    sets_text(&ks, sets, sizeof sets);
    snprintf(cmd, sizeof cmd,
             T_MPIRUN " -np 2 sh -c 'echo $$ > %s/pid.$OMPI_COMM_WORLD_RANK; exec " DM_CLI
             " train --out %s --data %s%s' > %s/run.log 2>&1 & mp=$!; echo $mp > %s/mpirun.pid; "
             "for i in $(seq 600); do [ -d %s/ckpt-00000010 ] && [ -s %s/pid.1 ] && break; "
             "sleep 0.05; done; t0=$(date +%%s%%N); kill -%d $(cat %s/pid.1); "
             "( sleep 60; kill -9 $mp 2>/dev/null ) & dog=$!; wait $mp; rc=$?; "
             "t1=$(date +%%s%%N); kill $dog 2>/dev/null; "
             /* rank 0 may still be ending as the launcher returns: its lock is released
              * when it is gone (at most 10 s more) */
             "p0=$(cat %s/pid.0); for i in $(seq 200); do kill -0 $p0 2>/dev/null || break; "
             "sleep 0.05; done; "
             /* the log without its progress lines: they would fill out before the end */
             "echo RC $rc MS $(( (t1 - t0) / 1000000 )); grep -v '^step ' %s/run.log",
             d, run, CORPUS, sets, d, d, run, d, sig, d, d, d);
    snprintf(log, sizeof log, "%s/test.log", d);
    t_run_out(cmd, log, out, n);
    *rc = *ms = -1;
    const char *p = strstr(out, "RC ");
    if (p) sscanf(p, "RC %d MS %d", rc, ms);
    printf("%s\n  exit %d, %d ms after signal %d to rank 1\n", out, *rc, *ms, sig);
}

/* After a rank was `what` (killed, stopped): the job exited non-zero (rc) within limit_ms
 * (ms after the signal), and the last checkpoint of run loads and resumes in one process */
static void job_ended(const char *run, int rc, int ms, int limit_ms, const char *what) {
    CHECKF(rc > 0, "the job exited %d after a rank was %s", rc, what);
    CHECKF(ms >= 0 && ms < limit_ms, "the job took %d ms to end after a rank was %s", ms, what);
    long step = loads_at(run);
    CHECKF(step >= 10 && step % 5 == 0, "the last checkpoint (step %ld) does not load", step);
    CHECK(step < 0 || solo_train(run, NULL, 1, step + 2) == DM_JOB_OK);
}

/* One rank killed (SIGKILL): the job exits non-zero within 30 s, and the last checkpoint
 * loads and resumes in one process */
TEST(dist_rank_killed_stops_the_job) {
    if (!have_mpi()) return;
    char d[256], run[300], out[16384];
    int rc, ms;
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    signal_rank(d, run, 9, NULL, &rc, &ms, out, sizeof out);
    job_ended(run, rc, ms, 30000, "killed");
    t_rmtree(d);
}

/* One rank stopped (SIGSTOP: alive, holding its sockets, never answering): with
 * comm_timeout=3 the other rank's exchange gives up, the error names the stopped rank,
 * the job exits non-zero well within 60 s, and the last checkpoint loads and resumes. */
TEST(dist_stopped_rank_times_out) {
    if (!have_mpi()) return;
    char d[256], run[300], out[16384];
    int rc, ms;
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    signal_rank(d, run, 19, "comm_timeout=3", &rc, &ms, out, sizeof out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "kill -9 $(cat %s/pid.1) 2>/dev/null", d);
    t_run(cmd, NULL, 0);
    CHECKF(strstr(out, "comm_timeout") && strstr(out, "rank 1 does not answer"),
           "no error naming the stopped rank");
    job_ended(run, rc, ms, 60000, "stopped");
    t_rmtree(d);
}

/* SIGTERM to one rank: every rank stops after the same step with a checkpoint (exit 143,
 * 128 + SIGTERM, from each), and the run resumed in one process equals an uninterrupted
 * one */
TEST(dist_sigterm_to_one_rank_stops_all_with_checkpoint) {
    if (!have_mpi()) return;
    char d[256], run[300], ref[300], out[16384];
    int rc, ms;
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(ref, sizeof ref, "%s/ref", d);
    signal_rank(d, run, 15, NULL, &rc, &ms, out, sizeof out);
    CHECKF(rc == 143, "the job exited %d after SIGTERM to rank 1", rc);
    CHECKF(strstr(out, "interrupted at step ") != NULL, "no interrupt message");
    long step = loads_at(run);
    CHECKF(step >= 10, "no checkpoint after the stop (step %ld)", step);
    keys ks = long_run();
    CHECK(solo_train(run, NULL, 1, step + 2) == DM_JOB_OK);
    CHECK(solo_train(ref, &ks, 0, step + 2) == DM_JOB_OK);
    /* the same parameters (the metrics of the stopped run end where it stopped) */
    dm_optim *oa = NULL, *ob = NULL;
    long sa = 0, sb = 0;
    dm_model *ma = load_run(run, &oa, &sa), *mb = load_run(ref, &ob, &sb);
    CHECK(ma && mb && sa == step + 2 && sb == step + 2);
    if (ma && mb)
        CHECKF(!memcmp(dm_model_params(ma), dm_model_params(mb),
                       dm_model_num_params(ma) * sizeof(float)),
               "stopped under MPI and resumed in one process != uninterrupted");
    dm_optim_free(oa);
    dm_optim_free(ob);
    dm_model_free(ma);
    dm_model_free(mb);
    t_rmtree(d);
}

/* Run cmd; expect exit `code` and `needle` in its output */
static void expect(const char *cmd, const char *log, int code, const char *needle) {
    char out[16384];
    int rc = t_run_out(cmd, log, out, sizeof out);
    printf("  -> %d: %s", rc, out);
    CHECKF(rc == code, "exit %d, expected %d", rc, code);
    CHECKF(strstr(out, needle) != NULL, "the output lacks '%s'", needle);
}

/* What cannot run under mpirun says so and writes nothing: a grad_accum the ranks do not
 * divide, a rank whose corpus is missing (named with its rank), a corpus that differs
 * between ranks, and the commands that run in one process */
TEST(dist_bad_launches_fail_cleanly) {
    if (!have_mpi()) return;
    char d[256], run[300], cmd[8192], sets[4096], log[300], c0[300], c1[300];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(log, sizeof log, "%s/log", d);
    keys ks = with(NULL);
    sets_text(&ks, sets, sizeof sets);
    snprintf(cmd, sizeof cmd, T_MPIRUN " -np 2 " DM_CLI " train --out %s --data %s%s", run, CORPUS,
             sets);
    expect(cmd, log, 2, "grad_accum=1 does not divide among 2 processes");
    CHECK(!t_exists(run));
    /* rank 1 is given a corpus path that does not exist */
    snprintf(cmd, sizeof cmd,
             T_MPIRUN " -np 2 sh -c 'if [ $OMPI_COMM_WORLD_RANK = 1 ]; then c=%s/none; else "
             "c=%s; fi; exec " DM_CLI " train --out %s --data $c%s --set grad_accum=2'",
             d, CORPUS, run, sets);
    expect(cmd, log, 2, "rank 1: corpus not found");
    CHECK(!t_exists(run));
    /* two corpora of the same size, one byte apart */
    snprintf(c0, sizeof c0, "%s/c0.txt", d);
    snprintf(c1, sizeof c1, "%s/c1.txt", d);
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(k ? c1 : c0, "w");
        for (int i = 0; i < 4000; i++) fputs(i == 1234 && k ? "And God saw thE light. " : "And God saw the light. ", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd,
             T_MPIRUN " -np 2 sh -c 'exec " DM_CLI " train --out %s --data %s/c$OMPI_COMM_WORLD_RANK.txt"
             "%s --set grad_accum=2'", run, d, sets);
    expect(cmd, log, 2, "differs between ranks");
    CHECK(!t_exists(run));
    snprintf(cmd, sizeof cmd, T_MPIRUN " -np 2 " DM_CLI " sample %s", run);
    expect(cmd, log, 2, "runs in one process");
    t_rmtree(d);
}

/* bench under mpirun: every rank steps, rank 0 reports the traffic per step */
TEST(dist_bench_reports_communication) {
    if (!have_mpi()) return;
    char d[256], cmd[8192], sets[4096], log[300], out[32768];
    t_tmpdir(d, sizeof d);
    snprintf(log, sizeof log, "%s/log", d);
    keys ks = with("grad_accum=2", NULL);
    sets_text(&ks, sets, sizeof sets);
    snprintf(cmd, sizeof cmd, T_MPIRUN " -np 2 " DM_CLI " bench -v --reps 2 --baseline threads=1%s",
             sets);
    int rc = t_run_out(cmd, log, out, sizeof out);
    printf("%s", out);
    CHECKF(rc == 0, "bench under mpirun exited %d", rc);
    int rows = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || !strstr(line, "\tbench:step\t")) continue;
        char metric[64] = "";
        double v = -1;
        const char *p = line;
        for (int col = 0; col < 5 && p; col++) p = strchr(p + 1, '\t'); /* to the metric */
        if (p) sscanf(p + 1, "%63s %lf", metric, &v);
        if (strcmp(metric, "comm_mb_per_step") && strcmp(metric, "comm_ms_per_step")) continue;
        CHECKF(strstr(line, "processes=2") != NULL, "row without processes=2: %s", line);
        CHECKF(v > 0, "%s is %g", metric, v);
        rows++;
    }
    CHECKF(rows == 4, "%d comm rows, expected 2 per arm", rows);
    t_rmtree(d);
}

/* `dormouse eval` under mpirun -np 3 prints the BPB one process prints */
TEST(dist_eval_equals_one_process) {
    if (!have_mpi()) return;
    char d[256], run[300], cmd[4096], log[300], a[4096], b[4096];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(log, sizeof log, "%s/log", d);
    keys ks = with("steps=2", "eval_window=3000", "batch_size=2", NULL);
    CHECK(solo_train(run, &ks, 0, 0) == DM_JOB_OK);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s", run, CORPUS);
    CHECK(t_run_out(cmd, log, a, sizeof a) == 0);
    snprintf(cmd, sizeof cmd, T_MPIRUN " -np 3 " DM_CLI " eval %s --data %s", run, CORPUS);
    CHECK(t_run_out(cmd, log, b, sizeof b) == 0);
    /* the line "val_bpb X on the last N bytes of DATA (checkpoint step S)" of each */
    char *la = strstr(a, "val_bpb "), *lb = strstr(b, "val_bpb ");
    if (la) la[strcspn(la, "\n")] = 0;
    if (lb) lb[strcspn(lb, "\n")] = 0;
    printf("  one: %s\n  np 3: %s\n", la ? la : "(none)", lb ? lb : "(none)");
    CHECK(la && lb && strcmp(la, lb) == 0);
    t_rmtree(d);
}
