/* test_python.c — the PyTorch twin (python/dormouse.py) against dormouse on a checkpoint
 * trained a few steps, for each mixer: its logits (token-serial and chunked forms) against
 * the C forward's, its BPB against `dormouse eval` on the same window (to 1e-5), and its
 * samples against `dormouse sample` (the same bytes), and the checkpoint it saves back
 * through `dormouse eval`. Runs when /usr/bin/python3 imports
 * torch (Debian: python3-torch), else it is skipped with that reason. The twin's side is
 * tests/twin_check.py. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "io/ckpt.h"
#include "io/data.h"

#define CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz"
#define PY "/usr/bin/python3"
#define TINY "--set d_model=32 --set n_layer=2 --set n_head=2 --set head_dim=16 " \
             "--set gate_rank=8 --set batch_size=4 --set seq_len=64 --set eval_window=2048 " \
             "--set warmup_steps=5 --set threads=1 --set steps=60 --set eval_every=0"

static int have_torch(void) {
    return t_run(PY " -c 'import torch, numpy' 2>/dev/null", NULL, 0) == 0;
}

/* val_bpb of `dormouse eval` with extra args; NAN on failure */
static double c_eval(const char *run, const char *extra) {
    char cmd[2048], outp[600], out[8192];
    snprintf(outp, sizeof outp, "%s.eval.txt", run);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s %s", run, extra);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    const char *p = strstr(out, "val_bpb ");
    CHECKF(rc == 0 && p, "dormouse eval failed (%d): %s", rc, out);
    return p ? strtod(p + 8, NULL) : NAN;
}

/* the bytes `dormouse sample` prints, without its final newline; malloc'd */
static char *c_sample(const char *run, const char *args) {
    char cmd[2048], outp[600], *out = calloc(1, 8192);
    snprintf(outp, sizeof outp, "%s.sample.txt", run);
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s --set precision=fp32 %s", run, args);
    int rc = t_run_out(cmd, outp, out, 8192);
    CHECKF(rc == 0, "dormouse sample failed (%d): %s", rc, out);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\n') out[n - 1] = 0;
    return out;
}

