/* test_user.c — what a user meets: `make install` (the command, library, header and
 * pkg-config file; the installed command finds its corpus from anywhere), commands dormouse
 * prints running as printed, `make run` keeping the previous run, eval on the run's own
 * data and its refusals, --val, the summary's units and contention flag, the progress
 * line's val step, and the sampling flags. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "check.h"
#include "dormouse.h"
#include "io/figure.h"
#include "jobs/sample.h"

#define CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz"
#define TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
             "--set gate_rank=8 --set batch_size=2 --set seq_len=32 --set eval_window=1024 " \
             "--set warmup_steps=1 --set threads=1"


/* the text right after `after` up to the next `close`, into buf */
static int between(const char *s, const char *after, char close, char *buf, size_t n) {
    const char *p = strstr(s, after);
    if (!p) return 1;
    p += strlen(after);
    const char *e = strchr(p, close);
    if (!e) return 1;
    snprintf(buf, n, "%.*s", (int)(e - p), p);
    return 0;
}

/* one line of stderr, exit 2, containing needle */
static void refused(const char *cmd, const char *needle) {
    char err[4096];
    int rc = t_run(cmd, err, sizeof err);
    int lines = 0;
    for (const char *p = err; *p; p++) lines += *p == '\n';
    printf("  [%d] %s\n       -> %s", rc, cmd, err[0] ? err : "(no stderr)\n");
    CHECKF(rc == 2 && strstr(err, needle) && lines == 1, "expected exit 2 and one line with '%s'",
           needle);
}

/* a plain corpus file of n bytes of the bundled one from offset off */
static void corpus_slice(const char *path, size_t off, size_t n) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "gzip -dc " CORPUS " | tail -c +%zu | head -c %zu > %s", off + 1,
             n, path);
    CHECK(t_run(cmd, NULL, 0) == 0);
}

static double val_bpb_of(const char *out) {
    const char *p = strstr(out, "val_bpb ");
    return p ? strtod(p + 8, NULL) : NAN;
}

/* ---- make install ---------------------------------------------------------------------- */

TEST(install_prefix_runs_anywhere) {
    char d[256], cmd[8192], outp[600], out[65536], build[4096], prefix[600], pc[4096];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(build, sizeof build, "%s", DM_CLI);
    snprintf(prefix, sizeof prefix, "%s/prefix", d);
    snprintf(cmd, sizeof cmd, "cmake --install '%s' --prefix '%s'", dirname(build), prefix);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "install failed (%d):\n%s", rc, out);
    const char *files[] = {"bin/dormouse", "include/dormouse.h", "share/dormouse/kjv.txt.gz",
                           "share/dormouse/README.md", "share/dormouse/python/dormouse.py"};
    for (int i = 0; i < 5; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", prefix, files[i]);
        CHECKF(t_exists(p), "not installed: %s", files[i]);
    }
    /* the library through its pkg-config file: a program builds, links and runs */
    snprintf(cmd, sizeof cmd, "find '%s' -name dormouse.pc -printf '%%h' && find '%s' -name "
             "libdormouse.a | grep -q .", prefix, prefix);
    rc = t_run_out(cmd, outp, pc, sizeof pc);
    CHECKF(rc == 0 && pc[0], "no dormouse.pc or libdormouse.a under %s", prefix);
    snprintf(cmd, sizeof cmd,
             "printf '#include <dormouse.h>\\n#include <stdio.h>\\nint main(void) { dm_config c; "
             "dm_config_default(&c); char e[DM_ERRLEN]; dm_model *m = dm_model_create(&c, e, "
             "sizeof e); if (!m) return 1; printf(\"%%%%zu\\\\n\", dm_model_num_params(m)); "
             "dm_model_free(m); return 0; }\\n' > %s/use.c && cd %s && cc use.c $(PKG_CONFIG_PATH='%s' "
             "pkg-config --cflags --libs dormouse) -o use && ./use", d, d, pc);
    rc = t_run_out(cmd, outp, out, sizeof out);
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    char want[64];
    snprintf(want, sizeof want, "\n%zu\n", m ? dm_model_num_params(m) : 0);
    dm_model_free(m);
    char lines[65600];
    snprintf(lines, sizeof lines, "\n%s", out); /* the number on a line of its own */
    CHECKF(rc == 0 && strstr(lines, want), "a program built with pkg-config --libs dormouse: %d\n%s",
           rc, out);
    /* the installed command, run from elsewhere, trains on the installed corpus and its
     * printed commands run */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/elsewhere && cd %s/elsewhere && '%s/bin/dormouse' train "
             "--out r " TINY " --set steps=2", d, d, prefix);
    rc = t_run_out(cmd, outp, out, sizeof out);
    char *real = realpath(prefix, NULL), corpus[1024];
    snprintf(corpus, sizeof corpus, "corpus %s/share/dormouse/kjv.txt.gz:", real ? real : prefix);
    free(real);
    CHECKF(rc == 0 && strstr(out, corpus), "installed dormouse did not train on %s:\n%s", corpus,
           out);
    char next[2048];
    CHECK(between(out, "next: ", '|', next, sizeof next) == 0);
    snprintf(cmd, sizeof cmd, "cd %s/elsewhere && %s", d, next); /* "PREFIX/bin/dormouse sample r" */
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "the printed `%s` failed (%d):\n%s", next, rc, out);
    snprintf(cmd, sizeof cmd, "'%s/bin/dormouse' --help", prefix);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "  plot ") && strstr(out, "  metrics "));
    t_rmtree(d);
}

