/* test_config.c — the config key table (src/base/config.c): every key in one group, the
 * model keys exactly those that fix the network, the one "model keys cannot change" check,
 * the gemm key, and `dormouse train --help` listing the keys by group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"

static const char *const MODEL[] = {"d_model", "n_layer", "n_head", "head_dim", "gate_rank",
                                    "conv_size", "mixer", "gate_lower_bound",
                                    "tie_embeddings", "vocab", NULL};
static const char *const BACKEND[] = {"kda_impl", "chunk_size", "norm_impl", "gemm",
                                      "precision", "ns_precision", "verify_fused", "threads",
                                      "atlas", "checkpointing", "backend", "device", "comm_timeout",
                                      "step_graph", NULL};

static int in(const char *const *list, const char *s) {
    for (; *list; list++)
        if (!strcmp(*list, s)) return 1;
    return 0;
}

TEST(config_key_groups) {
    int n[3] = {0, 0, 0}, keys = 0;
    for (int i = 0; dm_config_key_name(i); i++, keys++) {
        const char *k = dm_config_key_name(i);
        int g = dm_config_key_group(i);
        int want = in(MODEL, k) ? DM_KEY_MODEL : in(BACKEND, k) ? DM_KEY_BACKEND : DM_KEY_TRAINING;
        CHECKF(g == want, "key %s is in group %d (%s), expected %s", k, g,
               dm_config_group_name(g) ? dm_config_group_name(g) : "?",
               dm_config_group_name(want));
        CHECK(dm_config_is_model_key(k) == (want == DM_KEY_MODEL));
        if (g >= 0 && g < 3) n[g]++;
    }
    printf("  %d keys: %d model, %d training, %d backend\n", keys, n[0], n[1], n[2]);
    CHECK(n[DM_KEY_MODEL] == 10 && n[DM_KEY_BACKEND] == 14 && n[DM_KEY_TRAINING] > 20);
    CHECK(dm_config_key_group(keys) == -1 && dm_config_key_name(keys) == NULL);
    CHECK(!dm_config_is_model_key("no_such_key"));
    CHECK(!strcmp(dm_config_group_name(DM_KEY_MODEL), "model"));
    CHECK(!strcmp(dm_config_group_name(DM_KEY_TRAINING), "training"));
    CHECK(!strcmp(dm_config_group_name(DM_KEY_BACKEND), "backend"));
}

TEST(config_check_model_and_diff) {
    dm_config a, b;
    dm_config_default(&a);
    b = a;
    char err[DM_ERRLEN] = "", va[64], vb[64];
    /* run keys may change */
    b.steps = 7;
    b.threads = 3;
    b.gemm = DM_GEMM_ONEDNN;
    CHECK(dm_config_check_model(&a, &b, err, sizeof err) == 0 && err[0] == 0);
    CHECK(dm_config_diff(&a, &b, DM_KEYS_MODEL, va, vb, sizeof va) == NULL);
    const char *k = dm_config_diff(&a, &b, DM_KEYS_ALL, va, vb, sizeof va);
    CHECKF(k && !strcmp(k, "steps") && !strcmp(va, "1000") && !strcmp(vb, "7"), "diff %s %s %s",
           k ? k : "-", va, vb);
    /* each model key may not */
    for (int i = 0; MODEL[i]; i++) {
        b = a;
        const char *v = !strcmp(MODEL[i], "mixer") ? "gdn"
                        : !strcmp(MODEL[i], "tie_embeddings") ? "true"
                        : !strcmp(MODEL[i], "gate_lower_bound") ? "-5"
                        : !strcmp(MODEL[i], "vocab") ? "512" : "3";
        CHECK(dm_config_set(&b, MODEL[i], v, err, sizeof err) == 0);
        CHECKF(dm_config_check_model(&a, &b, err, sizeof err) != 0, "%s=%s passed", MODEL[i], v);
        CHECKF(strstr(err, MODEL[i]) && strstr(err, "model keys cannot change"), "%s", err);
    }
    b = a;
    b.n_layer = 3;
    dm_config_check_model(&a, &b, err, sizeof err);
    printf("  %s\n", err);
    CHECK(!strcmp(err, "checkpoint has n_layer=2, the run asks for n_layer=3 (model keys "
                       "cannot change)"));
}

