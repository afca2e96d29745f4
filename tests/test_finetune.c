/* test_finetune.c — train --init-from: a new run from a trained model's weights. On a
 * second corpus it reaches a lower validation BPB than the same steps from scratch; the
 * model keys come from the parent and a run asking for another shape is refused with one
 * line naming the key; the run records its parent; a resumed fine-tuning run is the
 * uninterrupted one, bit for bit, without reading the parent again; --init-from with
 * --resume is refused. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "io/ckpt.h"
#include "io/dataset.h" /* dm_crc32 */
#include "jobs/train.h"

#define KJV DM_SOURCE_DIR "/data/kjv.txt.gz"
#define TINY_MODEL "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
                   "--set gate_rank=8"
#define TINY_RUN "--set batch_size=2 --set seq_len=32 --set eval_window=1024 " \
                 "--set warmup_steps=1 --set log_every=1 --set threads=1"

/* the tiny model's keys */
static void tiny_model(dm_config *c) {
    c->d_model = 32;
    c->n_layer = 1;
    c->n_head = 2;
    c->head_dim = 16;
    c->gate_rank = 8;
}

/* the run keys of the BPB comparison and the resume: the defaults' model (replaced by a
 * parent's), batch 4 x 64, a 4096-byte validation window scored at the end */
static dm_config run_keys(int steps) {
    dm_config c;
    dm_config_default(&c);
    c.batch_size = 4;
    c.seq_len = 64;
    c.eval_window = 4096;
    c.warmup_steps = 2;
    c.eval_every = 0;
    c.log_every = 1;
    c.threads = 1;
    c.steps = steps;
    return c;
}

/* A second corpus, unlike the bundled one: the project's notes (the .md files of docs/)
 * in one file. */
static void notes_corpus(const char *dir, char *path, size_t n) {
    char cmd[1024];
    snprintf(path, n, "%s/notes.txt", dir);
    snprintf(cmd, sizeof cmd, "cat %s/docs/*.md > %s", DM_SOURCE_DIR, path);
    CHECK(t_run(cmd, NULL, 0) == 0);
}

/* dm_train to the end (1) or not (0, its status printed) */
static int train_ok(const dm_train_args *a) {
    dm_status st = dm_train(a, NULL);
    if (st.code != DM_JOB_OK) printf("  train: %d %s\n", st.code, st.msg);
    return st.code == DM_JOB_OK;
}

/* A parent: the tiny model trained `steps` steps on the bundled corpus into dir/parent. */
static int parent_run(const char *dir, char *run, size_t n, int steps) {
    dm_config c = run_keys(steps);
    tiny_model(&c);
    snprintf(run, n, "%s/parent", dir);
    dm_train_args a = {.data = KJV, .out = run, .cfg = &c};
    return train_ok(&a);
}

/* metrics.jsonl of run as an array of objects (caller frees with cJSON_Delete) */
static cJSON *read_metrics(const char *run) {
    char path[1024], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    cJSON *arr = cJSON_CreateArray();
    while (f && fgets(line, sizeof line, f)) cJSON_AddItemToArray(arr, cJSON_Parse(line));
    if (f) fclose(f);
    return arr;
}

static double field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* run's metrics line of 1-based step: its field k */
static double at_step(const char *run, int step, const char *k) {
    cJSON *m = read_metrics(run);
    double v = NAN;
    for (int i = 0; i < cJSON_GetArraySize(m); i++)
        if (field(cJSON_GetArrayItem(m, i), "step") == step)
            v = field(cJSON_GetArrayItem(m, i), k);
    cJSON_Delete(m);
    return v;
}

/* `dormouse eval ckpt` on the last 4096 bytes of corpus: the BPB it prints (NAN: none) */
static double eval_on(const char *ckpt, const char *corpus, const char *dir) {
    char cmd[2048], out[8192], path[600];
    snprintf(path, sizeof path, "%s/eval.out", dir);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s --set eval_window=4096 "
             "--set threads=1", ckpt, corpus);
    int rc = t_run_out(cmd, path, out, sizeof out);
    const char *p = strstr(out, "val_bpb ");
    CHECKF(rc == 0 && p, "eval: exit %d: %s", rc, out);
    return p ? atof(p + 8) : NAN;
}