/* ---- printed commands -------------------------------------------------------------------- */

TEST(printed_commands_run_as_printed) {
    char d[256], cmd[8192], outp[600], out[65536], got[2048], run[1024];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    /* without --out: the run directory is named at the start; --until prints how to go on */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data " CORPUS " " TINY
             " --set steps=4 --until 2", d);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "train failed (%d):\n%s", rc, out);
    CHECKF(between(out, "run directory ", ':', run, sizeof run) == 0, "no run directory "
           "named:\n%s", out);
    printf("  run directory: %s\n", run);
    CHECK(between(out, "continue with `", '`', got, sizeof got) == 0);
    CHECKF(strstr(got, DM_CLI " train --resume runs/run-") == got, "printed: %s", got);
    snprintf(cmd, sizeof cmd, "cd %s && %s", d, got);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "summary:"), "`%s` as printed: %d\n%s", got, rc, out);
    /* the commands of the summary's "next:" line */
    char line[4096];
    CHECK(between(out, "next: ", '\n', line, sizeof line) == 0);
    int n = 0;
    for (char *save = NULL, *c = strtok_r(line, "|", &save); c; c = strtok_r(NULL, "|", &save)) {
        if (strstr(c, " plot ") && !dm_fig_available()) continue;
        snprintf(cmd, sizeof cmd, "cd %s && %s", d, c);
        rc = t_run_out(cmd, outp, out, sizeof out);
        CHECKF(rc == 0, "`%s` as printed: %d\n%s", c, rc, out);
        n++;
    }
    CHECK(n >= 2);
    /* a run directory that needs quoting */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data " CORPUS " --out \"it's a run\" "
             TINY " --set steps=3 --until 1", d);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECK(rc == 0 && between(out, "continue with `", '`', got, sizeof got) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && %s", d, got);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "resuming it's a run at step 1"), "`%s` as printed: %d\n%s",
           got, rc, out);
    t_rmtree(d);
}

/* `make run` (scripts/run_default.sh) never deletes a previous run: it moves it aside */
TEST(make_run_keeps_previous_run) {
    char d[256], cmd[8192], outp[600], out[65536], old[1024], p[1400], sample[2048];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    char build[4096];
    snprintf(build, sizeof build, "%s", DM_CLI);
    snprintf(cmd, sizeof cmd, "cd %s && STEPS=2 TRAIN_ARGS='" TINY "' bash " DM_SOURCE_DIR
             "/scripts/run_default.sh %s", d, dirname(build));
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "val_bpb") && !strstr(out, "moved"), "first make run: %d\n%s",
           rc, out);
    snprintf(p, sizeof p, "%s/runs/default/metrics.jsonl", d);
    char *first = t_read_text(p);
    /* the second with the budget of a real make run (1 second here): its steps fitted */
    snprintf(cmd, sizeof cmd, "cd %s && BUDGET=1s TRAIN_ARGS='" TINY "' bash " DM_SOURCE_DIR
             "/scripts/run_default.sh %s", d, build);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "time budget 0m01s") && strstr(out, "fits"),
           "second make run (BUDGET=1s): %d\n%s", rc, out);
    CHECKF(between(out, "moved the previous runs/default to ", ' ', old, sizeof old) == 0,
           "no word of the previous run:\n%s", out);
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", d, old);
    char *kept = t_read_text(p);
    CHECKF(first && kept && !strcmp(first, kept), "the previous run was not kept whole at %s", old);
    snprintf(p, sizeof p, "%s/runs/default/summary.json", d);
    CHECK(t_exists(p));
    /* the sample command it prints runs as printed */
    CHECK(between(out, "--- sample (", ')', sample, sizeof sample) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && %s", d, sample);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "And God said"), "`%s`: %d\n%s", sample, rc, out);
    free(first);
    free(kept);
    t_rmtree(d);
}