TEST(config_gemm_key) {
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN], buf[64];
    CHECK(c.gemm == DM_GEMM_AUTO);
    CHECK(dm_config_get(&c, "gemm", buf, sizeof buf) == 0 && !strcmp(buf, "auto"));
    CHECK(dm_config_set(&c, "gemm", "openblas", err, sizeof err) == 0 && c.gemm == DM_GEMM_OPENBLAS);
    CHECK(dm_config_set(&c, "gemm", "onednn", err, sizeof err) == 0 && c.gemm == DM_GEMM_ONEDNN);
    CHECK(dm_config_set(&c, "gemm", "mkl", err, sizeof err) != 0);
    CHECKF(strstr(err, "auto|openblas|onednn") != NULL, "%s", err);
    /* through JSON and back */
    char *js = dm_config_to_json(&c);
    dm_config d;
    dm_config_default(&d);
    CHECK(strstr(js, "\"gemm\":") != NULL);
    CHECK(dm_config_from_json(&d, js, err, sizeof err) == 0 && d.gemm == DM_GEMM_ONEDNN);
    free(js);
    c.gemm = 3;
    CHECK(dm_config_validate(&c, err, sizeof err) != 0 && strstr(err, "gemm"));
}

TEST(config_help_lists_groups) {
    char cmd[1024], err[512];
    /* the three headings, in order, each followed by one of its keys */
    snprintf(cmd, sizeof cmd, DM_CLI " train --help | awk '"
             "/^model keys/ {g=1} /^training keys/ {g=2} /^backend keys/ {g=3} "
             "g==1 && $1==\"d_model\" {m=1} g==2 && $1==\"retract_every\" {t=1} "
             "g==3 && $1==\"gemm\" {b=1} g==1 && $1==\"threads\" {bad=1} "
             "END {exit !(m && t && b && !bad)}'");
    CHECKF(t_run(cmd, err, sizeof err) == 0, "train --help does not list the keys by group");
    snprintf(cmd, sizeof cmd, DM_CLI " train --help | grep -q 'a checkpoint fixes these'");
    CHECK(t_run(cmd, err, sizeof err) == 0);
}

/* NorMuon and cautious decay: off by default; their values, ranges and the relation to
 * the optimizer refused with a line naming the key; train --help lists them */
TEST(config_normuon_and_cautious_wd) {
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN], buf[64];
    CHECK(c.muon_norm == DM_MUON_NORM_NONE && c.cautious_wd == 0 && c.normuon_beta2 == 0.95f);
    CHECK(dm_config_get(&c, "muon_norm", buf, sizeof buf) == 0 && !strcmp(buf, "none"));
    CHECK(dm_config_set(&c, "muon_norm", "neuron", err, sizeof err) == 0);
    CHECK(c.muon_norm == DM_MUON_NORM_NEURON);
    CHECK(dm_config_set(&c, "normuon_beta2", "0.9", err, sizeof err) == 0 && c.normuon_beta2 == 0.9f);
    CHECK(dm_config_set(&c, "cautious_wd", "1", err, sizeof err) == 0 && c.cautious_wd == 1);
    CHECK(dm_config_validate(&c, err, sizeof err) == 0);
    CHECKF(dm_config_set(&c, "muon_norm", "row", err, sizeof err) != 0 &&
           strstr(err, "muon_norm") && strstr(err, "neuron"), "%s", err);
    CHECKF(dm_config_set(&c, "normuon_beta2", "1", err, sizeof err) != 0 &&
           strstr(err, "normuon_beta2"), "%s", err);
    CHECKF(dm_config_set(&c, "normuon_beta2", "-0.1", err, sizeof err) != 0, "%s", err);
    CHECKF(dm_config_set(&c, "cautious_wd", "2", err, sizeof err) != 0 &&
           strstr(err, "cautious_wd"), "%s", err);
    c.optimizer = DM_OPT_ADAMW; /* NorMuon needs Muon; cautious decay does not */
    CHECKF(dm_config_validate(&c, err, sizeof err) != 0 && !strncmp(err, "muon_norm:", 10),
           "%s", err);
    c.muon_norm = DM_MUON_NORM_NONE;
    CHECKF(dm_config_validate(&c, err, sizeof err) == 0, "%s", err);
    char cmd[512];
    snprintf(cmd, sizeof cmd, DM_CLI " train --help | grep -q '^ *muon_norm' && " DM_CLI
             " train --help | grep -q '^ *cautious_wd' && " DM_CLI
             " train --help | grep -q '^ *normuon_beta2'");
    CHECK(t_run(cmd, err, sizeof err) == 0);
    /* bad usage on the command line: one line, exit 2 */
    snprintf(cmd, sizeof cmd, DM_CLI " train --set muon_norm=neuron --set optimizer=adamw "
             "--out /nonexistent/x 2>&1 | grep -c . | grep -qx 1; "
             DM_CLI " train --set muon_norm=neuron --set optimizer=adamw --out /nonexistent/x "
             ">/dev/null 2>&1; test $? -eq 2");
    CHECK(t_run(cmd, err, sizeof err) == 0);
}