/* the parameters of run's newest checkpoint (np floats into out) */
static void params_of(const char *run, const dm_config *c, float *out, size_t np) {
    char mp[4096], err[512];
    dm_model *m = dm_model_create(c, err, sizeof err);
    CHECKF(m && dm_model_num_params(m) == np, "model: %s", m ? "size" : err);
    CHECKF(dm_ckpt_resolve(run, mp, sizeof mp, err, sizeof err) == 0, "%s", err);
    CHECKF(m && dm_ckpt_load(mp, m, NULL, err, sizeof err) == 0, "%s", err);
    if (m) memcpy(out, dm_model_params(m), np * sizeof(float));
    dm_model_free(m);
}

/* parent.json of run as an object (caller frees; NULL when it cannot be read) */
static cJSON *parent_of(const char *run) {
    char p[1024];
    snprintf(p, sizeof p, "%s/parent.json", run);
    char *text = t_read_text(p);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    return o;
}

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The CRC-32 of a file's bytes, as 8 hex digits. */
static void crc_text(const char *path, char *buf, size_t n) {
    size_t len = 0;
    char *b = t_slurp(path, &len);
    CHECKF(b != NULL, "cannot read %s", path);
    snprintf(buf, n, "%08x", b ? (unsigned)dm_crc32(0, b, len) : 0u);
    free(b);
}

/* Fine-tuning on a second corpus: after K steps on it, the run from the parent's weights
 * scores a lower validation BPB on it than K steps from scratch with the same seed and
 * keys; it starts from the parent's weights (its first loss is below the fresh model's)
 * and it learns the new corpus (its BPB there ends below the parent's own). */
TEST(finetune_beats_scratch_on_new_corpus) {
    char d[256], parent[512], notes[512], ft[512], scratch[512];
    t_tmpdir(d, sizeof d);
    notes_corpus(d, notes, sizeof notes);
    CHECK(parent_run(d, parent, sizeof parent, 60));
    enum { K = 15 };
    dm_config c = run_keys(K);
    snprintf(ft, sizeof ft, "%s/ft", d);
    dm_train_args a = {.data = notes, .out = ft, .cfg = &c, .init_from = parent};
    CHECK(train_ok(&a));
    dm_config cs = c;
    tiny_model(&cs);
    snprintf(scratch, sizeof scratch, "%s/scratch", d);
    dm_train_args b = {.data = notes, .out = scratch, .cfg = &cs};
    CHECK(train_ok(&b));

    double parent_bpb = eval_on(parent, notes, d);
    double ft_first = at_step(ft, 1, "loss"), sc_first = at_step(scratch, 1, "loss");
    double ft_bpb = at_step(ft, K, "val_bpb"), sc_bpb = at_step(scratch, K, "val_bpb");
    printf("  on the notes: parent %.4f BPB; after %d steps fine-tuned %.4f, from scratch "
           "%.4f; first loss %.4f vs %.4f\n", parent_bpb, K, ft_bpb, sc_bpb, ft_first, sc_first);
    CHECKF(ft_bpb < sc_bpb, "fine-tuned %.4f BPB is not below from scratch %.4f", ft_bpb, sc_bpb);
    CHECKF(ft_bpb < parent_bpb, "fine-tuning did not lower the notes' BPB: %.4f, the parent "
           "had %.4f", ft_bpb, parent_bpb);
    CHECKF(ft_first < sc_first, "the first loss %.4f of the fine-tuning run is not below the "
           "fresh model's %.4f: the parent's weights were not loaded", ft_first, sc_first);
    t_rmtree(d);
}

/* The model keys are the parent's: a --set or a config file asking for another shape
 * exits 2 with one line naming the first key that differs with both values, and leaves
 * nothing; the keys left out come from the parent. */