/* ---- eval and --val ---------------------------------------------------------------------- */

TEST(eval_uses_the_runs_data_and_refuses) {
    char d[256], cmd[8192], outp[600], out[65536], data[600], run[600];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(data, sizeof data, "%s/mine.txt", d);
    snprintf(run, sizeof run, "%s/run", d);
    corpus_slice(data, 1000000, 30000);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " TINY " --set steps=3", data, run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    /* `eval RUN` scores the run's own corpus: the number train logged, and --data's */
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", run);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    char *real = realpath(data, NULL), want[1200];
    snprintf(want, sizeof want, "of %s (the run's corpus", real ? real : data);
    free(real);
    CHECKF(rc == 0 && strstr(out, want), "eval RUN did not use the run's corpus:\n%s", out);
    double own = val_bpb_of(out);
    snprintf(cmd, sizeof cmd, "%s/summary.json", run);
    char *js = t_read_text(cmd);
    cJSON *o = cJSON_Parse(js);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "val_bpb");
    CHECKF(cJSON_IsNumber(v) && fabs(v->valuedouble - own) < 2e-6, "eval RUN %.6f, the run "
           "logged %.6f", own, cJSON_IsNumber(v) ? v->valuedouble : NAN);
    cJSON_Delete(o);
    free(js);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s", run, data);
    t_run_out(cmd, outp, out, sizeof out);
    CHECK(val_bpb_of(out) == own);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data " CORPUS, run);
    t_run_out(cmd, outp, out, sizeof out);
    CHECKF(val_bpb_of(out) != own, "the bundled corpus gave the run's number");
    /* a window it cannot fill, keys that do nothing for eval, two corpora */
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --set eval_window=40000", run);
    refused(cmd, "fewer than eval_window=40000");
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --set lr=5", run);
    refused(cmd, "eval does not use lr");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --set eval_window=5", run);
    refused(cmd, "sample does not use eval_window");
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s --val %s", run, data, data);
    refused(cmd, "not both");
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --set eval_window=512 --set threads=2", run);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "on the last 512 bytes"), "keys eval reads: %d\n%s", rc, out);
    CHECK(t_run(DM_CLI " eval --help | grep -A1 'a config key eval reads' | grep -q "
                "'eval_window, seq_len, batch_size'", NULL, 0) == 0);
    /* the run's corpus gone: said, with what to pass */
    snprintf(cmd, sizeof cmd, "mv %s %s.moved && " DM_CLI " eval %s", data, data, run);
    refused(cmd, "pass --data PATH");
    t_rmtree(d);
}

TEST(train_val_corpus_of_its_own) {
    char d[256], cmd[8192], outp[600], out[65536], data[600], val[600], small[600], run[600];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(data, sizeof data, "%s/train.txt", d);
    snprintf(val, sizeof val, "%s/val.txt", d);
    snprintf(small, sizeof small, "%s/small.txt", d);
    snprintf(run, sizeof run, "%s/run", d);
    corpus_slice(data, 0, 20000);
    corpus_slice(val, 3000000, 3000);
    corpus_slice(small, 3000000, 500);
    /* a validation file shorter than the window: refused before anything is written */
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --val %s --out %s " TINY, data, small, run);
    refused(cmd, "fewer than eval_window=1024");
    CHECK(!t_exists(run));
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --val %s --out %s " TINY " --set steps=3 "
             "--until 2", data, val, run);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "all train; validation: the last 1024 bytes of"),
           "train --val: %d\n%s", rc, out);
    /* resume keeps the run's validation corpus */
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s", run);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "validation: the last 1024 bytes of") && strstr(out, "val.txt"),
           "resume: %d\n%s", rc, out);
    double logged = NAN;
    const char *p = strstr(out, "| val ");
    if (p) logged = strtod(p + 6, NULL);
    /* eval RUN scores the run's validation window: train's number; --data train.txt not */
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", run);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "the run's validation corpus"), "eval: %d\n%s", rc, out);
    double own = val_bpb_of(out);
    CHECKF(fabs(own - logged) < 1e-4, "eval RUN %.6f, train logged %.4f", own, logged);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --val %s", run, val);
    t_run_out(cmd, outp, out, sizeof out);
    CHECK(val_bpb_of(out) == own);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s", run, data);
    t_run_out(cmd, outp, out, sizeof out);
    CHECK(val_bpb_of(out) != own);
    t_rmtree(d);
}

