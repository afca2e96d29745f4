/* test_console.c — what the command prints by default and with -v, what it suggests for
 * typos, and the smaller things a new user meets: plot's default file for several runs,
 * an oversubscribed thread count, `train --steps`, the ab help's example. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "check.h"
#include "dormouse.h"

#define CORPUS T_CORPUS
#define TINY T_TINY

/* lines of s that start with prefix */
static int count_lines(const char *s, const char *prefix) {
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        n += strncmp(l, prefix, pl) == 0;
    return n;
}

/* Default output: the header, progress, the summary and the next commands — the
 * optimizer's parameter table and the dispatch table only with -v, and always in the run
 * directory (params.txt, dispatch.txt); bench's rows in the history columns only with -v. */
TEST(console_tables_behind_verbose) {
    char d[256], cmd[2048], outp[512], run[600], p[700];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    for (int v = 0; v < 2; v++) {
        snprintf(run, sizeof run, "%s/run%d", d, v);
        snprintf(cmd, sizeof cmd, DM_CLI " train%s --data " CORPUS " --out %s " TINY
                 " --set steps=6 --set log_every=3", v ? " -v" : "", run);
        CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
        int tensors = count_lines(out, "layers.0.mixer.w_q"), disp = count_lines(out, "dispatch:");
        printf("  %s: %d lines of output, parameter table %d, dispatch %d\n", v ? "-v" : "default",
               count_lines(out, ""), tensors, disp);
        CHECKF(v ? tensors == 1 && disp == 1 : tensors == 0 && disp == 0,
               "%s: parameter table %d, dispatch %d:\n%s", v ? "-v" : "default", tensors, disp,
               out);
        CHECKF(v || count_lines(out, "") <= 12, "default output of %d lines:\n%s",
               count_lines(out, ""), out);
        CHECK(count_lines(out, "summary:") == 1 && count_lines(out, "next:") == 1);
        snprintf(p, sizeof p, "%s/params.txt", run);
        char *pt = t_read_text(p);
        CHECKF(pt && strstr(pt, "layers.0.mixer.w_q"), "no parameter table in %s", p);
        free(pt);
        snprintf(p, sizeof p, "%s/dispatch.txt", run);
        char *dt = t_read_text(p);
        CHECKF(dt && strstr(dt, "dispatch: ") && strstr(dt, "matmul.fwd"), "no dispatch in %s", p);
        free(dt);
        snprintf(cmd, sizeof cmd, DM_CLI " bench%s --data " CORPUS " " TINY " --reps 1",
                 v ? " --verbose" : "");
        CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
        int rows = 0;
        for (const char *l = out; (l = strstr(l, "\tbench:step\t")); l++) rows++;
        CHECKF(v ? rows > 0 : rows == 0, "bench%s: %d rows:\n%s", v ? " -v" : "", rows, out);
        CHECKF(v || strstr(out, "-v prints them"), "bench does not say where its rows are:\n%s",
               out);
    }
    t_rmtree(d);
}

/* Typos: a config key, a command and an option get the nearest name; every error line
 * starts "error: "; `train --steps N` is --set steps=N. */