static double num(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    CHECKF(cJSON_IsNumber(v), "twin output lacks %s", k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void twin_vs_c(const char *mixer_sets) {
    if (!have_torch()) {
        t_skip("/usr/bin/python3 cannot import torch and numpy (Debian: python3-torch)");
        return;
    }
    char d[256], run[512], cmd[4096], err[4096], path[4600];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " CORPUS " --out %s " TINY " %s", run,
             mixer_sets);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "training failed (%d): %s", rc, err);
    if (rc) return;

    /* dormouse's numbers: eval (fp32 and the default precision), the C forward's logits */
    double bpb32 = c_eval(run, "--set precision=fp32"), bpb_auto = c_eval(run, "");
    char model[4096];
    dm_config cfg;
    long step;
    CHECK(dm_ckpt_resolve(run, model, sizeof model, err, sizeof err) == 0);
    CHECK(dm_ckpt_read_config(model, &cfg, &step, err, sizeof err) == 0);
    cfg.precision = DM_PRECISION_FP32;
    dm_model *m = dm_model_create(&cfg, err, sizeof err);
    CHECK(m && dm_ckpt_load(model, m, NULL, err, sizeof err) == 0);
    dm_corpus c;
    CHECK(dm_corpus_load(&c, CORPUS, err, sizeof err) == 0);
    const uint8_t *win = c.bytes + c.n - cfg.eval_window;
    int B = 3, T = cfg.seq_len;
    uint8_t *tok = malloc((size_t)B * (T + 1));
    float *logits = t_alloc((size_t)B * T * DM_VOCAB);
    for (int b = 0; b < B; b++) memcpy(tok + (size_t)b * (T + 1), win + (size_t)b * T, (size_t)T + 1);
    double loss = dm_model_forward(m, tok, B, T, logits);
    const char *names[3] = {"tokens", "logits", "window"};
    const void *bufs[3] = {tok, logits, win};
    size_t sizes[3] = {(size_t)B * (T + 1), (size_t)B * T * DM_VOCAB * sizeof(float),
                       (size_t)cfg.eval_window};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s.bin", d, names[i]);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(bufs[i], 1, sizes[i], f) == sizes[i]);
        if (f) fclose(f);
    }

    /* samples: nucleus + top-k + temperature, and greedy */
    const char *sargs[2] = {"--prompt 'And God said' --len 80 --temperature 0.9 --top-k 20 "
                            "--top-p 0.9 --seed 7",
                            "--prompt 'In the beginning' --len 40 --temperature 0 --seed 1"};
    const char *sjson = "[{\"prompt\": \"And God said\", \"len\": 80, \"temperature\": 0.9, "
                        "\"top_k\": 20, \"top_p\": 0.9, \"seed\": 7}, {\"prompt\": \"In the "
                        "beginning\", \"len\": 40, \"temperature\": 0, \"top_k\": 0, "
                        "\"top_p\": 1, \"seed\": 1}]";

    /* the twin's numbers */
    char outp[600], *out = calloc(1, 1 << 16);
    snprintf(outp, sizeof outp, "%s/twin.txt", d);
    snprintf(cmd, sizeof cmd, PY " " DM_SOURCE_DIR "/tests/twin_check.py %s %s/tokens.bin "
             "%s/logits.bin %s/window.bin '%s'", run, d, d, d, sjson);
    rc = t_run_out(cmd, outp, out, 1 << 16);
    char *last = strrchr(out, '{');
    cJSON *o = last ? cJSON_Parse(last) : NULL;
    CHECKF(rc == 0 && o, "twin_check.py failed (%d):\n%s", rc, out);
    if (o) {
        double ref = num(o, "ref_max_abs"), ds = num(o, "logits_max_abs_diff_serial"),
               dc = num(o, "logits_max_abs_diff_chunked"), sc = num(o, "serial_vs_chunked"),
               t32 = num(o, "bpb_fp32"), tauto = num(o, "bpb_auto");
        printf("  logits: max |twin - C| serial %.3g, chunked %.3g (max |logit| %.3g); serial vs "
               "chunked %.3g\n", ds, dc, ref, sc);
        printf("  loss on the batch: C %.9f, twin %.9f, from the C logits %.9f\n", loss,
               num(o, "loss_twin"), num(o, "loss_from_c_logits"));
        printf("  BPB fp32: dormouse eval %.6f, twin %.8f (diff %.2g)\n", bpb32, t32,
               fabs(bpb32 - t32));
        cJSON *pa = cJSON_GetObjectItemCaseSensitive(o, "precision_auto");
        printf("  BPB precision=auto (twin: %s): dormouse eval %.6f, twin %.8f (diff %.2g)\n",
               cJSON_IsString(pa) ? pa->valuestring : "?", bpb_auto, tauto, fabs(bpb_auto - tauto));
        /* float32 sums in another order: the logits agree to a few ulps of their size */
        CHECKF(ds <= 1e-5 * fmax(1, ref) && dc <= 1e-5 * fmax(1, ref),
               "twin logits differ from C: %g %g", ds, dc);
        CHECKF(sc <= 1e-5 * fmax(1, ref), "serial and chunked twins differ by %g", sc);
        CHECKF(fabs(num(o, "loss_twin") - loss) <= 1e-5, "batch loss: twin %.9f, C %.9f",
               num(o, "loss_twin"), loss);
        /* dormouse eval prints 6 decimals: within 1e-5 with room for its rounding */
        CHECKF(fabs(bpb32 - t32) <= 1e-5, "BPB: dormouse eval %.6f, twin %.8f", bpb32, t32);
        /* the default precision: bf16 products on a CPU with bf16, emulated by the twin */
        CHECKF(fabs(bpb_auto - tauto) <= 1e-5, "BPB (precision=auto): dormouse eval %.6f, twin "
               "%.8f", bpb_auto, tauto);
        /* the checkpoint the twin saved: dormouse loads it and scores the same window (a
         * loose model file is scored on the bundled corpus, as the run was) */
        cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "saved");
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "saved_roundtrip")));
        if (cJSON_IsString(sv)) {
            double again = c_eval(sv->valuestring, "--set precision=fp32");
            CHECKF(again == bpb32, "dormouse eval of the twin's checkpoint: %.6f, of the run's "
                   "%.6f", again, bpb32);
        }
        cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "samples");
        CHECK(cJSON_GetArraySize(s) == 2);
        for (int i = 0; i < 2 && i < cJSON_GetArraySize(s); i++) {
            char *cs = c_sample(run, sargs[i]), hex[4096] = "";
            for (size_t k = 0; cs[k] && k < 2000; k++) sprintf(hex + 2 * k, "%02x", (unsigned char)cs[k]);
            const char *ts = cJSON_GetArrayItem(s, i)->valuestring;
            printf("  sample %d: %s\n", i + 1, cs);
            CHECKF(ts && !strcmp(hex, ts), "sample %d: the twin drew other bytes:\n  C    %s\n"
                   "  twin %s", i + 1, hex, ts ? ts : "?");
            free(cs);
        }
    }
    cJSON_Delete(o);
    free(out);
    free(tok);
    free(logits);
    dm_corpus_free(&c);
    dm_model_free(m);
    t_rmtree(d);
}