/* ---- what train says --------------------------------------------------------------------- */

TEST(train_summary_units_probe_and_val_step) {
    char d[256], cmd[8192], outp[600], out[65536], run[600], path[700];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " CORPUS " --out %s " TINY " --set steps=5 "
             "--set log_every=1 --set eval_every=2", run);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "train: %d\n%s", rc, out);
    CHECKF(strstr(out, "1 layer, 2 heads x 16"), "header:\n%s", out);
    /* the loss in nats and in bits per byte */
    double nats = NAN, bits = NAN;
    const char *p = strstr(out, "final train loss ");
    if (p) sscanf(p, "final train loss %lf nats = %lf bits per byte", &nats, &bits);
    /* both printed to 4 decimals: they agree to 0.5e-4 + 0.5e-4 / ln 2 = 1.22e-4 */
    CHECKF(fabs(bits - nats / log(2.0)) <= 1.22e-4, "summary: %.4f nats, %.4f bits", nats, bits);
    CHECK(strstr(out, "| val ") && strstr(out, "bits per byte (step 5)"));
    /* the progress line says where val was measured: step 3 shows step 2's */
    CHECKF(strstr(out, "step 1/5 | loss ") && strstr(out, "| val - |"), "no 'val -' before the "
           "first evaluation:\n%s", out);
    p = strstr(out, "step 3/5");
    CHECKF(p && strstr(p, "bpb @2 |") && strstr(p, "bpb @2 |") < strstr(p, "\n"),
           "step 3's line does not name step 2's evaluation:\n%s", out);
    /* summary.json: both units, the val step, the contention probe's flag as on stdout */
    snprintf(path, sizeof path, "%s/summary.json", run);
    char *js = t_read_text(path);
    cJSON *o = cJSON_Parse(js);
    cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "final_train_loss"),
          *lb = cJSON_GetObjectItemCaseSensitive(o, "final_train_loss_bits"),
          *vs = cJSON_GetObjectItemCaseSensitive(o, "val_step"),
          *cw = cJSON_GetObjectItemCaseSensitive(o, "contention"),
          *cb = cJSON_GetObjectItemCaseSensitive(o, "contention_bits");
    CHECK(cJSON_IsNumber(l) && cJSON_IsNumber(lb) && fabs(lb->valuedouble - l->valuedouble / log(2.0)) < 1e-5);
    CHECK(cJSON_IsNumber(vs) && vs->valueint == 5);
    CHECKF(cJSON_IsString(cw) && cJSON_IsNumber(cb), "no contention in summary.json:\n%s", js);
    if (cJSON_IsString(cw) && cJSON_IsNumber(cb)) {
        int busy = cb->valueint != 0;
        CHECK(busy == (cw->valuestring[0] != 0));
        CHECKF(busy ? strstr(out, "machine: busy while training (") != NULL
                    : strstr(out, "machine: quiet while training") != NULL,
               "stdout disagrees with summary.json (contention '%s'):\n%s", cw->valuestring, out);
        printf("  contention: '%s'\n", cw->valuestring);
    }
    cJSON_Delete(o);
    free(js);
    /* config.json holds the seed as a number */
    snprintf(path, sizeof path, "%s/config.json", run);
    js = t_read_text(path);
    o = cJSON_Parse(js);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "seed")));
    cJSON_Delete(o);
    free(js);
    t_rmtree(d);
}

/* ---- sampling ---------------------------------------------------------------------------- */

/* top-p keeps the fewest most likely bytes whose probability reaches p; drawn frequencies
 * follow the renormalized probabilities */