/* precision defaults to auto from the A/B (README "defaults that come from measurements") */
TEST(config_precision_default_auto) {
    dm_config c;
    dm_config_default(&c);
    char buf[64];
    CHECK(c.precision == DM_PRECISION_AUTO && c.ns_precision == DM_PRECISION_AUTO);
    CHECK(dm_config_get(&c, "precision", buf, sizeof buf) == 0 && !strcmp(buf, "auto"));
}

/* config.json and checkpoint metadata hold the seed as a JSON number (kept within 2^53 - 1,
 * what every JSON reader reads exactly); a seed written as a string (runs of older
 * dormouse) still reads. */
TEST(config_seed_is_a_json_number) {
    dm_config c, r;
    dm_config_default(&c);
    char err[DM_ERRLEN];
    CHECK(dm_config_set(&c, "seed", "9007199254740991", err, sizeof err) == 0);
    char *js = dm_config_to_json(&c);
    const char *p = strstr(js, "\"seed\":");
    CHECKF(p != NULL, "no seed in %s", js);
    if (p) {
        p += 7;
        while (*p == ' ' || *p == '\t') p++;
        CHECKF(!strncmp(p, "9007199254740991", 16), "seed written as: %.24s", p);
    }
    dm_config_default(&r);
    CHECK(dm_config_from_json(&r, js, err, sizeof err) == 0 && r.seed == 9007199254740991ull);
    free(js);
    CHECK(dm_config_from_json(&r, "{\"seed\": \"7\"}", err, sizeof err) == 0 && r.seed == 7);
    CHECK(dm_config_from_json(&r, "{\"seed\": 12}", err, sizeof err) == 0 && r.seed == 12);
    /* beyond 2^53 - 1 a reader of JSON numbers would round it: refused, naming the range */
    CHECK(dm_config_set(&c, "seed", "9007199254740992", err, sizeof err) != 0);
    CHECKF(strstr(err, "seed") && strstr(err, "9007199254740991"), "error: %s", err);
    CHECK(dm_config_from_json(&r, "{\"seed\": 1.5}", err, sizeof err) != 0);
    c.seed = 9007199254740992ull;
    CHECK(dm_config_validate(&c, err, sizeof err) != 0 && strstr(err, "seed"));
}

/* grad_accum: a training key (a resumed run may change it), default 1, at least 1, and a
 * step's batch (batch_size x grad_accum) within the sequences one step may hold */
TEST(config_grad_accum) {
    dm_config c;
    dm_config_default(&c);
    char err[256], val[32];
    CHECK(c.grad_accum == 1 && dm_config_validate(&c, err, sizeof err) == 0);
    CHECK(dm_config_get(&c, "grad_accum", val, sizeof val) == 0 && !strcmp(val, "1"));
    CHECK(!dm_config_is_model_key("grad_accum"));
    CHECK(dm_config_set(&c, "grad_accum", "4", err, sizeof err) == 0 && c.grad_accum == 4);
    CHECKF(dm_config_set(&c, "grad_accum", "0", err, sizeof err) != 0 && strstr(err, "grad_accum"),
           "grad_accum=0 accepted: %s", err);
    c.batch_size = 1 << 19;
    c.grad_accum = 4;
    CHECKF(dm_config_validate(&c, err, sizeof err) != 0 && strstr(err, "grad_accum"),
           "a step of 2^21 sequences accepted: %s", err);
    printf("  %s\n", err);
    c.grad_accum = 2;
    CHECK(dm_config_validate(&c, err, sizeof err) == 0);
}

/* Strict numbers: the whole value is the number, decimal, without
 * spaces, '+', hex, inf or nan; the values that are numbers still read. */