TEST(python_twin_matches_kda) { twin_vs_c("--set mixer=kda"); }
/* GDN, with the bounded (sigmoid) gate and tied embeddings: the other forms of the math */
TEST(python_twin_matches_gdn) {
    twin_vs_c("--set mixer=gdn --set gate_lower_bound=-4 --set tie_embeddings=true");
}

/* The twin run exactly as the README prints it (`python3 python/dormouse.py eval
 * runs/default`, the run directory replaced by a tiny run's), with the `python3` of PATH:
 * where that interpreter lacks torch (another python3 first on PATH, e.g. pyenv's) the
 * command exits 1 with one line on stderr naming what it lacks and the interpreter that has
 * it (or what to install), and the command it names works; where it has torch, it prints
 * the BPB with its progress on stderr. */
TEST(python_twin_as_the_readme_says) {
    char *readme = t_read_text(DM_SOURCE_DIR "/README.md");
    const char *at = readme ? strstr(readme, "python3 python/dormouse.py eval runs/default") : NULL;
    CHECKF(at != NULL, "README.md has no `python3 python/dormouse.py eval runs/default`");
    free(readme);
    if (!at) return;
    char d[256], run[512], cmd[4096], err[4096], outp[600];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " CORPUS " --out %s " TINY " --steps 3", run);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    int path_has = t_run("python3 -c 'import torch, numpy' 2>/dev/null", NULL, 0) == 0;
    snprintf(cmd, sizeof cmd, "cd " DM_SOURCE_DIR " && python3 python/dormouse.py eval %s", run);
    if (!path_has) {
        printf("  python3 on PATH lacks torch or numpy: %s\n",
               t_run("command -v python3 >&2", err, sizeof err) == 0 ? err : "?");
        t_expect(cmd, 1, "error: dormouse.py needs torch and numpy", err, sizeof err);
        printf("  -> %s", err);
        const char *has = strstr(err, " has them: ");
        CHECKF(has || strstr(err, "apt-get install python3-torch"), "no way out named: %s", err);
        if (has) { /* the command it names runs */
            char named[2048];
            snprintf(named, sizeof named, "%s", has + 11);
            named[strcspn(named, "\n")] = 0;
            snprintf(cmd, sizeof cmd, "cd " DM_SOURCE_DIR " && %s", named);
        } else {
            t_rmtree(d);
            return;
        }
    }
    int rc = t_run_out(cmd, outp, out, sizeof out);
    printf("%s", out);
    CHECKF(rc == 0 && strstr(out, "val_bpb "), "the twin's eval (%d):\n%s", rc, out);
    CHECKF(strstr(out, "forwards, ") != NULL, "no progress from the twin's eval:\n%s", out);
    t_rmtree(d);
}

/* "val_bpb X ... (N bytes scored" of a command's output: X, and N into *scored */
static double bpb_of(const char *out, long *scored) {
    const char *p = strstr(out, "val_bpb "), *q = strstr(out, " bytes scored");
    *scored = -1;
    if (q) {
        const char *b = q;
        while (b > out && b[-1] >= '0' && b[-1] <= '9') b--;
        *scored = strtol(b, NULL, 10);
    }
    return p ? strtod(p + 8, NULL) : NAN;
}

/* The twin scores the windows of eval_windows as `dormouse eval` does (the fixed offsets
 * of dormouse's generator, all of val.bin, the run's own setting by default) on a
 * prepared data directory, whose val.bin it maps. */
TEST(python_twin_eval_windows_match) {
    if (!have_torch()) {
        t_skip("/usr/bin/python3 cannot import torch and numpy (Debian: python3-torch)");
        return;
    }
    char d[256], run[512], cmd[4096], err[4096], outp[600];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " prepare --vocab 256 " CORPUS " --out %s/data --val-bytes 40000 && "
             DM_CLI " train --data %s/data --out %s " TINY " --steps 3 --set eval_windows=3",
             d, d, run);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    const char *sets[4] = {"", "--set eval_windows=1", "--set eval_windows=5",
                           "--set eval_windows=all"};
    const long want[4] = {3 * 2048, 2048, 5 * 2048, 40000};
    for (int i = 0; i < 4; i++) {
        long sc, st;
        snprintf(cmd, sizeof cmd, DM_CLI " eval %s %s", run, sets[i]);
        CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
        double c = bpb_of(out, &sc);
        snprintf(cmd, sizeof cmd, PY " " DM_SOURCE_DIR "/python/dormouse.py eval %s %s", run,
                 sets[i]);
        int rc = t_run_out(cmd, outp, out, sizeof out);
        double t = bpb_of(out, &st);
        printf("  eval %-22s dormouse %.6f (%ld bytes), twin %.6f (%ld bytes)\n",
               sets[i][0] ? sets[i] : "(the run's: 3)", c, sc, t, st);
        CHECKF(rc == 0 && fabs(c - t) <= 1e-5 && sc == want[i] && st == want[i],
               "eval %s: dormouse %.6f (%ld), twin %.6f (%ld)", sets[i], c, sc, t, st);
    }
    /* too many windows: refused by both */
    snprintf(cmd, sizeof cmd, PY " " DM_SOURCE_DIR "/python/dormouse.py eval %s --set "
             "eval_windows=30 2>&1 >/dev/null | grep -q 'need a validation set of at least'", run);
    CHECK(t_run(cmd, NULL, 0) == 0);
    t_rmtree(d);
}