TEST(sample_top_p_draws) {
    float logits[DM_VOCAB];
    for (int i = 0; i < DM_VOCAB; i++) logits[i] = -30;
    /* p(65) = .5, p(66) = .3, p(67) = .2 (the rest ~1e-13) */
    logits[65] = logf(0.5f), logits[66] = logf(0.3f), logits[67] = logf(0.2f);
    dm_rng r;
    dm_rng_seed(&r, 3, 0);
    int cnt[DM_VOCAB] = {0}, n = 20000;
    for (int i = 0; i < n; i++) cnt[dm_sample_byte(logits, 1.0f, 0, 0.7f, &r)]++;
    /* 0.5 < 0.7: 65 and 66 kept (0.8 >= 0.7), 67 dropped; 65 : 66 = 5 : 3 */
    CHECKF(cnt[65] + cnt[66] == n, "bytes outside the nucleus drawn: %d of %d", n - cnt[65] - cnt[66], n);
    double f = (double)cnt[65] / n;
    CHECKF(fabs(f - 0.625) < 0.015, "p(65) = %.4f, expected 0.625", f);
    for (int i = 0; i < 1000; i++) CHECK(dm_sample_byte(logits, 1.0f, 0, 0.4f, &r) == 65);
    /* top-p 1 draws exactly as before it existed: the same bytes as the plain rule */
    dm_rng a, b;
    dm_rng_seed(&a, 9, 1);
    dm_rng_seed(&b, 9, 1);
    for (int i = 0; i < 1000; i++) {
        int x = dm_sample_byte(logits, 0.7f, 0, 1.0f, &a);
        double u = dm_rng_uniform(&b), p[DM_VOCAB], tot = 0;
        for (int j = 0; j < DM_VOCAB; j++) tot += p[j] = exp((logits[j] - logits[65]) / (double)0.7f);
        u *= tot;
        int y = 0;
        while (y < DM_VOCAB - 1 && (u -= p[y]) >= 0) y++;
        CHECKF(x == y, "draw %d: %d, the plain rule %d", i, x, y);
        if (x != y) break;
    }
    /* with top-k: the nucleus of the k left */
    for (int i = 0; i < 1000; i++) {
        int x = dm_sample_byte(logits, 1.0f, 2, 0.99f, &r);
        CHECK(x == 65 || x == 66);
    }
}

TEST(sample_flags_prompt_file_num_samples_stop) {
    char d[256], cmd[8192], outp[600], out[65536], run[600];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " CORPUS " --out %s " TINY " --set steps=20",
             run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    /* --num-samples: sample 1 is the single sample of the same seed; each has its header */
    char one[4096];
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --prompt 'And ' --len 30 --seed 4", run);
    CHECK(t_run_out(cmd, outp, one, sizeof one) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --prompt 'And ' --len 30 --seed 4 "
             "--num-samples 3", run);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
    CHECKF(strstr(out, "=== sample 1 of 3 ===\n") && strstr(out, "=== sample 3 of 3 ===\n"),
           "headers:\n%s", out);
    const char *s1 = strstr(out, "=== sample 1 of 3 ===\n");
    CHECKF(s1 && !strncmp(s1 + 22, one, strlen(one)), "sample 1 differs from the single "
           "sample:\n%s\n---\n%s", one, out);
    /* --prompt-file: any bytes, here a newline inside */
    snprintf(cmd, sizeof cmd, "printf 'Amen.\\nAnd' > %s/p.txt && " DM_CLI " sample %s "
             "--prompt-file %s/p.txt --len 10", d, run, d);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
    CHECKF(!strncmp(out, "Amen.\nAnd", 9) && strlen(out) == 9 + 10 + 1, "prompt file:\n%s", out);
    /* --stop: greedy output ends at the first space it generates */
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --prompt 'In' --len 200 --temperature 0 "
             "--stop ' '", run);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
    size_t len = strlen(out);
    CHECKF(len >= 4 && out[len - 1] == '\n' && strchr(out, ' ') == out + len - 2,
           "--stop ' ': the output does not end at its first space:\n[%s]", out);
    /* a stop string never generated: the full length */
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --prompt 'In' --len 50 --temperature 0 "
             "--stop 'qqqzzz\\n'", run);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0 && strlen(out) == 2 + 50 + 1);
    /* bad flags */
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --top-p 0", run);
    refused(cmd, "--top-p");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --top-p 1.5", run);
    refused(cmd, "--top-p");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --stop 'a\\q'", run);
    refused(cmd, "--stop");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --prompt x --prompt-file %s/p.txt", run, d);
    refused(cmd, "not both");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --prompt-file %s/none.txt", run, d);
    refused(cmd, "--prompt-file");
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --num-samples 0", run);
    refused(cmd, "--num-samples");
    t_rmtree(d);
}