TEST(console_typos_suggest_nearest) {
    char d[256], cmd[2048], err[4096];
    t_tmpdir(d, sizeof d);
    const char *cases[][2] = {
        {"train --set stpes=100", "did you mean 'steps'"},
        {"train --set treads=2", "did you mean 'threads'"},
        {"trian", "did you mean `dormouse train`"},
        {"smaple x", "did you mean `dormouse sample`"},
        {"train --stpes 3", "did you mean --steps"},
        {"eval --dat x", "did you mean --data"},
        {"train --set zzzzzz=1", "unknown config key 'zzzzzz'"},
        {"plot", "missing RUN_DIR"},
        {"train --until x", "--until"},
        {"bench extra", "unexpected argument"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " %s", d, cases[i][0]);
        t_expect(cmd, 2, cases[i][1], err, sizeof err);
        printf("  %s -> %s", cases[i][0], err);
        CHECKF(!strncmp(err, "error: ", 7), "%s: not in the error style: %s", cases[i][0], err);
    }
    CHECK(dm_nearest("zzzzzz", (const char *const[]){"steps", "seed"}, 2) == NULL);
    /* a run directory before its first checkpoint: says when one comes */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/early && echo '{}' > %s/early/config.json && "
             DM_CLI " sample %s/early", d, d, d);
    t_expect(cmd, 2, "no checkpoint in", err, sizeof err);
    CHECKF(strstr(err, "yet") && strstr(err, "ckpt_time"), "sample before a checkpoint: %s", err);
    /* --steps N trains N steps */
    char run[600], p[700];
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data " CORPUS " --out %s " TINY " --steps 3", run);
    CHECK(t_run(cmd, err, sizeof err) == 0);
    snprintf(p, sizeof p, "%s/config.json", run);
    char *cj = t_read_text(p);
    CHECKF(cj && strstr(cj, "\"steps\":\t3,"), "--steps 3: %s", cj ? cj : "no config.json");
    free(cj);
    t_rmtree(d);
}

/* plot of several runs without --out writes into the first run's directory, never into
 * the current one; threads above the cores is said to be oversubscribed; the ab help's
 * example compares arms that differ from the control. */
TEST(console_plot_threads_ab_example) {
    char d[256], cmd[4096], outp[512], a[600], b[600], p[700];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(a, sizeof a, "%s/a", d);
    snprintf(b, sizeof b, "%s/b", d);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI " train --data " CORPUS " --out %s " TINY
                 " --set steps=3%s", i ? b : a, i ? " --set threads=64" : "");
        CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
        CHECKF(i == 0 ? !strstr(out, "oversubscribed")
                      : strstr(out, "threads=64") && strstr(out, "oversubscribed"),
               "threads note:\n%s", out);
    }
    snprintf(cmd, sizeof cmd, "mkdir -p %s/cwd && cd %s/cwd && " DM_CLI " plot %s %s", d, d, a,
             b);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    if (rc == 1 && strstr(out, "PLplot")) {
        printf("  (plot not checked: %s)\n", out);
    } else {
        CHECKF(rc == 0, "plot exited %d: %s", rc, out);
        snprintf(p, sizeof p, "%s/plot-2-runs.png", a);
        CHECKF(t_exists(p), "no %s", p);
        snprintf(p, sizeof p, "test -z \"$(ls -A %s/cwd)\"", d);
        CHECKF(t_run(p, NULL, 0) == 0, "plot wrote into the current directory");
    }
    /* every key=value of every --variant in the example changes the default config */
    snprintf(cmd, sizeof cmd, DM_CLI " ab --help");
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 0);
    const char *ex = strstr(out, "example:");
    CHECK(ex != NULL);
    int arms = 0;
    for (const char *v = ex; v && (v = strstr(v, "--variant \"")); v++) {
        char spec[256];
        const char *s = strchr(v + 11, ':'), *e = strchr(v + 11, '"');
        if (!s || !e || s > e) break;
        snprintf(spec, sizeof spec, "%.*s", (int)(e - s - 1), s + 1);
        dm_config def, c;
        dm_config_default(&def);
        c = def;
        char errb[256], vb[256];
        for (char *kv = strtok(spec, " "); kv; kv = strtok(NULL, " ")) {
            char *eq = strchr(kv, '=');
            CHECKF(eq != NULL, "%s", kv);
            if (!eq) break;
            *eq = 0;
            CHECKF(dm_config_set(&c, kv, eq + 1, errb, sizeof errb) == 0, "%s", errb);
        }
        CHECKF(dm_config_diff(&def, &c, DM_KEYS_ALL, errb, vb, sizeof errb) != NULL &&
                   !(c.retract == DM_RETRACT_OFF && c.retract_every != def.retract_every),
               "the example's arm '%.*s' is the control", (int)(e - v - 11), v + 11);
        arms++;
    }
    CHECKF(arms >= 1, "no --variant in the example:\n%s", ex);
    t_rmtree(d);
}