TEST(finetune_model_mismatch_refused) {
    char d[256], parent[512], cmd[4096], out[600], cfgf[600], p[700];
    t_tmpdir(d, sizeof d);
    snprintf(parent, sizeof parent, "%s/parent", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " KJV " " TINY_MODEL " " TINY_RUN
             " --steps 3 --out %s", parent);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(out, sizeof out, "%s/ft", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s " TINY_RUN " --steps 2 "
             "--set d_model=64 --set head_dim=32 --out %s", parent, out);
    t_expect(cmd, 2, "d_model=32, the run asks for d_model=64", NULL, 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s " TINY_RUN " --steps 2 "
             "--set n_layer=2 --set gate_rank=4 --out %s", parent, out);
    t_expect(cmd, 2, "n_layer=1, the run asks for n_layer=2", NULL, 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s " TINY_RUN " --steps 2 "
             "--set mixer=gdn --out %s", parent, out);
    t_expect(cmd, 2, "mixer=kda, the run asks for mixer=gdn", NULL, 0);
    snprintf(cfgf, sizeof cfgf, "%s/shape.json", d);
    const char *shape = "{\"d_model\": 32, \"n_head\": 4, \"head_dim\": 8}\n";
    CHECK(t_spit(cfgf, shape, strlen(shape)) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s --config %s " TINY_RUN
             " --steps 2 --out %s", parent, cfgf, out);
    t_expect(cmd, 2, "n_head=2, the run asks for n_head=4", NULL, 0);
    CHECKF(!t_exists(out), "a refused run left %s", out);

    /* the same keys repeated are no mismatch; the ones left out are the parent's */
    const char *same = "{\"d_model\": 32, \"n_head\": 2}\n";
    CHECK(t_spit(cfgf, same, strlen(same)) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s --config %s " TINY_RUN
             " --set head_dim=16 --steps 2 --out %s", parent, cfgf, out);
    char err[4096];
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "fine-tuning with the parent's keys repeated: exit %d %s", rc, err);
    snprintf(p, sizeof p, "%s/config.json", out);
    dm_config got;
    dm_config_default(&got);
    char *cj = t_read_text(p);
    CHECK(cj && dm_config_from_json(&got, cj, err, sizeof err) == 0);
    free(cj);
    CHECKF(got.d_model == 32 && got.n_layer == 1 && got.n_head == 2 && got.head_dim == 16 &&
           got.gate_rank == 8, "config.json has the model d_model %d n_layer %d n_head %d "
           "head_dim %d gate_rank %d, not the parent's", got.d_model, got.n_layer, got.n_head,
           got.head_dim, got.gate_rank);
    t_rmtree(d);
}

/* parent.json names the parent (its path, the checkpoint's step, the CRC-32 of its model
 * file) for each form of RUN_OR_CKPT, and so does the run's header line, also when the
 * run is resumed; a damaged newest checkpoint of a parent run is passed over. */
TEST(finetune_records_parent) {
    char d[256], parent[512], cmd[4096], out[600], log[600], text[16384], crc[16], mp[700];
    char td[256];
    t_tmpdir(td, sizeof td);
    char *real = realpath(td, NULL);
    snprintf(d, sizeof d, "%s", real ? real : td);
    free(real);
    snprintf(parent, sizeof parent, "%s/parent", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " KJV " " TINY_MODEL " " TINY_RUN
             " --steps 6 --set ckpt_every=3 --out %s", parent);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(log, sizeof log, "%s/ft.log", d);
    char forms[3][700];
    snprintf(forms[0], sizeof forms[0], "%s", parent);
    snprintf(forms[1], sizeof forms[1], "%s/ckpt-00000003", parent);
    snprintf(forms[2], sizeof forms[2], "%s/ckpt-00000006/model.safetensors", parent);
    const long steps[3] = {6, 3, 6};
    for (int f = 0; f < 3; f++) {
        snprintf(out, sizeof out, "%s/ft%d", d, f);
        snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s " TINY_RUN " --steps 2 "
                 "--set ckpt_every=1 --out %s", forms[f], out);
        int rc = t_run_out(cmd, log, text, sizeof text);
        CHECKF(rc == 0, "fine-tuning from %s: exit %d: %s", forms[f], rc, text);
        snprintf(mp, sizeof mp, "%s/ckpt-%08ld/model.safetensors", parent, steps[f]);
        crc_text(mp, crc, sizeof crc);
        char *abs = realpath(forms[f], NULL); /* the paths are recorded absolute */
        snprintf(forms[f], sizeof forms[f], "%s", abs ? abs : "");
        free(abs);
        abs = realpath(mp, NULL);
        snprintf(mp, sizeof mp, "%s", abs ? abs : "");
        free(abs);
        cJSON *o = parent_of(out);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
        CHECKF(o && !strcmp(str_of(o, "init_from"), forms[f]) &&
               !strcmp(str_of(o, "model"), mp) && cJSON_IsNumber(st) &&
               (long)st->valuedouble == steps[f] && !strcmp(str_of(o, "crc32"), crc),
               "parent.json of a run from %s: init_from '%s' model '%s' crc32 '%s'; expected "
               "model %s (step %ld), crc32 %s", forms[f], str_of(o, "init_from"),
               str_of(o, "model"), str_of(o, "crc32"), mp, steps[f], crc);
        cJSON_Delete(o);
        char header[2400];
        snprintf(header, sizeof header, "parameters, fine-tuned from %s (step %ld, model "
                 "crc32 %s)\n", forms[f], steps[f], crc);
        CHECKF(strstr(text, header) != NULL, "the header lacks '%s': %s", header, text);
    }

    /* resumed: the header still names the parent (from parent.json) */
    snprintf(out, sizeof out, "%s/ft0", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --steps 3", out);
    int rc = t_run_out(cmd, log, text, sizeof text);
    crc_text(forms[2], crc, sizeof crc);
    char header[1200];
    snprintf(header, sizeof header, "fine-tuned from %s (step 6, model crc32 %s)", forms[0], crc);
    CHECKF(rc == 0 && strstr(text, header), "resumed: exit %d, the header lacks '%s': %s", rc,
           header, text);

    /* the newest checkpoint damaged: the one before it is the parent, with a note */
    FILE *fp = fopen(forms[2], "r+b");
    CHECK(fp != NULL);
    if (fp) {
        fseek(fp, -4, SEEK_END);
        fputs("\x7f\x7f\x7f\x7f", fp);
        fclose(fp);
    }
    snprintf(out, sizeof out, "%s/ft3", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s " TINY_RUN " --steps 2 --out %s",
             parent, out);
    rc = t_run_out(cmd, log, text, sizeof text);
    CHECKF(rc == 0 && strstr(text, "skipping a checkpoint that does not load"),
           "from a run whose newest checkpoint is damaged: exit %d: %s", rc, text);
    cJSON *o = parent_of(out);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
    CHECKF(cJSON_IsNumber(st) && st->valuedouble == 3, "the parent past a damaged newest "
           "checkpoint is not ckpt-00000003");
    cJSON_Delete(o);
    t_rmtree(d);
}

