/* test_train.c — the jobs on a tiny model: exact resume, recurrent inference equal to the
 * training forward, checkpoint round trip, and a short run whose loss goes down. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "io/files.h"
#include "backends/cpu/kernels/kernels.h"
#include "io/ckpt.h"
#include "io/data.h"
#include "dormouse.h"
#include "jobs/eval.h"
#include "model/infer.h"
#include "model/model.h"
#include "optim/optim.h"
#include "base/rng.h"
#include "jobs/budget.h"
#include "jobs/step.h"
#include "jobs/sample.h"
#include "jobs/train.h"
#include <signal.h>

#define CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz"

static dm_config tiny_run(void) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32;
    c.n_layer = 1;
    c.n_head = 2;
    c.head_dim = 16;
    c.gate_rank = 8;
    c.batch_size = 2;
    c.seq_len = 64;
    c.steps = 12;
    c.warmup_steps = 2;
    c.eval_every = 4;
    c.log_every = 1;
    c.eval_window = 2048;
    c.threads = 2;
    return c;
}

/* metrics.jsonl as an array of objects (caller frees with cJSON_Delete) */
static cJSON *read_metrics(const char *dir) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    cJSON *arr = cJSON_CreateArray();
    while (f && fgets(line, sizeof line, f)) cJSON_AddItemToArray(arr, cJSON_Parse(line));
    if (f) fclose(f);
    return arr;
}

