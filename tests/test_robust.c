/* test_robust.c — nothing lost, nothing silent (docs/robustness.md): damaged checkpoint
 * data and swapped data_offsets refused by their checksums and fallen back from; a resume
 * that cannot lose the run (the damaged newest checkpoint, a loaded one that diverges
 * right after); threads beyond the cores under an address-space limit; config files
 * read by the rules of --set; out of memory exits 1; metrics.jsonl writes that fail; an
 * A/B sweep's training process that dies with it, and the lock's refusal naming who
 * holds it. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "io/rundir.h"
#include "jobs/train.h"
#include "stfile.h"

/* a tiny run of 10 steps with a checkpoint every step */
#define RUN10 T_TINY " --set steps=10 --set ckpt_every=1 --set eval_every=0"


/* `dormouse train` (args after it); exit status, output (stderr and stdout) into out */
static int train(const char *dir, const char *args, char *out, size_t n) {
    char cmd[8400], log[600];
    snprintf(cmd, sizeof cmd, DM_CLI " train %s", args);
    snprintf(log, sizeof log, "%s/train.log", dir);
    return t_run_out(cmd, log, out, n);
}

/* The val_bpb number of `dormouse eval path` (its output in out); NAN when it failed. */
static double eval_bpb(const char *dir, const char *path, char *out, size_t n) {
    char cmd[8400], log[600];
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", path);
    snprintf(log, sizeof log, "%s/eval.log", dir);
    if (t_run_out(cmd, log, out, n) != 0) return NAN;
    const char *p = strstr(out, "val_bpb ");
    return p ? atof(p + 8) : NAN;
}

/* Both files of two checkpoints hold the same bytes. */
static int same_ckpt(const char *a, const char *b) {
    int same = 1;
    const char *files[] = {"model.safetensors", "optim.safetensors"};
    for (int i = 0; i < 2; i++) {
        char pa[800], pb[800];
        size_t na, nb;
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        char *x = t_slurp(pa, &na), *y = t_slurp(pb, &nb);
        same = same && x && y && na == nb && !memcmp(x, y, na);
        free(x);
        free(y);
    }
    return same;
}