/* A fine-tuning run stopped halfway and resumed is the uninterrupted one bit for bit (the
 * losses and BPBs of every step, the final parameters), with the parent gone meanwhile:
 * the resume reads its own checkpoint only. */
TEST(finetune_resume_exact) {
    char d[256], parent[512], notes[512], one[512], half[512], moved[600], cmd[1400];
    t_tmpdir(d, sizeof d);
    notes_corpus(d, notes, sizeof notes);
    CHECK(parent_run(d, parent, sizeof parent, 20));
    enum { K = 10 };
    dm_config c = run_keys(K);
    c.eval_every = 3;
    snprintf(one, sizeof one, "%s/one", d);
    snprintf(half, sizeof half, "%s/half", d);
    dm_train_args a = {.data = notes, .out = one, .cfg = &c, .init_from = parent},
                  h = {.data = notes, .out = half, .cfg = &c, .init_from = parent,
                       .until = K / 2},
                  r = {.out = half, .resume = 1};
    CHECK(train_ok(&a));
    CHECK(train_ok(&h));
    snprintf(moved, sizeof moved, "%s/gone", d);
    snprintf(cmd, sizeof cmd, "mv %s %s", parent, moved);
    CHECK(t_run(cmd, NULL, 0) == 0);
    CHECK(train_ok(&r));

    cJSON *ma = read_metrics(one), *mb = read_metrics(half);
    CHECKF(cJSON_GetArraySize(ma) == K && cJSON_GetArraySize(mb) == K,
           "metrics lines %d / %d, expected %d", cJSON_GetArraySize(ma), cJSON_GetArraySize(mb), K);
    for (int i = 0; i < cJSON_GetArraySize(ma) && i < cJSON_GetArraySize(mb); i++) {
        const cJSON *x = cJSON_GetArrayItem(ma, i), *y = cJSON_GetArrayItem(mb, i);
        float lx = (float)field(x, "loss"), ly = (float)field(y, "loss");
        CHECKF(memcmp(&lx, &ly, sizeof lx) == 0, "step %d: loss %.9g vs %.9g", i + 1, lx, ly);
        double vx = field(x, "val_bpb"), vy = field(y, "val_bpb");
        CHECKF((isnan(vx) && isnan(vy)) || vx == vy, "step %d: val_bpb %.9g vs %.9g", i + 1,
               vx, vy);
    }
    cJSON_Delete(ma);
    cJSON_Delete(mb);
    dm_config mc = c;
    tiny_model(&mc);
    dm_model *probe = dm_model_create(&mc, NULL, 0);
    size_t np = dm_model_num_params(probe);
    dm_model_free(probe);
    float *pa = t_alloc(np), *pb = t_alloc(np);
    params_of(one, &mc, pa, np);
    params_of(half, &mc, pb, np);
    CHECKF(memcmp(pa, pb, np * sizeof(float)) == 0, "final parameters differ: %s vs %s", one,
           half);
    free(pa);
    free(pb);
    cJSON *o = parent_of(half);
    char *abs = realpath(moved, NULL), want[700];
    snprintf(want, sizeof want, "%.600s", abs ? abs : "");
    free(abs);
    size_t wl = strlen(want) - strlen("gone"); /* where the parent was */
    snprintf(want + wl, sizeof want - wl, "parent");
    CHECKF(o && !strcmp(str_of(o, "init_from"), want), "the resumed run's parent.json "
           "names '%s', not %s", str_of(o, "init_from"), want);
    cJSON_Delete(o);
    t_rmtree(d);
}