static double field(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void load_params(const char *run, const dm_config *c, float *out) {
    char dir[4096], err[512];
    dm_model *m = dm_model_create(c, err, sizeof err);
    CHECKF(dm_ckpt_resolve(run, dir, sizeof dir, err, sizeof err) == 0, "%s", err);
    CHECKF(dm_ckpt_load(dir, m, NULL, err, sizeof err) == 0, "%s", err);
    memcpy(out, dm_model_params(m), dm_model_num_params(m) * sizeof(float));
    dm_model_free(m);
}

/* dm_train to the end (1) or not (0, its status printed) */
static int train_ok(const dm_train_args *a) {
    dm_status st = dm_train(a, NULL);
    if (st.code != DM_JOB_OK) printf("  train: %d %s\n", st.code, st.msg);
    return st.code == DM_JOB_OK;
}

/* Runs a and b (config c, c.steps steps) logged the same loss and val BPB bits at every
 * step and end with the same parameters. */
static void same_runs(const char *a, const char *b, const dm_config *c) {
    cJSON *ma = read_metrics(a), *mb = read_metrics(b);
    CHECKF(cJSON_GetArraySize(ma) == c->steps && cJSON_GetArraySize(mb) == c->steps,
           "metrics lines %d / %d, expected %d", cJSON_GetArraySize(ma), cJSON_GetArraySize(mb),
           c->steps);
    for (int i = 0; i < cJSON_GetArraySize(ma) && i < cJSON_GetArraySize(mb); i++) {
        cJSON *x = cJSON_GetArrayItem(ma, i), *y = cJSON_GetArrayItem(mb, i);
        float lx = (float)field(x, "loss"), ly = (float)field(y, "loss");
        CHECKF(memcmp(&lx, &ly, sizeof lx) == 0, "step %d: loss %.9g (%s) vs %.9g (%s)", i + 1,
               lx, a, ly, b);
        double vx = field(x, "val_bpb"), vy = field(y, "val_bpb");
        CHECKF((isnan(vx) && isnan(vy)) || vx == vy, "step %d: val_bpb %.9g vs %.9g", i + 1, vx, vy);
    }
    printf("  final loss %.9g / %.9g\n",
           field(cJSON_GetArrayItem(ma, c->steps - 1), "loss"),
           field(cJSON_GetArrayItem(mb, c->steps - 1), "loss"));
    cJSON_Delete(ma);
    cJSON_Delete(mb);
    dm_model *probe = dm_model_create(c, NULL, 0);
    size_t np = dm_model_num_params(probe);
    dm_model_free(probe);
    float *pa = t_alloc(np), *pb = t_alloc(np);
    load_params(a, c, pa);
    load_params(b, c, pb);
    CHECKF(memcmp(pa, pb, np * sizeof(float)) == 0, "final parameters differ: %s vs %s", a, b);
    free(pa);
    free(pb);
}

static void resume_exact(dm_config c) {
    char a[256], b[256];
    t_tmpdir(a, sizeof a);
    t_tmpdir(b, sizeof b);
    dm_train_args one = {.data = CORPUS, .out = a, .cfg = &c},
                  half = {.data = CORPUS, .out = b, .cfg = &c, .until = c.steps / 2},
                  rest = {.data = CORPUS, .out = b, .resume = 1};
    CHECK(train_ok(&one));
    CHECK(train_ok(&half));
    CHECK(train_ok(&rest));
    same_runs(a, b, &c);
    t_rmtree(a);
    t_rmtree(b);
}

TEST(train_resume_exact_adamw) {
    dm_config c = tiny_run();
    c.optimizer = DM_OPT_ADAMW;
    resume_exact(c);
}

/* bf16 products and bf16 Newton-Schulz resume as exactly (N + N == 2N, bit for bit);
 * skipped, with the reason, on a CPU without hardware bf16 */
TEST(train_resume_exact_bf16) {
    if (dm_cpu_bf16_missing()) {
        t_skip("%s", dm_cpu_bf16_missing());
        return;
    }
    dm_config c = tiny_run();
    c.precision = DM_PRECISION_BF16;
    c.ns_precision = DM_PRECISION_BF16;
    resume_exact(c);
    /* precision is a backend key: an fp32 run resumes in bf16, and back */
    char d[256], path[512], err[256];
    t_tmpdir(d, sizeof d);
    dm_config f = tiny_run();
    const char *to_bf16[] = {"precision=bf16"}, *to_fp32[] = {"precision=fp32"};
    dm_train_args first = {.data = CORPUS, .out = d, .cfg = &f, .until = f.steps / 3},
                  more = {.data = CORPUS, .out = d, .resume = 1, .sets = to_bf16, .n_sets = 1,
                          .until = 2 * f.steps / 3},
                  last = {.data = CORPUS, .out = d, .resume = 1, .sets = to_fp32, .n_sets = 1};
    CHECK(train_ok(&first));
    CHECK(train_ok(&more));
    snprintf(path, sizeof path, "%s/config.json", d);
    char *cj = dm_read_file(path, err, sizeof err);
    cJSON *o = cj ? cJSON_Parse(cj) : NULL, *p = cJSON_GetObjectItemCaseSensitive(o, "precision");
    CHECKF(cJSON_IsString(p) && !strcmp(p->valuestring, "bf16"),
           "config.json after the bf16 resume: precision is not bf16");
    cJSON_Delete(o);
    free(cj);
    CHECK(train_ok(&last));
    t_rmtree(d);
}

/* bf16 products with their copies resume as exactly on any CPU: the reference bf16 path
 * standing in for the kernel (DM_CPU_BF16_REFERENCE, with DM_CPU_NO_BF16), Newton-Schulz
 * in fp32 (the stand-in is the matmuls') */
TEST(train_resume_exact_bf16_stand_in) {
    setenv("DM_CPU_NO_BF16", "1", 1);
    setenv("DM_CPU_BF16_REFERENCE", "1", 1);
    dm_config c = tiny_run();
    c.precision = DM_PRECISION_BF16;
    char err[256];
    dm_model *probe = dm_model_create(&c, err, sizeof err);
    CHECKF(probe && probe->ops.policy->prec.matmul_bf16 && probe->ops.policy->prec.matmul_via,
           "%s", probe ? "the matmuls are not bf16 on the stand-in" : err);
    dm_model_free(probe);
    resume_exact(c);
    unsetenv("DM_CPU_BF16_REFERENCE");
    unsetenv("DM_CPU_NO_BF16");
}

/* NorMuon's moments and the cautious decay resume exactly: the moments are state in the
 * checkpoint (normuon_v), the mask is a function of the weights and the update */
TEST(train_resume_exact_normuon) {
    dm_config c = tiny_run();
    c.optimizer = DM_OPT_MUON;
    c.muon_norm = DM_MUON_NORM_NEURON;
    resume_exact(c);
}

TEST(train_resume_exact_cautious_wd) {
    dm_config c = tiny_run();
    c.cautious_wd = 1;
    c.weight_decay = 0.5f;
    resume_exact(c);
    c.optimizer = DM_OPT_ADAMW; /* AdamW's cautious form alone */
    resume_exact(c);
}

/* A checkpoint of a run without NorMuon (no normuon_v) resumes with muon_norm=neuron, the
 * moments starting at zero: it equals a run that turns NorMuon on at the same step from
 * the same weights (its own resume of the same checkpoint, repeated: bit for bit), and it
 * differs from the run that kept Muon plain. */
TEST(train_resume_turns_normuon_on) {
    dm_config c = tiny_run();
    char a[256], b[256], p[256];
    t_tmpdir(a, sizeof a);
    t_tmpdir(b, sizeof b);
    t_tmpdir(p, sizeof p);
    const char *on[] = {"muon_norm=neuron"};
    dm_train_args ha = {.data = CORPUS, .out = a, .cfg = &c, .until = c.steps / 2},
                  hb = {.data = CORPUS, .out = b, .cfg = &c, .until = c.steps / 2},
                  hp = {.data = CORPUS, .out = p, .cfg = &c, .until = c.steps / 2},
                  ra = {.data = CORPUS, .out = a, .resume = 1, .sets = on, .n_sets = 1},
                  rb = {.data = CORPUS, .out = b, .resume = 1, .sets = on, .n_sets = 1},
                  rp = {.data = CORPUS, .out = p, .resume = 1};
    CHECK(train_ok(&ha) && train_ok(&hb) && train_ok(&hp));
    CHECK(train_ok(&ra));
    CHECK(train_ok(&rb));
    CHECK(train_ok(&rp));
    dm_config on_cfg = c;
    on_cfg.muon_norm = DM_MUON_NORM_NEURON;
    same_runs(a, b, &on_cfg);
    dm_model *probe = dm_model_create(&c, NULL, 0);
    size_t np = dm_model_num_params(probe);
    dm_model_free(probe);
    float *pa = t_alloc(np), *pp = t_alloc(np);
    load_params(a, &c, pa);
    load_params(p, &c, pp);
    CHECK(memcmp(pa, pp, np * sizeof(float)) != 0);
    free(pa), free(pp);
    t_rmtree(a);
    t_rmtree(b);
    t_rmtree(p);
}

TEST(train_resume_exact_muon_retract) {
    dm_config c = tiny_run();
    c.optimizer = DM_OPT_MUON;
    c.retract = DM_RETRACT_STIEFEL;
    c.retract_every = 3;
    resume_exact(c);
}

/* grad_accum: one step of batch 8 (grad_accum 1) and of batch 4 x grad_accum 2 draw the
 * same 8 sequences; the step's loss and gradient agree within 1e-6 relative (the mean
 * over 8 sequences against the mean of two means over 4), KDA and GDN */
static void accum_vs_batch(int mixer) {
    dm_config c = tiny_run();
    c.mixer = mixer;
    c.seq_len = 64;
    c.threads = 2;
    char err[256];
    dm_corpus corpus;
    CHECK(dm_corpus_load(&corpus, CORPUS, err, sizeof err) == 0);
    CHECK(dm_corpus_split(&corpus, c.eval_window, c.seq_len, err, sizeof err) == 0);
    dm_config cb[2] = {c, c};
    cb[0].batch_size = 8, cb[0].grad_accum = 1;
    cb[1].batch_size = 4, cb[1].grad_accum = 2;
    dm_model *m[2];
    dm_optim *o[2];
    dm_stepper s[2];
    dm_step_out out[2];
    for (int i = 0; i < 2; i++) {
        dm_set_threads(cb[i].threads);
        m[i] = dm_model_create(&cb[i], err, sizeof err);
        o[i] = dm_optim_create(m[i], &cb[i], err, sizeof err);
        CHECKF(dm_stepper_init(&s[i], m[i], o[i], &cb[i], NULL, err, sizeof err) == 0, "%s", err);
        CHECK(dm_stepper_run(&s[i], &corpus, c.seed, 5, 0, &out[i]) == 0);
    }
    size_t n = dm_model_num_params(m[0]);
    const float *g0 = dm_model_grads(m[0]), *g1 = dm_model_grads(m[1]);
    double rel = t_rel_rms_ff(g1, g0, n), lrel = fabs(out[1].loss - out[0].loss) / out[0].loss;
    int differ = memcmp(g0, g1, n * sizeof(float)) != 0;
    printf("  %s: loss %.9g vs %.9g (rel %.2g); gradient rel RMS %.3g (bitwise %s)\n",
           mixer == DM_MIXER_KDA ? "kda" : "gdn", out[0].loss, out[1].loss, lrel, rel,
           differ ? "different" : "equal");
    CHECKF(rel <= 1e-6, "gradients of batch 8 and of 4 x 2 differ by %.3g relative", rel);
    CHECKF(lrel <= 1e-6, "losses differ by %.3g relative", lrel);
    /* the same step's gradient norms (what clipping sees) */
    CHECKF(fabs(out[1].gnorm - out[0].gnorm) <= 1e-6 * out[0].gnorm, "norms %.9g vs %.9g",
           out[0].gnorm, out[1].gnorm);
    for (int i = 0; i < 2; i++) {
        dm_stepper_free(&s[i]);
        dm_optim_free(o[i]);
        dm_model_free(m[i]);
    }
    dm_corpus_free(&corpus);
}

TEST(grad_accum_equals_one_big_batch_kda) { accum_vs_batch(DM_MIXER_KDA); }
TEST(grad_accum_equals_one_big_batch_gdn) { accum_vs_batch(DM_MIXER_GDN); }

/* grad_accum runs are deterministic and resume exactly: 3 micro-batches of 1 sequence a
 * step, run whole and in two halves, give the same losses and parameters bit for bit */
TEST(grad_accum_resume_exact) {
    dm_config c = tiny_run();
    c.batch_size = 1;
    c.grad_accum = 3;
    resume_exact(c);
}

TEST(train_loss_goes_down) {
    dm_config c = tiny_run();
    c.steps = 40;
    c.eval_every = 0;
    c.log_every = 5;
    c.lr = 1e-2f;
    char d[256];
    t_tmpdir(d, sizeof d);
    dm_train_args a = {.data = CORPUS, .out = d, .cfg = &c};
    CHECK(train_ok(&a));
    cJSON *mt = read_metrics(d);
    int n = cJSON_GetArraySize(mt);
    CHECK(n == 8);
    if (n >= 2) {
        double first = field(cJSON_GetArrayItem(mt, 0), "loss_avg");
        double last = field(cJSON_GetArrayItem(mt, n - 1), "loss_avg");
        double bpb = field(cJSON_GetArrayItem(mt, n - 1), "val_bpb");
        printf("  mean loss steps 1-5 %.4f -> steps 36-40 %.4f; val %.4f bpb\n", first, last, bpb);
        CHECKF(last < first - 1.0, "loss %.4f -> %.4f did not go down by 1 nat", first, last);
        CHECKF(bpb < 4.0, "val bpb %.4f (uniform is 8)", bpb);
    }
    cJSON_Delete(mt);
    t_rmtree(d);
}

static void infer_vs_forward(int mixer) {
    dm_config c = tiny_run();
    c.mixer = mixer;
    c.conv_size = 4;
    dm_model *m = dm_model_create(&c, NULL, 0);
    float *p = dm_model_params(m);
    for (int i = 0; i < dm_model_num_tensors(m); i++) { /* away from init: a non-trivial model */
        const dm_tensor *t = dm_model_tensor(m, i);
        if (!(t->flags & DM_P_NO_DECAY))
            for (size_t j = 0; j < t->numel; j++) p[t->offset + j] *= 8.0f;
    }
    int T = 50;
    uint8_t tok[51];
    const char *txt = "And God said, Let there be light: and there was light. ";
    for (int i = 0; i <= T; i++) tok[i] = (uint8_t)txt[i % strlen(txt)];
    float *ref = t_alloc((size_t)T * DM_VOCAB), got[DM_VOCAB];
    dm_model_forward(m, tok, 1, T, ref);
    dm_infer *s = dm_infer_create(m);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        dm_infer_step(s, tok[t], got);
        double num = 0, den = 0;
        for (int v = 0; v < DM_VOCAB; v++) {
            num = fmax(num, fabs(got[v] - ref[t * DM_VOCAB + v]));
            den = fmax(den, fabs(ref[t * DM_VOCAB + v]));
        }
        worst = fmax(worst, num / den);
    }
    printf("  max relative logit difference over %d tokens: %.2e\n", T, worst);
    CHECKF(worst <= 1e-5, "recurrent vs training logits: %.3e", worst);
    /* reset gives the same first logits again */
    dm_infer_reset(s);
    dm_infer_step(s, tok[0], got);
    CHECK(fabs(got[0] - ref[0]) <= 1e-5 * fabs(ref[0]) + 1e-6);
    dm_infer_free(s);
    free(ref);
    dm_model_free(m);
}