/* A run of tokens: the twin loads its tokenizer from the checkpoint, scores the windows
 * by their covering tokens (val.tok of the data directory; a text file encoded with the
 * run's tokenizer) and agrees with dormouse eval. */
TEST(python_twin_reads_token_runs) {
    if (!have_torch() || t_run(PY " -c 'import sentencepiece'", NULL, 0) != 0 ||
        dm_tokenizer_missing()) {
        t_skip("needs /usr/bin/python3 with torch, numpy and sentencepiece (Debian: "
               "python3-torch, python3-sentencepiece) and SentencePiece in this build");
        return;
    }
    char d[256], run[512], cmd[4096], err[4096], outp[600];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, "gzip -dc " CORPUS " | head -c 300000 > %s/t.txt && "
             DM_CLI " prepare %s/t.txt --out %s/data --vocab 500 --val-bytes 30000 && "
             DM_CLI " train --data %s/data --out %s " TINY " --steps 3", d, d, d, d, run);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "%s", err);
    const char *sets[4] = {"", "--set eval_windows=3", "--set eval_windows=all",
                           "--data T.txt"};
    for (int i = 0; i < 4; i++) {
        char s[700];
        snprintf(s, sizeof s, "%s", sets[i]);
        if (i == 3) snprintf(s, sizeof s, "--data %s/t.txt", d);
        long sc, st;
        snprintf(cmd, sizeof cmd, DM_CLI " eval %s %s", run, s);
        CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
        double c = bpb_of(out, &sc);
        snprintf(cmd, sizeof cmd, PY " " DM_SOURCE_DIR "/python/dormouse.py eval %s %s", run, s);
        int rc = t_run_out(cmd, outp, out, sizeof out);
        double t = bpb_of(out, &st);
        printf("  eval %-22s dormouse %.6f (%ld bytes), twin %.6f (%ld bytes)\n",
               sets[i][0] ? sets[i] : "(the run's)", c, sc, t, st);
        CHECKF(rc == 0 && c > 0 && fabs(c - t) <= 1e-5 && sc == st,
               "eval %s: dormouse %.6f (%ld), twin %.6f (%ld)", s, c, sc, t, st);
    }
    t_rmtree(d);
}

/* The peer of `dormouse bench`: the twin's `bench` times a tiny model's step in PyTorch
 * (the twin's own core on this machine; fla's where importable on a GPU) and appends rows
 * in benches/history.tsv's columns to the file it is given, the header first; a key it
 * does not take is refused in one line. */
TEST(python_twin_bench_rows) {
    if (!have_torch()) {
        t_skip("/usr/bin/python3 cannot import torch and numpy (Debian: python3-torch)");
        return;
    }
    char d[256], hist[400], cmd[2048], err[4096];
    static char out[1 << 14];
    t_tmpdir(d, sizeof d);
    snprintf(hist, sizeof hist, "%s/history.tsv", d);
    snprintf(cmd, sizeof cmd, PY " " DM_SOURCE_DIR "/python/dormouse.py bench --reps 1 "
             "--set d_model=32 --set n_head=1 --set head_dim=32 --set gate_rank=8 "
             "--set batch_size=1 --set seq_len=32 --history %s", hist);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "%s", err);
    FILE *f = fopen(hist, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    if (f) fclose(f);
    out[n] = 0;
    int rows = 0;
    for (const char *p = out; (p = strstr(p, "\tbench:peer\t")); p++) rows++;
    printf("  %d rows\n", rows);
    const char *head = "date\tcommit\tmachine\twhat\tconfig\tmetric\tvalue\tspread\tn\tflags\n";
    CHECK(!strncmp(out, head, strlen(head)));
    CHECKF(rows == 4 && strstr(out, "core=chunked") && strstr(out, "\tstep_ms\t"), "%s", out);
    snprintf(cmd, sizeof cmd, PY " " DM_SOURCE_DIR "/python/dormouse.py bench --set lr=1");
    CHECK(t_run(cmd, err, sizeof err) != 0 && strstr(err, "error: --set lr=1: bench takes"));
}