TEST(config_strict_numbers) {
    const char *bad[][2] = {
        {"seed", " -1"}, {"seed", "-1"}, {"seed", "+1"}, {"seed", "0x10"}, {"seed", "1 "},
        {"seed", "18446744073709551616"}, {"seed", "9007199254740992"},
        {"batch_size", " 8"}, {"batch_size", "+4"},
        {"batch_size", "8 "}, {"batch_size", "4.0"}, {"batch_size", "1e1"}, {"batch_size", ""},
        {"lr", "0x1p-8"}, {"lr", " 0.1"}, {"lr", "+0.1"}, {"lr", "inf"}, {"lr", "nan"},
        {"lr", "1e"}, {"lr", "."}, {"lr", "1e400"}, {"lr", "0.1x"}, {"eval_window", "1e5"},
        {"tie_embeddings", "yes"}, {"mixer", "kda "}, {"eval_windows", "0"},
        {"eval_windows", "ALL"}, {"eval_windows", "-1"},
    };
    const char *good[][3] = {
        {"seed", "9007199254740991", "9007199254740991"}, {"seed", "0", "0"},
        {"batch_size", "8", "8"}, {"lr", "0.001", "0.001"}, {"lr", "1e-3", "0.001"},
        {"lr", ".5", "0.5"}, {"lr", "2.", "2"}, {"lr", "1E-2", "0.01"}, {"lr", "5e+0", "5"},
        {"gate_lower_bound", "-1.5", "-1.5"}, {"gate_lower_bound", "-0", "-0"},
        {"eval_windows", "all", "all"}, {"eval_windows", "1", "1"}, {"eval_windows", "16", "16"},
    };
    dm_config c;
    char err[DM_ERRLEN], val[64];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dm_config_default(&c);
        int rc = dm_config_set(&c, bad[i][0], bad[i][1], err, sizeof err);
        CHECKF(rc != 0, "%s='%s' accepted", bad[i][0], bad[i][1]);
        CHECKF(rc == 0 || strstr(err, bad[i][0]), "error does not name the key: %s", err);
    }
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        dm_config_default(&c);
        CHECKF(dm_config_set(&c, good[i][0], good[i][1], err, sizeof err) == 0, "%s", err);
        dm_config_get(&c, good[i][0], val, sizeof val);
        CHECKF(!strcmp(val, good[i][2]), "%s='%s' read as %s", good[i][0], good[i][1], val);
    }
}

/* Strict JSON config files: trailing text and a key twice are errors naming
 * what is wrong; the same keys in a clean file read. */
TEST(config_strict_json) {
    const char *bad[][2] = {
        {"{\"steps\": 2}garbage", "text after the JSON object"},
        {"{\"steps\": 2} {}", "text after the JSON object"},
        {"{\"steps\": 2, \"lr\": 0.1, \"steps\": 3}", "'steps' appears twice"},
        {"{\"batch_size\": \" 8\"}", "batch_size"},
        {"{\"lr\": \"0x1p-8\"}", "lr"},
        {"{\"steps\": 2.5}", "steps"},
        {"{\"steps\": [2]}", "steps"},
        {"[1]", "not a JSON object"},
        {"{\"ste\\nps\": 2}", "unknown config key 'ste?ps'"},
        /* read by the rules of --set, nothing read past */
        {"{\"steps\": 1e2}", "bad value '1e2' for key 'steps'"},
        {"{\"batch_size\": 64.0}", "bad value '64.0' for key 'batch_size'"},
        {"{\"seed\": 9007199254740991.4}", "for key 'seed'"},
        {"{\"tie_embeddings\": 1}", "expected true or false"},
        {"{\"atlas\": 0}", "expected true or false"},
        {"{\"mixer\": 1}", "expected a string"},
        {"{\"lr\\u0000junk\": 0.1}", "NUL character"},
        {"{\"mixer\": \"kda\\u0000x\"}", "NUL character"},
        {"{\"steps\": 2} x", "text after the JSON object"},
        {"{\"steps\": 2}{}", "text after the JSON object"},
        {"\xEF\xBB\xBF{\"steps\": 2}", "byte-order mark"},
        {"{\"adam_eps\": 0}", "for key 'adam_eps'"},
        {"{\"adam_eps\": -0}", "for key 'adam_eps'"},
        {"{\"adam_eps\": 1e-400}", "for key 'adam_eps'"},
        {"{\"steps\": 2,}", "expected a string"},
        {"{\"steps\": null}", "expected a number, string or boolean"},
    };
    dm_config c;
    char err[DM_ERRLEN];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dm_config_default(&c);
        int rc = dm_config_from_json(&c, bad[i][0], err, sizeof err);
        CHECKF(rc != 0 && strstr(err, bad[i][1]) && !strchr(err, '\n'), "'%s': %s", bad[i][0],
               rc ? err : "accepted");
    }
    dm_config_default(&c);
    CHECK(dm_config_from_json(&c, " {\"steps\": 2, \"lr\": 0.5, \"seed\": \"7\"} \n", err,
                              sizeof err) == 0);
    CHECK(c.steps == 2 && c.lr == 0.5f && c.seed == 7);
    /* the command line: --set, --config and flags; one line, exit 2 */
    char d[256], cmd[2048];
    t_tmpdir(d, sizeof d);
    const char *sets[] = {"seed= -1", "batch_size= 8", "batch_size=+4", "lr=0x1p-8"};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --set '%s'", d, sets[i]);
        t_expect(cmd, 2, sets[i], NULL, 0);
    }
    snprintf(cmd, sizeof cmd, "printf '{\"steps\": 2}garbage' > %s/c.json && " DM_CLI
             " train --out %s/run --config %s/c.json", d, d, d);
    t_expect(cmd, 2, "text after the JSON object", NULL, 0);
    snprintf(cmd, sizeof cmd, "printf '{\"steps\": 2, \"steps\": 3}' > %s/c.json && " DM_CLI
             " train --out %s/run --config %s/c.json", d, d, d);
    t_expect(cmd, 2, "'steps' appears twice", NULL, 0);
    snprintf(cmd, sizeof cmd, DM_CLI " train --out %s/run --until +5", d);
    t_expect(cmd, 2, "--until expects an integer", NULL, 0);
    snprintf(cmd, sizeof cmd, DM_CLI " sample %s/x --temperature 0x1p-1", d);
    t_expect(cmd, 2, "--temperature expects a decimal number", NULL, 0);
    snprintf(cmd, sizeof cmd, "%s/run", d);
    CHECK(!t_exists(cmd));
    t_rmtree(d);
}