TEST(infer_matches_forward_kda) { infer_vs_forward(DM_MIXER_KDA); }
TEST(infer_matches_forward_gdn) { infer_vs_forward(DM_MIXER_GDN); }

TEST(ckpt_round_trip) {
    dm_config c = tiny_run();
    char err[512], d[256];
    t_tmpdir(d, sizeof d);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
    float *p = dm_model_params(m);
    dm_rng r;
    dm_rng_seed(&r, 11, 0);
    for (size_t i = 0; i < dm_model_num_params(m); i++) p[i] += (float)(0.01 * dm_rng_normal(&r));
    CHECKF(dm_ckpt_save(d, m, o, 7, err, sizeof err) == 0, "%s", err);
    dm_config c2 = c;
    c2.seed = 99; /* a different init, overwritten by the load */
    dm_model *m2 = dm_model_create(&c2, err, sizeof err);
    dm_optim *o2 = dm_optim_create(m2, &c2, err, sizeof err);
    char dir[4096];
    long step = 0;
    dm_config rc;
    CHECK(dm_ckpt_resolve(d, dir, sizeof dir, err, sizeof err) == 0);
    CHECK(dm_ckpt_read_config(dir, &rc, &step, err, sizeof err) == 0 && step == 7);
    CHECKF(dm_ckpt_load(dir, m2, o2, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(p, dm_model_params(m2), dm_model_num_params(m) * sizeof(float)) == 0);
    dm_corpus corpus;
    CHECK(dm_corpus_load(&corpus, CORPUS, err, sizeof err) == 0);
    double b1 = dm_eval_bpb(m, corpus.bytes + corpus.n - 3000, 3000, 4, 64, NULL);
    double b2 = dm_eval_bpb(m2, corpus.bytes + corpus.n - 3000, 3000, 4, 64, NULL);
    printf("  eval bpb %.9f / %.9f\n", b1, b2);
    CHECK(memcmp(&b1, &b2, sizeof b1) == 0);
    /* a model of another shape refuses the checkpoint */
    dm_config c3 = c;
    c3.n_layer = 2;
    dm_model *m3 = dm_model_create(&c3, err, sizeof err);
    CHECK(dm_ckpt_load(dir, m3, NULL, err, sizeof err) != 0 && strstr(err, "n_layer"));
    dm_corpus_free(&corpus);
    dm_model_free(m3);
    dm_optim_free(o);
    dm_optim_free(o2);
    dm_model_free(m);
    dm_model_free(m2);
    t_rmtree(d);
}

TEST(eval_bpb_window_cut) {
    /* the window is cut into sequences at stride T; every byte but the first is predicted
     * once: the same BPB whatever the batch size */
    dm_config c = tiny_run();
    dm_model *m = dm_model_create(&c, NULL, 0);
    uint8_t buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (uint8_t)("abcdefgh ijk"[i % 12]);
    double a = dm_eval_bpb(m, buf, 1000, 1, 64, NULL), b = dm_eval_bpb(m, buf, 1000, 5, 64, NULL);
    printf("  bpb B=1 %.9f  B=5 %.9f\n", a, b);
    CHECK(fabs(a - b) <= 1e-6 * a);
    CHECK(a > 6 && a < 10); /* near-uniform model: about 8 bits */
    dm_model_free(m);
}

/* The job reports through its callback and returns a status: set-up notes, one step
 * event per step (logged ones = the metrics lines), the summary; bad input as a status. */
typedef struct {
    int notes, steps, logged, summary, header;
    long last;
} events;

static void count_event(void *user, const dm_event *ev) {
    events *e = user;
    if (ev->kind == DM_EV_NOTE) {
        e->notes++;
        e->header |= !strncmp(ev->text, "dormouse train: ", 16);
        e->summary |= !strncmp(ev->text, "summary: ", 9);
    } else if (ev->kind == DM_EV_STEP) {
        CHECK(ev->text == NULL && ev->step == e->last + 1 && ev->steps == 12);
        e->last = ev->step;
        e->steps++;
        e->logged += ev->logged;
    }
}

/* count_event, and a stop asked (the io's flag) at the first step event */
typedef struct {
    events e;
    volatile sig_atomic_t *stop;
} stopper;
static void stop_after_first(void *user, const dm_event *ev) {
    stopper *s = user;
    count_event(&s->e, ev);
    if (ev->kind == DM_EV_STEP) *s->stop = SIGTERM;
}

TEST(train_job_status_and_events) {
    dm_config c = tiny_run();
    c.log_every = 5; /* lines at 4, 5, 8, 10 (eval_every 4) and 12 */
    char d[256];
    t_tmpdir(d, sizeof d);
    events e = {0};
    dm_job_io io = {count_event, &e, NULL, NULL};
    dm_train_args a = {.data = CORPUS, .out = d, .cfg = &c};
    dm_status st = dm_train(&a, &io);
    CHECKF(st.code == DM_JOB_OK && st.msg[0] == 0, "%d %s", st.code, st.msg);
    cJSON *mt = read_metrics(d);
    printf("  %d notes, %d steps, %d logged, %d metrics lines\n", e.notes, e.steps, e.logged,
           cJSON_GetArraySize(mt));
    CHECK(e.header && e.summary && e.steps == 12 && e.logged == 5);
    CHECK(cJSON_GetArraySize(mt) == e.logged);
    cJSON_Delete(mt);
    /* a run already there, a bad key, a missing corpus: bad input, nothing reported */
    events none = {0};
    io.user = &none;
    st = dm_train(&a, &io);
    CHECKF(st.code == DM_JOB_BAD_INPUT && strstr(st.msg, "already holds a run"), "%s", st.msg);
    const char *bad[] = {"lr=fast"};
    dm_train_args b = {.data = CORPUS, .out = d, .cfg = &c, .sets = bad, .n_sets = 1};
    st = dm_train(&b, &io);
    CHECKF(st.code == DM_JOB_BAD_INPUT && strstr(st.msg, "'lr'"), "%s", st.msg);
    b = (dm_train_args){.data = "/nonexistent/corpus", .out = d, .cfg = &c};
    st = dm_train(&b, &io);
    CHECKF(st.code == DM_JOB_BAD_INPUT && strstr(st.msg, "not found"), "%s", st.msg);
    CHECK(none.notes == 0 && none.steps == 0);
    /* a stop asked before the first step: no step, interrupted, the directory as it was
     * (empty); asked after it: that step, a checkpoint, interrupted */
    char d2[256], p[512];
    t_tmpdir(d2, sizeof d2);
    volatile sig_atomic_t stop = SIGTERM;
    events one = {0};
    dm_job_io sio = {count_event, &one, &stop, NULL};
    dm_train_args s = {.data = CORPUS, .out = d2, .cfg = &c};
    st = dm_train(&s, &sio);
    CHECKF(st.code == DM_JOB_INTERRUPTED && strstr(st.msg, "before the first step"), "%s",
           st.msg);
    CHECK(one.steps == 0 && !one.summary);
    snprintf(p, sizeof p, "test -z \"$(ls -A %s)\"", d2);
    CHECKF(t_run(p, NULL, 0) == 0, "an interrupt before the first step left files in %s", d2);
    stop = 0;
    stopper sp = {{0}, &stop};
    sio.fn = stop_after_first;
    sio.user = &sp;
    st = dm_train(&s, &sio);
    /* it stops where the job next reads the flag (after the step that follows the event,
     * the point where the ranks of a run agree), with that step's checkpoint */
    char at[64];
    snprintf(at, sizeof at, "interrupted at step %d:", sp.e.steps);
    CHECKF(st.code == DM_JOB_INTERRUPTED && strstr(st.msg, at), "%s", st.msg);
    CHECK(sp.e.steps >= 1 && sp.e.steps <= 2 && !sp.e.summary);
    snprintf(p, sizeof p, "%s/ckpt-%08d/model.safetensors", d2, sp.e.steps);
    CHECK(t_exists(p));
    t_rmtree(d);
    t_rmtree(d2);
}

/* ---- the time budget -------------------------------------------------------------- */

/* dm_budget_steps after `done` steps is the largest S >= done with elapsed + (S - done)
 * step + (ceil(S / every) - floor(done / every)) eval <= (1 - reserve) budget: against a
 * count up from done, on a grid; done when nothing more fits. */
TEST(budget_steps_largest_that_fits) {
    const double budgets[] = {1, 10, 300, 3600}, steps_s[] = {0.001, 0.05, 0.3, 2.5},
                 evals_s[] = {0, 0.01, 1, 7};
    const int every[] = {0, 1, 7, 200};
    const long dones[] = {0, 1, 7, 50};
    int cases = 0;
    for (int bi = 0; bi < 4; bi++)
        for (int si = 0; si < 4; si++)
            for (int ei = 0; ei < 4; ei++)
                for (int vi = 0; vi < 4; vi++)
                    for (int di = 0; di < 4; di++) {
                        double b = budgets[bi], st = steps_s[si], ev = evals_s[ei], el = 0.1 * b;
                        long done = dones[di], want = done, e = every[vi];
                        for (long s = done + 1; s < 10000000; s++) {
                            long n_ev = e ? (s + e - 1) / e - done / e : 1;
                            if (el + (double)(s - done) * st + (double)n_ev * ev >
                                (1 - DM_BUDGET_RESERVE) * b)
                                break;
                            want = s;
                        }
                        long got = dm_budget_steps(b, el, done, st, ev, every[vi], 1L << 30);
                        CHECKF(got == want, "budget %g s, %ld done in %g s, step %g s, eval %g s "
                               "every %d: %ld steps, expected %ld", b, done, el, st, ev,
                               every[vi], got, want);
                        cases++;
                    }
    CHECK(dm_budget_steps(300, 10, 0, 0.5, 1, 100, 7) == 7);    /* at most max_steps */
    CHECK(dm_budget_steps(300, 300, 5, 0.5, 1, 100, 1000) == 5); /* the budget is spent */
    CHECK(dm_budget_steps(10, 1, 0, 0.01, 9, 100, 1000) == 0);   /* one evaluation does not fit */
    CHECK(dm_budget_steps(10, 1, 3, 0, 1, 100, 1000) == 3);      /* no rate measured */
    /* 100 done at 27.55 s, 0.1 s a step, evaluations of 1 s every 100 (the one at step 100
     * made): 95 - 27.55 = 67.45 s left (5% kept back). S = 704: 604 steps and the evaluations at 200 ..
     * 700 and the end's (7) = 67.4 s, fits; S = 705: 67.5 s does not */
    CHECK(dm_budget_steps(100, 27.55, 100, 0.1, 1, 100, 1 << 30) == 704);
    printf("  %d cases\n", cases);
}

/* the steps config.json of run dir records (and its time_budget, schedule_steps) */
static int recorded(const char *dir, long *budget, int *schedule) {
    char path[512], err[DM_ERRLEN];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *j = t_read_text(path);
    dm_config c;
    dm_config_default(&c);
    int ok = j && dm_config_from_json(&c, j, err, sizeof err) == 0;
    free(j);
    *budget = c.time_budget;
    if (schedule) *schedule = c.schedule_steps;
    return ok ? c.steps : -1;
}
static int recorded_steps(const char *dir, long *budget) { return recorded(dir, budget, NULL); }

/* A clock a test drives: every step event adds the step's cost, step_s, twice that
 * after step slow_at (a machine that slows down 2x); a stop asked at step stop_at. */
typedef struct {
    double t, step_s;
    long slow_at, stop_at, steps_seen;
    long fast_at; /* > 0: the machine is fast again after this step */
    volatile sig_atomic_t stop;
} vclock;
static double vclock_now(void *u) { return ((vclock *)u)->t; }
static void vclock_step(void *user, const dm_event *ev) {
    vclock *v = user;
    if (ev->kind != DM_EV_STEP) return;
    int slow = ev->step > v->slow_at && (v->fast_at <= 0 || ev->step <= v->fast_at);
    v->t += slow ? 2 * v->step_s : v->step_s;
    v->steps_seen = ev->step;
    if (ev->step == v->stop_at) v->stop = SIGTERM;
}
static dm_job_io vclock_io(vclock *v) {
    dm_job_io io = {vclock_step, v, &v->stop, NULL};
    return io;
}

/* a stop asked at the second step event; the events say the steps are not fixed yet */
static void stop_at_step(void *user, const dm_event *ev) {
    volatile sig_atomic_t *stop = user;
    if (ev->kind != DM_EV_STEP) return;
    CHECKF(ev->steps == 0, "step %ld of %ld: the steps are not fixed yet", ev->step, ev->steps);
    if (ev->step == 2) *stop = SIGTERM;
}

/* train a (its clock v); st when not NULL gets the status */
static int train_on(dm_train_args *a, vclock *v, dm_status *st) {
    a->clock = vclock_now;
    a->clock_ctx = v;
    dm_job_io io = vclock_io(v);
    dm_status s = dm_train(a, &io);
    if (st) *st = s;
    else if (s.code != DM_JOB_OK) printf("  train: %d %s\n", s.code, s.msg);
    return s.code == DM_JOB_OK;
}

/* A run with a time budget fits it (judged on a quiet machine: the steps are fixed from
 * the rate of the first ones), records its steps in config.json, and is, bit for bit, the
 * run with those steps and no budget (the warmup's steps, measured, do not depend on
 * steps); a budget run stopped with --until (before the steps were fixed: they are fixed
 * at the --until step then) resumes exactly; a resume cannot change the budget. */
/* A run with a time budget fits it, on a clock the test drives (no wall clock: 0.1 s a
 * step, evaluations free): the steps are fixed after the measured warmup steps as
 * dm_budget_steps says, recorded in config.json, and the run is, bit for bit, the run with
 * those steps and no budget (the warmup's steps, measured, do not depend on steps); a
 * budget run stopped with --until (before the steps were fixed: they are fixed at the
 * --until step then) resumes exactly; a resume cannot change the budget; a stop before
 * the steps are fixed keeps nothing. */
TEST(train_time_budget_fits_and_is_exact) {
    const long budget = 20;
    dm_config c = tiny_run();
    c.time_budget = budget;
    c.warmup_steps = 8; /* the steps measured before the steps are fixed */
    c.eval_every = 100;
    char a[256], b[256], d[256], e[256];
    t_tmpdir(a, sizeof a);
    t_tmpdir(b, sizeof b);
    t_tmpdir(d, sizeof d);
    t_tmpdir(e, sizeof e);
    vclock v = {.step_s = 0.1, .slow_at = 1L << 40, .stop_at = -1};
    dm_train_args ta = {.data = CORPUS, .out = a, .cfg = &c};
    CHECK(train_on(&ta, &v, NULL));
    long rb = 0;
    int n = recorded_steps(a, &rb);
    long want = dm_budget_steps((double)budget, 0.8, 8, 0.1, 0, 100, 1L << 30);
    printf("  budget %ld s: %d steps (dm_budget_steps: %ld) ending at %.2f s\n", budget, n,
           want, v.t);
    CHECKF(n >= want - 1 && n <= want + 1 && rb == budget, "config.json: steps %d (want %ld), "
           "time_budget %ld", n, want, rb);
    CHECKF(v.t <= (double)budget && v.t >= 0.9 * (double)budget, "a %ld s budget ran %.2f s",
           budget, v.t);
    /* the same run without the budget, its steps given */
    dm_config fixed = c;
    fixed.time_budget = 0;
    fixed.steps = n;
    dm_train_args tb = {.data = CORPUS, .out = b, .cfg = &fixed};
    CHECK(train_ok(&tb));
    if (n > 0) same_runs(a, b, &fixed);
    /* stopped at step 3, resumed: the run with its recorded steps */
    vclock vd = {.step_s = 0.1, .slow_at = 1L << 40, .stop_at = -1};
    dm_train_args td = {.data = CORPUS, .out = d, .cfg = &c, .until = 3},
                  rd = {.data = CORPUS, .out = d, .resume = 1};
    CHECK(train_on(&td, &vd, NULL));
    const char *other[] = {"time_budget=3"};
    dm_train_args bad = {.data = CORPUS, .out = d, .resume = 1, .sets = other, .n_sets = 1};
    dm_status st = dm_train(&bad, NULL);
    CHECKF(st.code == DM_JOB_BAD_INPUT && strstr(st.msg, "time_budget"), "%d %s", st.code,
           st.msg);
    CHECK(train_ok(&rd));
    int m = recorded_steps(d, &rb);
    fixed.steps = m;
    dm_train_args te = {.data = CORPUS, .out = e, .cfg = &fixed};
    CHECK(m > 4 && train_ok(&te));
    if (m > 4) same_runs(d, e, &fixed);
    /* a stop while the steps are measured (before they are fixed, Ctrl-C at step 2 of a
     * make-run budget): the steps are fixed then from the rate so far and the steps done
     * kept in a checkpoint; the resume ends as the run with the recorded steps */
    char f[256], g[256], p[512];
    t_tmpdir(f, sizeof f);
    t_tmpdir(g, sizeof g);
    volatile sig_atomic_t stop = 0;
    dm_job_io sio = {stop_at_step, (void *)&stop, &stop, NULL};
    dm_train_args tf = {.data = CORPUS, .out = f, .cfg = &c};
    dm_status st2 = dm_train(&tf, &sio);
    CHECKF(st2.code == DM_JOB_INTERRUPTED && strstr(st2.msg, "interrupted at step 2: checkpoint "
           "saved"), "%d %s", st2.code, st2.msg);
    snprintf(p, sizeof p, "%s/ckpt-00000002", f);
    CHECKF(t_exists(p), "a stop before the steps were fixed kept no checkpoint");
    int k = recorded_steps(f, &rb);
    dm_train_args rf = {.data = CORPUS, .out = f, .resume = 1};
    CHECKF(k > 2 && train_ok(&rf), "steps %d recorded at the stop", k);
    fixed.steps = k;
    dm_train_args tg = {.data = CORPUS, .out = g, .cfg = &fixed};
    CHECK(k > 2 && train_ok(&tg));
    if (k > 2) same_runs(f, g, &fixed);
    t_rmtree(a);
    t_rmtree(b);
    t_rmtree(d);
    t_rmtree(e);
    t_rmtree(f);
    t_rmtree(g);
}

/* A machine that slows down 2x in the middle of a budget run (the test's clock): the run is
 * cut (steps fewer, schedule_steps the planned ones, both in config.json), ends within 5%
 * of the budget, and is bit for bit the run with those two keys and no budget. A slowdown
 * in the last tenth, where no cut can move the cooldown, still ends within 5%. */
TEST(train_time_budget_slowdown_cut_exact) {
    const long budget = 20;
    dm_config c = tiny_run();
    c.time_budget = budget;
    c.warmup_steps = 8;
    c.eval_every = 0;
    const long slow_at[] = {60, 176};
    for (int i = 0; i < 2; i++) {
        char a[256], b[256];
        t_tmpdir(a, sizeof a);
        t_tmpdir(b, sizeof b);
        vclock v = {.step_s = 0.1, .slow_at = slow_at[i], .stop_at = -1};
        dm_train_args ta = {.data = CORPUS, .out = a, .cfg = &c};
        CHECK(train_on(&ta, &v, NULL));
        long rb;
        int sched = 0, n = recorded(a, &rb, &sched);
        long planned = dm_budget_steps((double)budget, 0.8, 8, 0.1, 0, 0, 1L << 30);
        printf("  2x slower after step %ld: %d steps (schedule_steps %d, planned %ld), ended at "
               "%.2f s of a %ld s budget\n", slow_at[i], n, sched, planned, v.t, budget);
        CHECKF(v.t <= 1.05 * (double)budget, "a %ld s budget ran %.2f s (slower after step %ld)",
               budget, v.t, slow_at[i]);
        CHECKF(v.t >= 0.85 * (double)budget, "a %ld s budget used only %.2f s", budget, v.t);
        if (i == 0)
            CHECKF(n < planned && sched >= planned - 1 && sched <= planned + 1,
                   "not cut: steps %d, schedule_steps %d, planned %ld", n, sched, planned);
        else
            CHECKF(sched == 0 && n >= planned - 1 && n <= planned + 1,
                   "cut in its last tenth: steps %d, schedule_steps %d", n, sched);
        dm_config fixed = c;
        fixed.time_budget = 0;
        fixed.steps = n;
        fixed.schedule_steps = sched;
        dm_train_args tb = {.data = CORPUS, .out = b, .cfg = &fixed};
        CHECK(train_ok(&tb));
        same_runs(a, b, &fixed);
        t_rmtree(a);
        t_rmtree(b);
    }
}

/* A machine that slows down 2x between steps 40 and 70 of a budget run and then recovers
 * (the test's clock): the run is cut while it is slow and grows back when it is fast again
 * (a note says so), so it uses its budget (0.9 to 1.05 of it) rather than ending early at
 * the slow rate's steps; it is bit for bit the run with its final steps and
 * schedule_steps; its summary says what a cut that stays cost. */
static void see_growth(void *user, const dm_event *ev) {
    vclock_step(user, ev);
    if (ev->kind == DM_EV_NOTE && strstr(ev->text, "the machine is faster again"))
        ((vclock *)user)->stop_at = -2; /* seen */
}
TEST(train_time_budget_grows_back_when_the_machine_recovers) {
    const long budget = 20;
    dm_config c = tiny_run();
    c.time_budget = budget;
    c.warmup_steps = 8;
    c.eval_every = 0;
    char a[256], b[256];
    t_tmpdir(a, sizeof a);
    t_tmpdir(b, sizeof b);
    vclock v = {.step_s = 0.1, .slow_at = 40, .fast_at = 70, .stop_at = -1};
    dm_job_io io = {see_growth, &v, &v.stop, NULL};
    dm_train_args ta = {.data = CORPUS, .out = a, .cfg = &c, .clock = vclock_now,
                        .clock_ctx = &v};
    dm_status st = dm_train(&ta, &io);
    CHECKF(st.code == DM_JOB_OK, "%d %s", st.code, st.msg);
    long rb;
    int sched = 0, n = recorded(a, &rb, &sched);
    /* what a cut that never grew back would leave: the steps at the slow rate */
    long slow_fit = dm_budget_steps((double)budget, 0.8 + 4.0 + 2 * 0.1 * 8, 48, 0.2, 0, 0,
                                    1L << 30);
    printf("  2x slower from step 40 to 70: %d steps (schedule_steps %d; the slow rate's fit "
           "%ld), ended at %.2f s of %ld s\n", n, sched, slow_fit, v.t, budget);
    CHECKF(v.stop_at == -2, "no note of the steps growing back");
    CHECKF(n > slow_fit + 10, "steps %d: not grown back beyond the slow rate's %ld", n,
           slow_fit);
    CHECKF(v.t >= 0.9 * (double)budget && v.t <= 1.05 * (double)budget,
           "a %ld s budget ran %.2f s", budget, v.t);
    dm_config fixed = c;
    fixed.time_budget = 0;
    fixed.steps = n;
    fixed.schedule_steps = sched;
    dm_train_args tb = {.data = CORPUS, .out = b, .cfg = &fixed};
    CHECK(train_ok(&tb));
    same_runs(a, b, &fixed);
    /* the summary's line of a cut that stayed */
    char line[512];
    CHECK(dm_budget_summary(150, 200, 1000, line, sizeof line) > 0 &&
          strstr(line, "cut to 150 of the 200 steps") && strstr(line, "50 steps (25% of the "
          "plan, 0.05 M tokens) fewer"));
    CHECK(dm_budget_summary(200, 200, 1000, line, sizeof line) == 0);
    CHECK(dm_budget_summary(200, 0, 1000, line, sizeof line) == 0);
    t_rmtree(a);
    t_rmtree(b);
}

/* dm_budget_cut grows a cut run back only before its cooldown, by 2% of the plan or to
 * the whole of it, never past schedule_steps; a run never cut never grows. */
TEST(budget_cut_grows_back_within_the_plan) {
    /* cut to 100 of 200, 40 done at 10 s of 100, 0.1 s a step: 60 s of steps fit */
    CHECK(dm_budget_cut(100, 10, 40, 100, 200, 0.1, 0, 0) == 200);
    /* a rate that fits 130 of them */
    long g = dm_budget_cut(100, 10, 40, 100, 200, 0.6, 0, 0);
    CHECKF(g == dm_budget_steps(100, 10, 40, 0.6, 0, 0, 200) && g > 100 && g < 200,
           "grown to %ld", g);
    /* a gain under 2% of the plan waits (the rate fits 103: 3 of 200) */
    CHECK(dm_budget_cut(100, 10, 40, 100, 200, (95.0 - 10) / (103 - 40), 0, 0) == 100);
    /* in its cooldown (done past dm_lr_cooldown_start(100) = 90): steps stay */
    CHECK(dm_budget_cut(100, 10, 95, 100, 200, 0.01, 0, 0) == 100);
    /* never cut (schedule_steps 0): never grows */
    CHECK(dm_budget_cut(100, 10, 40, 100, 0, 0.01, 0, 0) == 100);
}

/* A budget too small for the warmup steps it must measure (the test's clock: 1 s a step,
 * 50 warmup steps): with 10 s the steps are fixed after two of them, as many as fit (a run
 * all warmup, said in a note), and it ends within the budget; with 2 s nothing more fits:
 * refused with what it would need, the run directory left empty. */
static void keep_notes(void *user, const dm_event *ev) {
    vclock_step(user, ev);
    if (ev->kind == DM_EV_NOTE && strstr(ev->text, "fewer than warmup_steps"))
        ((vclock *)user)->stop_at = -2; /* seen */
}
TEST(train_time_budget_too_small_for_warmup) {
    dm_config c = tiny_run();
    c.warmup_steps = 50;
    c.steps = 100;
    char a[256], p[512];
    t_tmpdir(a, sizeof a);
    c.time_budget = 10;
    vclock v = {.step_s = 1, .slow_at = 1L << 40, .stop_at = -1};
    dm_job_io io = {keep_notes, &v, &v.stop, NULL};
    dm_train_args ta = {.data = CORPUS, .out = a, .cfg = &c, .clock = vclock_now,
                        .clock_ctx = &v};
    dm_status st = dm_train(&ta, &io);
    long rb;
    int n = recorded_steps(a, &rb);
    printf("  10 s at 1 s a step, 50 warmup steps: %d steps, ended at %.1f s\n", n, v.t);
    CHECKF(st.code == DM_JOB_OK && n > 2 && n < 50 && v.t <= 10 && v.stop_at == -2,
           "%d %s: %d steps, %.1f s, note %s", st.code, st.msg, n, v.t,
           v.stop_at == -2 ? "given" : "missing");
    t_rmtree(a);
    t_tmpdir(a, sizeof a);
    c.time_budget = 2;
    vclock w = {.step_s = 1, .slow_at = 1L << 40, .stop_at = -1};
    train_on(&ta, &w, &st);
    printf("  %s\n", st.msg);
    CHECKF(st.code == DM_JOB_BAD_INPUT && strstr(st.msg, "too small") &&
           strstr(st.msg, "warmup steps need about") && !strchr(st.msg, '\n'), "%d %s", st.code,
           st.msg);
    CHECKF(w.steps_seen <= 3, "refused only after %ld steps", w.steps_seen);
    snprintf(p, sizeof p, "test -z \"$(ls -A %s)\"", a);
    CHECKF(t_run(p, NULL, 0) == 0, "a refused budget left files in %s", a);
    t_rmtree(a);
}

/* The budget's arithmetic over a whole run, simulated: a 1,000-step plan (budget 300 s,
 * 0.285 s a step) on a machine that slows 2x after step j, for every j; the run as train
 * cuts it (the last DM_BUDGET_WINDOW steps' mean rate, dm_budget_cut after every step)
 * ends within 5% of the budget, and a cut's cooldown never starts in the past. */
TEST(budget_cut_bound_under_2x_slowdown) {
    const double B = 300, step = 0.285, eval = 2;
    const int every = 250;
    double worst = 0;
    long worst_j = -1;
    for (long j = 0; j <= 1100; j += 1) {
        double t = 10; /* set-up and the measured steps */
        long done = 8, steps = dm_budget_steps(B, t, done, step, eval, every, 1L << 30), sched = 0;
        double ring[DM_BUDGET_WINDOW];
        int nr = 7; /* the measured steps after the first */
        for (int i = 0; i < nr; i++) ring[i] = step;
        while (done < steps) {
            double dt = done >= j ? 2 * step : step;
            t += dt + ((done + 1) % every == 0 || done + 1 == steps ? eval : 0);
            done++;
            ring[nr++ % DM_BUDGET_WINDOW] = dt;
            int n = nr < DM_BUDGET_WINDOW ? nr : DM_BUDGET_WINDOW;
            if (n < DM_BUDGET_WINDOW / 2) continue; /* as train: too few for a rate */
            double r = 0;
            for (int i = 0; i < n; i++) r += ring[i] / n;
            long s = dm_budget_cut(B, t, done, steps, sched, r, eval, every);
            if (s != steps) {
                CHECKF(s < steps && dm_lr_cooldown_start(s) >= done,
                       "slow after %ld: a cut at step %ld to %ld (cooldown from %ld)", j, done,
                       s, dm_lr_cooldown_start(s));
                if (!sched) sched = steps;
                steps = s;
            }
        }
        if (t > worst) worst = t, worst_j = j;
    }
    printf("  the latest end: %.1f s of %.0f (slower after step %ld)\n", worst, B, worst_j);
    CHECKF(worst <= 1.05 * B, "a run slowed 2x after step %ld ended at %.1f s of a %.0f s "
           "budget", worst_j, worst, B);
}

/* The lr of a cut run (schedule_steps > steps): the planned schedule until the cooldown,
 * the last tenth of steps, then straight down to min_lr_frac at the last step; an uncut
 * run's unchanged. */
TEST(lr_cooldown_of_a_cut_run) {
    dm_config c;
    dm_config_default(&c);
    c.warmup_steps = 10;
    c.steps = 1000;
    dm_config cut = c;
    cut.steps = 600;
    cut.schedule_steps = 1000;
    long k = dm_lr_cooldown_start(600);
    CHECKF(k == 540, "the cooldown of 600 steps starts at %ld", k);
    for (long s = 0; s < k; s++)
        CHECKF(dm_lr_factor(&cut, s) == dm_lr_factor(&c, s), "step %ld: %g vs the plan's %g", s,
               dm_lr_factor(&cut, s), dm_lr_factor(&c, s));
    CHECKF(fabsf(dm_lr_factor(&cut, 599) - c.min_lr_frac) < 1e-7f, "last step %g",
           dm_lr_factor(&cut, 599));
    for (long s = k; s < 599; s++)
        CHECKF(dm_lr_factor(&cut, s + 1) < dm_lr_factor(&cut, s), "not decaying at %ld", s);
    char err[256];
    cut.schedule_steps = 500; /* fewer than steps: refused */
    CHECK(dm_config_validate(&cut, err, sizeof err) != 0 && strstr(err, "schedule_steps"));
}

/* Checkpoints every ckpt_time of wall clock by default (the test's clock: 61 s a step,
 * 12 steps, ckpt_time 5m): after steps 5 and 10 and at the end, the two newest kept;
 * `sample` on the run while it trains (at step 7) loads the newest, ckpt 5. */
typedef struct {
    vclock v;
    const char *dir;
    int sampled;
    char what[3200];
} midway;
static void sample_midway(void *user, const dm_event *ev) {
    midway *w = user;
    vclock_step(&w->v, ev);
    if (ev->kind != DM_EV_STEP || ev->step != 7) return;
    char p[512], err[256];
    dm_sample_args sa = {.ckpt = w->dir, .prompt = "In", .prompt_len = 2, .len = 8,
                         .top_p = 1, .seed = 1, .num_samples = 1};
    dm_status st = dm_sample(&sa, NULL);
    int rc = dm_ckpt_resolve(w->dir, p, sizeof p, err, sizeof err);
    snprintf(w->what, sizeof w->what, "%d %s / %s", st.code, st.msg, rc ? err : p);
    w->sampled = st.code == DM_JOB_OK && rc == 0 && strstr(p, "ckpt-00000005");
}
TEST(train_checkpoints_every_ckpt_time) {
    dm_config c = tiny_run();
    c.eval_every = 0;
    CHECKF(c.ckpt_time == 300 && c.ckpt_every == 0, "defaults: ckpt_time %ld, ckpt_every %d",
           c.ckpt_time, c.ckpt_every);
    char a[256], p[600];
    t_tmpdir(a, sizeof a);
    midway w = {.v = {.step_s = 61, .slow_at = 1L << 40, .stop_at = -1}, .dir = a};
    dm_job_io io = {sample_midway, &w, &w.v.stop, NULL};
    dm_train_args ta = {.data = CORPUS, .out = a, .cfg = &c, .clock = vclock_now,
                        .clock_ctx = &w.v};
    dm_status st = dm_train(&ta, &io);
    CHECKF(st.code == DM_JOB_OK, "%s", st.msg);
    CHECKF(w.sampled, "sample while training: %s", w.what);
    snprintf(p, sizeof p, "cd %s && test \"$(ls -d ckpt-* | tr '\\n' ' ')\" = "
             "\"ckpt-00000010 ckpt-00000012 \"", a);
    CHECKF(t_run(p, NULL, 0) == 0, "checkpoints in %s: not ckpt-10 and ckpt-12", a);
    snprintf(p, sizeof p, "%s/summary.json", a);
    char *sj = t_read_text(p);
    cJSON *so = sj ? cJSON_Parse(sj) : NULL;
    cJSON *n = cJSON_GetObjectItemCaseSensitive(so, "checkpoints");
    CHECKF(cJSON_IsNumber(n) && n->valueint == 3, "summary: %s checkpoints",
           cJSON_IsNumber(n) ? "other" : "no");
    cJSON_Delete(so);
    free(sj);
    t_rmtree(a);
}

/* After a resume the summary gives this invocation's time and the run's in all (the
 * metrics' elapsed_s of both), in the note and in summary.json. */
static void keep_summary(void *user, const dm_event *ev) {
    if (ev->kind == DM_EV_NOTE && !strncmp(ev->text, "summary:", 8))
        snprintf(user, 1024, "%.*s", (int)ev->len, ev->text);
}
TEST(train_resume_summary_gives_total_time) {
    dm_config c = tiny_run();
    char a[256], line[1024] = "", p[600];
    t_tmpdir(a, sizeof a);
    dm_train_args t1 = {.data = CORPUS, .out = a, .cfg = &c, .until = 6},
                  t2 = {.data = CORPUS, .out = a, .resume = 1};
    CHECK(train_ok(&t1));
    dm_job_io io = {keep_summary, line, NULL, NULL};
    dm_status st = dm_train(&t2, &io);
    CHECKF(st.code == DM_JOB_OK, "%s", st.msg);
    printf("  %s", line);
    CHECKF(strstr(line, "steps 7-12") && strstr(line, "in all"), "summary: %s", line);
    snprintf(p, sizeof p, "%s/summary.json", a);
    char *sj = t_read_text(p);
    cJSON *so = sj ? cJSON_Parse(sj) : NULL;
    cJSON *w = cJSON_GetObjectItemCaseSensitive(so, "wall_s"),
          *tot = cJSON_GetObjectItemCaseSensitive(so, "wall_total_s");
    CHECKF(cJSON_IsNumber(w) && cJSON_IsNumber(tot) && tot->valuedouble > w->valuedouble,
           "summary.json: wall_s %g, wall_total_s %g", cJSON_IsNumber(w) ? w->valuedouble : -1,
           cJSON_IsNumber(tot) ? tot->valuedouble : -1);
    cJSON_Delete(so);
    free(sj);
    t_rmtree(a);
}