/* d/ref: the uninterrupted 10-step run; d/run: the same run stopped at step 6 */
static void two_runs(char *d, size_t n) {
    char args[4096], out[16384], ref[300], run[300];
    t_tmpdir(d, n);
    snprintf(ref, sizeof ref, "%s/ref", d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(args, sizeof args, "--out %s --data %s " RUN10, ref, T_CORPUS);
    CHECK(train(d, args, out, sizeof out) == 0);
    snprintf(args, sizeof args, "--out %s --data %s " RUN10 " --until 6", run, T_CORPUS);
    CHECK(train(d, args, out, sizeof out) == 0);
}

/* the byte at offset `at` of the data section of a safetensors file, xor bit */
static void flip(const char *path, size_t at, unsigned char bit) {
    size_t n;
    unsigned char *b = (unsigned char *)t_slurp(path, &n);
    CHECK(b && n > 8);
    if (!b) return;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    CHECK(8 + hl + at < n);
    b[8 + hl + at] ^= bit;
    CHECK(t_spit(path, b, n) == 0);
    free(b);
}

/* two_runs, the BPB of d/run's ckpt-00000005 (returned), the path of ckpt-00000006's model
 * file into model */
static double runs_and_before(char *d, size_t n, char *model, size_t mn) {
    char p[400], out[16384];
    two_runs(d, n);
    snprintf(p, sizeof p, "%s/run/ckpt-00000005", d);
    snprintf(model, mn, "%s/run/ckpt-00000006/model.safetensors", d);
    return eval_bpb(d, p, out, sizeof out);
}

/* eval of d/run passes over the damaged ckpt-00000006 with a note naming the tensor whose
 * checksum does not match, and gives `before`, the BPB of the checkpoint before it */
static void expect_fallback(const char *d, double before) {
    char run[300], out[16384];
    snprintf(run, sizeof run, "%s/run", d);
    double got = eval_bpb(d, run, out, sizeof out);
    printf("%s", out);
    CHECKF(strstr(out, "does not match its checksum") && strstr(out, "tensor '"),
           "no note naming the damaged tensor");
    CHECKF(got == before, "eval gave %.6f, the checkpoint before the damaged one %.6f", got,
           before);
    CHECK(strstr(out, "checkpoint step 5") != NULL);
}

/* A bit flipped in the newest checkpoint's model data: eval passes over it with a note
 * naming the tensor, and gives the BPB of the checkpoint before it. */
TEST(robust_ckpt_damaged_data_falls_back) {
    char d[256], p[400];
    double before = runs_and_before(d, sizeof d, p, sizeof p);
    flip(p, 1000, 0x10);
    expect_fallback(d, before);
    t_rmtree(d);
}

/* The data_offsets of two tensors of one shape swapped (a header any reader accepts):
 * refused by the checksums, the tensor named, fallen back from. */
TEST(robust_ckpt_swapped_offsets_fall_back) {
    char d[256], p[400];
    double before = runs_and_before(d, sizeof d, p, sizeof p);
    t_stf f;
    CHECK(t_st_read(p, &f) == 0);
    const char *a = NULL, *b = NULL;
    for (cJSON *x = f.hdr->child; x && !b; x = x->next)
        for (cJSON *y = x->next; y && !b && strcmp(x->string, "__metadata__"); y = y->next) {
            cJSON *sx = cJSON_GetObjectItem(x, "shape"), *sy = cJSON_GetObjectItem(y, "shape");
            char *jx = cJSON_PrintUnformatted(sx), *jy = cJSON_PrintUnformatted(sy);
            if (sx && sy && !strcmp(jx, jy)) {
                a = x->string;
                b = y->string;
            }
            free(jx);
            free(jy);
        }
    CHECKF(a && b, "no two tensors of one shape");
    if (!a || !b) return;
    printf("  swapping the data_offsets of %s and %s\n", a, b);
    double ab = t_st_off_at(&f, a, 0), ae = t_st_off_at(&f, a, 1);
    t_st_set_offsets(&f, a, t_st_off_at(&f, b, 0), t_st_off_at(&f, b, 1));
    t_st_set_offsets(&f, b, ab, ae);
    t_st_write(p, &f, 0, 0);
    t_st_free(&f);
    expect_fallback(d, before);
    t_rmtree(d);
}

/* d/run/ckpt-00000006/optim.safetensors read into f (its path into p) */
static void read_optim(const char *d, char *p, size_t n, t_stf *f) {
    snprintf(p, n, "%s/run/ckpt-00000006/optim.safetensors", d);
    CHECK(t_st_read(p, f) == 0);
}

/* Resume d/run: it must end (exit 0) with d/ref's step 10, to the bit, its output holding
 * `note`. */
static void resume_to_ref(const char *d, const char *note) {
    char a[400], b[400], args[1024], out[16384];
    snprintf(args, sizeof args, "--resume %s/run", d);
    int rc = train(d, args, out, sizeof out);
    printf("%s", out);
    CHECKF(rc == 0, "the resume exited %d", rc);
    CHECKF(strstr(out, note) != NULL, "the output lacks '%s'", note);
    snprintf(a, sizeof a, "%s/run/ckpt-00000010", d);
    snprintf(b, sizeof b, "%s/ref/ckpt-00000010", d);
    CHECKF(same_ckpt(a, b), "the resumed run's step 10 differs from the uninterrupted one");
}

/* The newest checkpoint's optimizer state damaged (one exponent bit of adam_m): the resume
 * passes over it, trains from the one before, and ends with the uninterrupted run's bits. */
TEST(robust_resume_damaged_optim_not_lost) {
    char d[256], p[400];
    two_runs(d, sizeof d);
    t_stf f;
    read_optim(d, p, sizeof p, &f);
    size_t at = (size_t)t_st_off_at(&f, "adam_m", 0) + 4 * 100 + 3;
    t_st_free(&f);
    flip(p, at, 0x40);
    resume_to_ref(d, "does not match its checksum");
    t_rmtree(d);
}

/* A checkpoint that passes every check (its checksums made anew over damaged moments) but
 * diverges right after the resume: the error names it, the run falls back to the one
 * before it (kept, not pruned) and ends with the uninterrupted run's bits. */
TEST(robust_resume_divergence_falls_back) {
    char d[256], p[400];
    two_runs(d, sizeof d);
    t_stf f;
    read_optim(d, p, sizeof p, &f);
    size_t n = (size_t)(t_st_off_at(&f, "adam_m", 1) - t_st_off_at(&f, "adam_m", 0)) / 4;
    for (size_t i = 0; i < n; i++) t_st_set_float(&f, "adam_m", i, 1e18f);
    t_st_write(p, &f, 0, 1);
    t_st_free(&f);
    resume_to_ref(d, "2 steps after resuming from ckpt-00000006: taking that checkpoint as "
                     "damaged, falling back to ckpt-00000005");
    t_rmtree(d);
}

/* threads=64 under `ulimit -v 4000000` (OpenBLAS once set up a GEMM buffer per thread and
 * spun in its allocator for ever): the eval ends, with a note when 64 exceed the cores. */
TEST(robust_threads_beyond_cores_under_ulimit) {
#if defined(__SANITIZE_ADDRESS__)
    t_skip("ASan reserves more address space than ulimit -v 4000000 allows");
    return;
#else
    char d[256], args[1024], out[16384], cmd[2048], log[400];
    t_tmpdir(d, sizeof d);
    snprintf(args, sizeof args, "--out %s/r --data %s " T_TINY " --set steps=2", d, T_CORPUS);
    CHECK(train(d, args, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "ulimit -v 4000000; timeout -s KILL 300 " DM_CLI
             " eval %s/r --set threads=64", d);
    snprintf(log, sizeof log, "%s/ulimit.log", d);
    int rc = t_run_out(cmd, log, out, sizeof out);
    printf("%s", out);
    CHECKF(rc == 0, "eval under ulimit -v with threads=64 exited %d", rc);
    if (sysconf(_SC_NPROCESSORS_ONLN) < 64) CHECK(strstr(out, "oversubscribed") != NULL);
    t_rmtree(d);
#endif
}

/* Config files read by the rules of --set (the JSON texts refused: test_config.c,
 * config_strict_json): adam_eps above 0, and a file with a NUL byte refused. */
TEST(robust_config_file_strict) {
    dm_config c;
    char err[DM_ERRLEN];
    /* adam_eps is in (0, 1]: also as a float (1e-50 is 0 as one) */
    const char *eps[] = {"0", "-0", "1e-400", "1e-50"};
    for (int i = 0; i < 4; i++) {
        dm_config_default(&c);
        CHECKF(dm_config_set(&c, "adam_eps", eps[i], err, sizeof err) != 0 &&
                   strstr(err, "(0, 1]"), "adam_eps=%s: %s", eps[i], err);
    }
    dm_config_default(&c);
    CHECK(dm_config_set(&c, "adam_eps", "1e-30", err, sizeof err) == 0);
    /* still read: numbers as numbers or strings, escapes, a config.json as written */
    dm_config_default(&c);
    CHECK(dm_config_from_json(&c, "{\"seed\": \"7\", \"steps\": 20, \"lr\": 1e-3, \"mixer\": "
                              "\"g\\u0064n\", \"atlas\": false}", err, sizeof err) == 0);
    CHECK(c.seed == 7 && c.steps == 20 && c.lr == 1e-3f && c.mixer == DM_MIXER_GDN);
    char *js = dm_config_to_json(&c);
    dm_config back;
    dm_config_default(&back);
    CHECK(js && dm_config_from_json(&back, js, err, sizeof err) == 0 && back.seed == 7);
    free(js);
    /* a file with a NUL byte: the text after it is not ignored */
    char d[256], path[300], cmd[1024];
    t_tmpdir(d, sizeof d);
    snprintf(path, sizeof path, "%s/c.json", d);
    CHECK(t_spit(path, "{\"steps\": 2}\0{\"lr\": 9}", 23) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/r --config %s", d, path);
    t_expect(cmd, 2, "a NUL byte at byte 12", NULL, 0);
    t_rmtree(d);
}

/* Out of memory is a runtime failure, exit 1, also when it is met building the model a
 * config asks for (it was exit 2 there, 1 elsewhere). */
TEST(robust_out_of_memory_exits_1) {
#if defined(__SANITIZE_ADDRESS__)
    t_skip("ASan reserves more address space than ulimit -v allows");
    return;
#else
    char d[256], cmd[2048];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, "ulimit -v 3000000; " DM_CLI " train --out %s/r --data %s --set "
             "d_model=16384 --set n_head=256 --set head_dim=64 --set n_layer=1 --set steps=1 "
             "--set threads=1", d, T_CORPUS);
    t_expect(cmd, 1, "out of memory", NULL, 0);
    t_rmtree(d);
#endif
}

/* ---- metrics.jsonl: a write that fails -------------------------------------------- */

typedef struct {
    char path[400];   /* metrics.jsonl */
    long from, to;    /* writes fail after step `from` until step `to` */
    int noted, caught;
} fsize_fault;

/* The step events: after step `from` the file-size limit is set to metrics.jsonl's size
 * (every later write of it fails with EFBIG, as on a full disk), after step `to` lifted. */
static void fault_events(void *user, const dm_event *ev) {
    fsize_fault *f = user;
    if (ev->kind == DM_EV_WARN && ev->text) {
        f->noted += strstr(ev->text, "cannot write metrics.jsonl") != NULL;
        f->caught += strstr(ev->text, "metrics.jsonl written again") != NULL;
    }
    if (ev->kind != DM_EV_STEP) return;
    struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
    struct stat st;
    if (ev->step == f->from && stat(f->path, &st) == 0) r.rlim_cur = (rlim_t)st.st_size;
    if (ev->step == f->from || ev->step == f->to) CHECK(setrlimit(RLIMIT_FSIZE, &r) == 0);
}

/* The lines of metrics.jsonl are steps 1 .. n, once each, in order. */
static void check_lines(const char *path, int n) {
    char *text = t_read_text(path);
    CHECK(text != NULL);
    long want = 1;
    int lines = 0;
    for (const char *p = text; p && *p; lines++) {
        long step = -1;
        sscanf(p, "{\"step\": %ld,", &step);
        CHECKF(step == want, "line %d is of step %ld, expected %ld", lines + 1, step, want);
        want++;
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    CHECKF(lines == n, "metrics.jsonl has %d lines, the run %d steps", lines, n);
    free(text);
}

/* train in-process: the tiny run of 12 steps with the faults of f; extra: one more key */
static dm_status fault_train(const char *run, fsize_fault *f, const char *extra, int resume) {
    static char sets[16][64];
    const char *sv[16];
    const char *keys[] = {"d_model=32", "n_layer=1", "n_head=2", "head_dim=16", "gate_rank=8",
                          "batch_size=2", "seq_len=32", "eval_window=1024", "warmup_steps=1",
                          "log_every=1", "threads=1", "steps=12", "eval_every=0", extra};
    int n = (int)(sizeof keys / sizeof *keys) - !extra;
    for (int i = 0; i < n; i++) sv[i] = strcpy(sets[i], keys[i]);
    snprintf(f->path, sizeof f->path, "%s/metrics.jsonl", run);
    signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead of ending the process */
    dm_job_io io = {fault_events, f, NULL, NULL};
    dm_train_args a = {.data = T_CORPUS, .out = run, .sets = resume ? NULL : sv,
                       .n_sets = resume ? 0 : n, .resume = resume};
    return dm_train(&a, &io);
}

/* Writes of metrics.jsonl fail for five steps (an injected fault: the file-size limit):
 * the lines are kept and written once the writes work, every step's line once, in order,
 * with a note when it began and when it caught up. */
TEST(robust_metrics_write_failure_loses_nothing) {
    char d[256], run[300];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    fsize_fault f = {.from = 3, .to = 8};
    dm_status st = fault_train(run, &f, NULL, 0);
    CHECKF(st.code == DM_JOB_OK, "train: %s", st.msg);
    check_lines(f.path, 12);
    CHECKF(f.noted == 1 && f.caught == 1, "notes: failing %d, caught up %d", f.noted, f.caught);
    t_rmtree(d);
}

/* Writes that keep failing: the run stops before its next checkpoint with an error naming
 * metrics.jsonl (the one before is kept), and its resume fills the file in, no gap. */
TEST(robust_metrics_write_failure_stops_before_checkpoint) {
    char d[256], run[300];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    fsize_fault f = {.from = 3, .to = -1};
    dm_status st = fault_train(run, &f, "ckpt_every=2", 0);
    printf("  %s\n", st.msg);
    CHECKF(st.code == DM_JOB_FAILED && strstr(st.msg, "metrics.jsonl") &&
           strstr(st.msg, "before the checkpoint of step 4") &&
           strstr(st.msg, "the checkpoint of step 2"), "train: %d %s", st.code, st.msg);
    struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
    CHECK(setrlimit(RLIMIT_FSIZE, &r) == 0);
    fsize_fault none = {.from = -1, .to = -1};
    st = fault_train(run, &none, NULL, 1);
    CHECKF(st.code == DM_JOB_OK, "resume: %s", st.msg);
    check_lines(f.path, 12);
    t_rmtree(d);
}

/* ---- ab: its training child dies with it ------------------------------------------ */

/* the tiny model of an A/B cell (cells log every step: no log_every) */
#define AB_TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
                "--set gate_rank=8 --set batch_size=2 --set seq_len=32 --set eval_window=1024 " \
                "--set warmup_steps=1 --set threads=1"

/* The first child of pid (its cell's training process), -1 when none */
static int child_of(int pid) {
    char p[128];
    snprintf(p, sizeof p, "/proc/%d/task/%d/children", pid, pid);
    char *t = t_read_text(p);
    int c = t && *t ? atoi(t) : -1;
    free(t);
    return c;
}

static int alive(int pid) {
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    char *t = t_read_text(p);
    /* a zombie is dead: its state, after "(comm)", is Z */
    int a = t && strrchr(t, ')') && strrchr(t, ')')[2] != 'Z';
    free(t);
    return a;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* kill -9 of `dormouse ab` while a cell trains: the cell's process is gone within a second
 * or so (it held the sweep's locks: the rerun was refused, naming the dead sweep), and the
 * rerun finishes the sweep. */
TEST(robust_ab_child_dies_with_its_parent) {
    char d[256], cmd[4096], err[400], out[16384], log[400];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data %s " AB_TINY " --steps 100000 "
             "--seeds 1 --variant 'lr2: lr=0.006'", d, T_CORPUS);
    snprintf(err, sizeof err, "%s/ab.err", d);
    int pid = t_spawn(cmd, err), child = -1;
    for (int i = 0; i < 600 && child < 0; i++, sleep_ms(50)) child = child_of(pid);
    CHECKF(child > 0, "the sweep started no training process");
    if (child <= 0) return;
    sleep_ms(300); /* the cell trains */
    kill(pid, SIGKILL);
    t_wait(pid);
    int ms = 0;
    while (alive(child) && ms < 20000) sleep_ms(10), ms += 10;
    printf("  the training process %d %s %d ms after kill -9 of the sweep %d\n", child,
           alive(child) ? "still runs" : "was gone", ms, pid);
    CHECKF(!alive(child), "the cell's training process outlived its sweep");
    if (alive(child)) kill(child, SIGKILL);
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data %s " AB_TINY " --steps 3 --seeds 1 "
             "--variant 'lr2: lr=0.006'", d, T_CORPUS);
    snprintf(log, sizeof log, "%s/rerun.log", d);
    int rc = t_run_out(cmd, log, out, sizeof out);
    CHECKF(rc == 0, "the rerun exited %d: %s", rc, out);
    t_rmtree(d);
}

/* The in-use refusal names the live processes of the lock file: the taker and those it
 * shares the lock with (not a dead one). */
TEST(robust_lock_names_its_holders) {
    char d[256], err[1024];
    t_tmpdir(d, sizeof d);
    int fd;
    CHECK(dm_lock_dir(d, &fd, err, sizeof err) == DM_RUNDIR_OK);
    int kid = t_spawn("sleep 30", NULL), dead = t_spawn("true", NULL);
    t_wait(dead);
    long pids[3] = {(long)getpid(), (long)kid, (long)dead};
    CHECK(dm_lock_set_holders(fd, pids, 3) == 0);
    /* another open file description of the lock: refused */
    int pid = fork();
    if (pid == 0) {
        int fd2;
        int rc = dm_lock_dir(d, &fd2, err, sizeof err);
        char want[128];
        snprintf(want, sizeof want, "in use by process %ld and %d (", (long)getppid(), kid);
        _exit(rc == DM_RUNDIR_BUSY && strstr(err, want) ? 0 : (printf("  %s\n", err), 1));
    }
    CHECKF(t_wait(pid) == 0, "the refusal does not name the live holders");
    kill(kid, SIGKILL);
    t_wait(kid);
    dm_unlock_dir(d, fd);
    t_rmtree(d);
}