/* time_budget: a duration in whole seconds, as a number or with h/m/s in that
 * order; everything else is an error naming the key; 0 is off (the default). */
TEST(config_time_budget) {
    const char *good[][2] = {
        {"0", "0"}, {"90", "90"}, {"90s", "90"}, {"5m", "300"}, {"1h", "3600"},
        {"1h30m", "5400"}, {"2m30s", "150"}, {"1h0m1s", "3601"}, {"10000000", "10000000"},
    };
    const char *bad[] = {"", "m", "5x", "1m1h", "5m5m", "5s5m", "-5", " 5", "5 ", "5 m",
                         "1.5m", "5M", "10000001", "2778h", "0x10", "+5", "5mm", "h5"};
    dm_config c;
    char err[DM_ERRLEN], val[64];
    dm_config_default(&c);
    CHECKF(c.time_budget == 0, "time_budget defaults to %ld, not 0 (off)", c.time_budget);
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        dm_config_default(&c);
        CHECKF(dm_config_set(&c, "time_budget", good[i][0], err, sizeof err) == 0, "%s", err);
        dm_config_get(&c, "time_budget", val, sizeof val);
        CHECKF(!strcmp(val, good[i][1]), "time_budget='%s' read as %s, not %s", good[i][0],
               val, good[i][1]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dm_config_default(&c);
        int rc = dm_config_set(&c, "time_budget", bad[i], err, sizeof err);
        CHECKF(rc != 0, "time_budget='%s' accepted", bad[i]);
        CHECKF(rc == 0 || (strstr(err, "time_budget") && strstr(err, "5m")),
               "the error names neither the key nor the form: %s", err);
    }
    /* it measures the warmup's steps: a budget without a warmup is an error naming both */
    dm_config_default(&c);
    c.time_budget = 60;
    c.warmup_steps = 0;
    CHECKF(dm_config_validate(&c, err, sizeof err) != 0 && strstr(err, "time_budget") &&
           strstr(err, "warmup_steps"), "time_budget without a warmup: %s", err);
    c.warmup_steps = 1;
    CHECKF(dm_config_validate(&c, err, sizeof err) == 0, "%s", err);
    /* a config.json round trip keeps it (as seconds) */
    dm_config_default(&c);
    CHECK(dm_config_set(&c, "time_budget", "4m", err, sizeof err) == 0);
    char *j = dm_config_to_json(&c);
    dm_config d;
    dm_config_default(&d);
    CHECKF(dm_config_from_json(&d, j, err, sizeof err) == 0, "%s", err);
    CHECKF(d.time_budget == 240, "time_budget %ld after a round trip", d.time_budget);
    free(j);
}