/* --init-from starts a run, --resume continues one: both at once is refused, at the
 * command line (usage, exit 2, one line) and by the job. */
TEST(finetune_with_resume_refused) {
    char d[256], parent[512], cmd[2048];
    t_tmpdir(d, sizeof d);
    snprintf(parent, sizeof parent, "%s/parent", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " KJV " " TINY_MODEL " " TINY_RUN
             " --steps 2 --out %s", parent);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s --resume %s", parent, parent);
    t_expect(cmd, 2, "--init-from starts a new run and --resume continues one", NULL, 0);
    dm_train_args a = {.out = parent, .resume = 1, .init_from = parent};
    dm_status st = dm_train(&a, NULL);
    CHECKF(st.code == DM_JOB_BAD_INPUT && strstr(st.msg, "--resume"), "the job took both: "
           "%d %s", st.code, st.msg);
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s/nothing --out %s/x", d, d);
    t_expect(cmd, 2, "--init-from", NULL, 0);
    t_rmtree(d);
}

/* Under mpirun rank 0 reads the parent and sends its weights to the others: fine-tuning
 * on 2 ranks (grad_accum 2) is the one-process fine-tuning with grad_accum 2, bit for bit
 * (each step's loss, the final parameters). */
TEST(finetune_under_mpi_equals_one_process) {
    if (!DM_MPIEXEC[0]) {
        t_skip("this build has no MPI (CMake found none; Debian: libopenmpi-dev openmpi-bin)");
        return;
    }
    char d[256], parent[512], one[600], two[600], cmd[4096], log[700], text[16384];
    t_tmpdir(d, sizeof d);
    snprintf(parent, sizeof parent, "%s/parent", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " KJV " " TINY_MODEL " " TINY_RUN
             " --steps 8 --out %s", parent);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(one, sizeof one, "%s/one", d);
    snprintf(two, sizeof two, "%s/two", d);
    snprintf(log, sizeof log, "%s/ft.log", d);
    const char *keys = TINY_RUN " --set grad_accum=2 --steps 4";
    snprintf(cmd, sizeof cmd, DM_CLI " train --init-from %s --data " KJV " %s --out %s", parent,
             keys, one);
    int rc = t_run_out(cmd, log, text, sizeof text);
    CHECKF(rc == 0, "one process: exit %d: %s", rc, text);
    snprintf(cmd, sizeof cmd, T_MPIRUN " -np 2 " DM_CLI " train --init-from %s --data " KJV
             " %s --out %s", parent, keys, two);
    rc = t_run_out(cmd, log, text, sizeof text);
    CHECKF(rc == 0, "2 ranks: exit %d: %s", rc, text);
    for (int s = 1; s <= 4; s++) {
        float a = (float)at_step(one, s, "loss"), b = (float)at_step(two, s, "loss");
        CHECKF(memcmp(&a, &b, sizeof a) == 0 && isfinite(a), "step %d: loss %.9g (one "
               "process) vs %.9g (2 ranks)", s, a, b);
    }
    dm_config mc;
    dm_config_default(&mc);
    tiny_model(&mc);
    dm_model *probe = dm_model_create(&mc, NULL, 0);
    size_t np = dm_model_num_params(probe);
    dm_model_free(probe);
    float *pa = t_alloc(np), *pb = t_alloc(np);
    params_of(one, &mc, pa, np);
    params_of(two, &mc, pb, np);
    CHECKF(memcmp(pa, pb, np * sizeof(float)) == 0, "final parameters differ between one "
           "process and 2 ranks");
    free(pa);
    free(pb);
    t_rmtree(d);
}
