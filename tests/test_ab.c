/* test_ab.c — A/B sweeps (src/jobs/ab*.c): the verdict logic on synthetic cells, the
 * contention rules, resuming a sweep from its cached cells; benchmark history rows
 * (src/io/history.c) and the append-only check (scripts/history_check.sh) on temporary
 * git repositories. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/stats.h"
#include "check.h"
#include "jobs/ab.h"
#include "io/history.h"

#define CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz"
#define TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
             "--set gate_rank=8 --set batch_size=2 --set seq_len=32 --set eval_window=1024 " \
             "--set warmup_steps=1 --set threads=1"

/* ---- verdicts on synthetic cells ---- */

static dm_ab_cell done(double bpb, double ms) {
    dm_ab_cell c = {0};
    c.status = DM_CELL_DONE;
    c.bpb = bpb;
    c.ms = ms;
    return c;
}

TEST(ab_verdict_better_worse_wash) {
    /* control: mean 1.01, spread 0.02 (BPB); mean 10.5, spread 1 (ms) */
    dm_ab_cell ctl[2] = {done(1.00, 10.0), done(1.02, 11.0)};
    dm_ab_stats st = dm_ab_arm_stats(ctl, 2);
    CHECK(st.complete && st.n == 2);
    CHECK(fabs(st.mean - 1.01) < 1e-12 && fabs(st.spread - 0.02) < 1e-12);
    CHECK(fabs(st.ms_mean - 10.5) < 1e-12 && fabs(st.ms_spread - 1.0) < 1e-12);

    dm_ab_cell better[2] = {done(0.97, 8.0), done(0.98, 8.5)};
    dm_ab_verdict v = dm_ab_compare(ctl, better, 2);
    CHECKF(v.bpb == DM_AB_BETTER, "got %s", dm_ab_verdict_text(v.bpb));
    CHECKF(v.time == DM_AB_BETTER, "got %s", dm_ab_verdict_text(v.time));
    CHECK(fabs(v.bpb_delta + 0.035) < 1e-12 && fabs(v.ms_delta + 2.25) < 1e-12);

    dm_ab_cell worse[2] = {done(1.04, 12.5), done(1.05, 13.0)};
    v = dm_ab_compare(ctl, worse, 2);
    CHECK(v.bpb == DM_AB_WORSE && v.time == DM_AB_WORSE);

    /* inside the spread either way: a wash, though the mean is lower */
    dm_ab_cell wash[2] = {done(0.995, 10.2), done(1.00, 10.6)};
    v = dm_ab_compare(ctl, wash, 2);
    CHECK(v.bpb == DM_AB_WASH && v.time == DM_AB_WASH);
    CHECK(v.bpb_delta < 0);

    /* the boundary is strict: exactly one spread away is still a wash */
    CHECK(dm_ab_judge(1.0, 0.25, 0.75) == DM_AB_WASH);
    CHECK(dm_ab_judge(1.0, 0.25, 0.74) == DM_AB_BETTER);
    CHECK(dm_ab_judge(1.0, 0.25, 1.25) == DM_AB_WASH);
    CHECK(dm_ab_judge(1.0, 0.25, 1.26) == DM_AB_WORSE);
    CHECK(dm_ab_judge(1.0, 0.0, 0.999) == DM_AB_BETTER);
    CHECK(strcmp(dm_ab_verdict_text(DM_AB_BETTER), "better") == 0);
    CHECK(strcmp(dm_ab_verdict_text(DM_AB_WASH), "wash") == 0);
}

TEST(ab_verdict_missing_cell) {
    dm_ab_cell ctl[3] = {done(1.00, 10), done(1.02, 10), done(1.01, 10)};
    dm_ab_cell var[3] = {done(0.50, 5), done(0.50, 5), {0}}; /* seed 3 not run */
    var[2].status = DM_CELL_MISSING;
    dm_ab_stats st = dm_ab_arm_stats(var, 3);
    CHECK(!st.complete && st.n == 2);
    dm_ab_verdict v = dm_ab_compare(ctl, var, 3);
    CHECKF(v.bpb == DM_AB_NA_MISSING, "a partial arm got %s", dm_ab_verdict_text(v.bpb));
    CHECK(v.time == DM_AB_NA_MISSING && isnan(v.bpb_delta));
    /* a failed or stale cell is as good as missing */
    var[2] = done(0.5, 5);
    var[2].status = DM_CELL_FAILED;
    CHECK(dm_ab_compare(ctl, var, 3).bpb == DM_AB_NA_MISSING);
    var[2].status = DM_CELL_STALE;
    CHECK(dm_ab_compare(ctl, var, 3).bpb == DM_AB_NA_MISSING);
    /* the control missing a cell: no variant can be judged */
    var[2].status = DM_CELL_DONE;
    ctl[1].status = DM_CELL_MISSING;
    CHECK(dm_ab_compare(ctl, var, 3).bpb == DM_AB_NA_MISSING);
    CHECK(strcmp(dm_ab_verdict_text(DM_AB_NA_MISSING), "n/a (missing cells)") == 0);
    /* one seed: no spread, no verdict */
    ctl[1].status = DM_CELL_DONE;
    v = dm_ab_compare(ctl, var, 1);
    CHECK(v.bpb == DM_AB_NA_SEEDS && v.time == DM_AB_NA_SEEDS && v.bpb_delta < 0);
}

TEST(ab_verdict_flagged_timing) {
    dm_ab_cell ctl[2] = {done(1.00, 10.0), done(1.02, 10.2)};
    dm_ab_cell var[2] = {done(0.90, 5.0), done(0.91, 5.0)};
    var[1].flags = DM_PROBE_OTHERS; /* a busy machine under one variant cell */
    dm_ab_verdict v = dm_ab_compare(ctl, var, 2);
    CHECKF(v.time == DM_AB_NA_CONTENDED, "flagged timing gave %s", dm_ab_verdict_text(v.time));
    CHECK(v.bpb == DM_AB_BETTER); /* BPB does not depend on the machine */
    CHECK(strcmp(dm_ab_verdict_text(v.time), "n/a (contended)") == 0);
    CHECK(dm_ab_arm_stats(var, 2).contended);
    /* a flagged control timing spoils every time verdict */
    var[1].flags = 0;
    ctl[0].flags = DM_PROBE_LOAD;
    CHECK(dm_ab_compare(ctl, var, 2).time == DM_AB_NA_CONTENDED);
    ctl[0].flags = DM_PROBE_UNMEASURED;
    CHECK(dm_ab_compare(ctl, var, 2).time == DM_AB_NA_CONTENDED);
    ctl[0].flags = 0;
    CHECK(dm_ab_compare(ctl, var, 2).time == DM_AB_BETTER);
    /* no timing readings at all */
    var[0].ms = NAN;
    CHECK(dm_ab_compare(ctl, var, 2).time == DM_AB_NA_UNTIMED);
}

TEST(ab_probe_contention_rules) {
    /* quiet: all 4 cores ours, nothing else */
    CHECK(dm_probe_judge(10, 0.02, 0, 4.1, 4, 4, 4) == 0);
    /* load above the threads on a machine we fill */
    CHECK(dm_probe_judge(10, 0.02, 0, 5.0, 4, 4, 4) == DM_PROBE_LOAD);
    /* other processes on our cores */
    CHECK(dm_probe_judge(10, 0.5, 0, 4.0, 4, 4, 4) == DM_PROBE_OTHERS);
    /* ... but not when they run on cores our threads leave free */
    CHECK(dm_probe_judge(10, 2.5, 0, 3.6, 1, 4, 4) == 0);
    CHECK(dm_probe_judge(10, 3.5, 0, 4.6, 1, 4, 4) == (DM_PROBE_OTHERS | DM_PROBE_LOAD));
    /* steal */
    CHECK(dm_probe_judge(10, 0, 0.05, 1, 4, 4, 4) == DM_PROBE_STEAL);
    char buf[64];
    dm_probe_flags_text(DM_PROBE_STEAL | DM_PROBE_LOAD, buf, sizeof buf);
    CHECK(strcmp(buf, "steal,load") == 0);
    dm_probe_flags_text(0, buf, sizeof buf);
    CHECK(buf[0] == 0);
    /* a probe around real work reads sane numbers */
    dm_probe p;
    dm_probe_result r;
    dm_probe_begin(&p);
    volatile double x = 0;
    for (int i = 0; i < 20000000; i++) x += i * 1e-9;
    dm_probe_end(&p, 1, &r);
    printf("  probe: wall %.3f s, own cpu %.3f s, others %.2f cores, steal %.3f, load %.2f, "
           "flags %u\n", r.wall_s, r.own_cpu_s, r.others_cores, r.steal_frac, r.load_max, r.flags);
    CHECK(r.wall_s > 0 && r.own_cpu_s > 0 && r.threads == 1 && r.ncpu >= 1);
    CHECK(!(r.flags & DM_PROBE_UNMEASURED)); /* Linux: /proc is there */
}

TEST(ab_parse_inputs) {
    uint64_t s[DM_AB_MAX_SEEDS];
    int n;
    char err[256];
    CHECK(dm_ab_parse_seeds("1,2,7", s, DM_AB_MAX_SEEDS, &n, err, sizeof err) == 0);
    CHECK(n == 3 && s[0] == 1 && s[2] == 7);
    CHECK(dm_ab_parse_seeds("1,,2", s, DM_AB_MAX_SEEDS, &n, err, sizeof err) != 0);
    CHECK(dm_ab_parse_seeds("1,1", s, DM_AB_MAX_SEEDS, &n, err, sizeof err) != 0);
    CHECK(dm_ab_parse_seeds("x", s, DM_AB_MAX_SEEDS, &n, err, sizeof err) != 0);
    CHECK(dm_ab_parse_seeds("", s, DM_AB_MAX_SEEDS, &n, err, sizeof err) != 0);

    dm_config c;
    dm_ab_arm arm;
    dm_config_default(&c);
    CHECK(dm_ab_parse_variant("fast: retract_every=4 lr=0.01", &c, &arm, err, sizeof err) == 0);
    CHECK(strcmp(arm.name, "fast") == 0 && arm.cfg.retract_every == 4);
    CHECK(strcmp(arm.overrides, "retract_every=4 lr=0.01") == 0);
    CHECK(c.retract_every == 1); /* the control is untouched */
    CHECK(dm_ab_parse_variant(" aa :", &c, &arm, err, sizeof err) == 0 && !strcmp(arm.name, "aa"));
    CHECK(dm_ab_parse_variant("no colon", &c, &arm, err, sizeof err) != 0);
    CHECK(dm_ab_parse_variant("control: lr=1", &c, &arm, err, sizeof err) != 0);
    CHECK(dm_ab_parse_variant("a/b: lr=1", &c, &arm, err, sizeof err) != 0);
    CHECK(dm_ab_parse_variant("x: lr", &c, &arm, err, sizeof err) != 0);
    CHECK(dm_ab_parse_variant("x: bogus=1", &c, &arm, err, sizeof err) != 0);
    CHECK(strstr(err, "bogus") != NULL);
    CHECK(dm_ab_parse_variant("x: seed=3", &c, &arm, err, sizeof err) != 0);
    CHECK(strstr(err, "--seeds") != NULL);
    CHECK(dm_ab_parse_variant("x: steps=3", &c, &arm, err, sizeof err) != 0);
    CHECK(dm_ab_parse_variant("x: eval_window=3000", &c, &arm, err, sizeof err) != 0);

    double m[] = {5, 1, 3, 2}, sp;
    CHECK(dm_median(m, 3, NULL) == 3);
    CHECK(dm_median(m, 4, &sp) == 2.5 && sp == 4);
    CHECK(m[0] == 5 && m[3] == 2); /* left as it is */
    CHECK(isnan(dm_median(m, 0, &sp)) && isnan(sp));
    CHECK(dm_ab_default_warmup(2000) == 50 && dm_ab_default_warmup(100) == 10);
}

/* ---- a sweep through the command ---- */


static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

static int lines_of(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, ch;
    while (f && (ch = fgetc(f)) != EOF) n += ch == '\n';
    if (f) fclose(f);
    return n;
}

static struct timespec mtime_of(const char *path) {
    struct stat st;
    struct timespec z = {0, 0};
    return stat(path, &st) == 0 ? st.st_mtim : z;
}

TEST(ab_resume_skips_cached_cells) {
    char d[256], cmd[4096], outp[512], hist[512], out[65536], p[512];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(hist, sizeof hist, "%s/history.tsv", d);
    const char *arms[2] = {"control", "lr2"};
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data " CORPUS " " TINY " --steps 3 "
             "--seeds 1,2 --variant 'lr2: lr=0.006' --history %s", d, hist);

    /* the whole sweep: 4 cells, a table, 1 + 2 arms x 2 rows of history */
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "sweep failed (%d):\n%s", rc, out);
    CHECKF(strstr(out, "val BPB") && strstr(out, "spread") && strstr(out, "ms/step"),
           "no table:\n%s", out);
    CHECK(count(out, "cached") == 0);
    CHECKF(lines_of(hist) == 5, "history has %d lines, expected 5", lines_of(hist));
    struct timespec before[2][2];
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/ab/%s/seed%d/summary.json", d, arms[a], k + 1);
            CHECKF(t_exists(p), "no %s", p);
            before[a][k] = mtime_of(p);
        }

    /* cancel one cell after the fact: its summary gone, its checkpoint left behind */
    snprintf(p, sizeof p, "%s/ab/lr2/seed2/summary.json", d);
    remove(p);
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --report", d);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "report failed (%d):\n%s", rc, out);
    CHECKF(strstr(out, "missing: lr2/seed2") != NULL, "missing cell not listed:\n%s", out);
    CHECKF(strstr(out, "n/a (missing cells)") != NULL, "a partial arm got a verdict:\n%s", out);

    /* the same command again: only that cell runs */
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data " CORPUS " " TINY " --steps 3 "
             "--seeds 1,2 --variant 'lr2: lr=0.006' --history %s", d, hist);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "resume failed (%d):\n%s", rc, out);
    CHECKF(count(out, ": cached") == 3, "expected 3 cached cells:\n%s", out);
    CHECK(strstr(out, "missing:") == NULL);
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/ab/%s/seed%d/summary.json", d, arms[a], k + 1);
            struct timespec t = mtime_of(p);
            int same = t.tv_sec == before[a][k].tv_sec && t.tv_nsec == before[a][k].tv_nsec;
            CHECK(t_exists(p));
            if (a == 1 && k == 1) continue;
            CHECKF(same, "cached cell %s/seed%d was rerun", arms[a], k + 1);
        }
    CHECKF(lines_of(hist) == 9, "history has %d lines after the resume, expected 9", lines_of(hist));

    /* all cached: nothing runs, nothing is appended */
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECK(rc == 0 && count(out, ": cached") == 4 && lines_of(hist) == 9);

    /* a different config over finished cells is refused, and changes nothing */
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data " CORPUS " " TINY " --steps 4 "
             "--seeds 1,2 --no-history", d);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 2 && strstr(out, "another config"), "stale cells: exit %d:\n%s", rc, out);
    snprintf(p, sizeof p, "%s/ab/control/seed1/summary.json", d);
    struct timespec t = mtime_of(p);
    CHECK(t.tv_sec == before[0][0].tv_sec && t.tv_nsec == before[0][0].tv_nsec);
    t_rmtree(d);
}

/* An arm with a time_budget: each of its cells fixes its own steps, the table
 * lists them, and the finished cells are cached on a rerun (not stale for their steps).
 * The budget is real wall clock (5 s: room for the set-up of a loaded or sanitized build,
 * which a budget too small for it refuses). */
TEST(ab_time_budget_arm) {
    char d[256], cmd[4096], outp[512], out[65536], p[512];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data " CORPUS " " TINY " --steps 3 "
             "--seeds 1 --variant 'budget: time_budget=5'", d);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "sweep failed (%d):\n%s", rc, out);
    snprintf(p, sizeof p, "%s/ab/budget/seed1/config.json", d);
    char *cj = t_read_text(p), err[DM_ERRLEN];
    dm_config c;
    dm_config_default(&c);
    CHECKF(cj && dm_config_from_json(&c, cj, err, sizeof err) == 0, "%s", cj ? err : p);
    free(cj);
    printf("  the budget cell fixed steps=%d\n", c.steps);
    CHECKF(c.steps > 3 && c.time_budget == 5, "budget cell: steps %d, time_budget %ld",
           c.steps, c.time_budget);
    char row[128];
    snprintf(row, sizeof row, "budget    %d", c.steps);
    CHECKF(strstr(out, "steps (an arm with a time_budget") && strstr(out, row),
           "no steps table with '%s':\n%s", row, out);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && count(out, ": cached") == 2, "rerun (%d):\n%s", rc, out);
    /* a budget that the machine's slowing cut keeps its planned schedule (schedule_steps,
     * as train --time-budget writes it): the cell is still the sweep's */
    snprintf(p, sizeof p, "cd %s/ab/budget/seed1 && sed -i 's/\"schedule_steps\":[[:space:]]*0/"
             "\"schedule_steps\": %d/' config.json && grep -q '\"schedule_steps\": %d' "
             "config.json", d, c.steps + 7, c.steps + 7);
    CHECK(t_run(p, NULL, 0) == 0);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0 && count(out, ": cached") == 2, "rerun of a cut cell (%d):\n%s", rc, out);
    t_rmtree(d);
}

TEST(ab_interrupt_then_report) {
    char d[256], cmd[4096], outp[512], out[65536], p[512];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    /* SIGINT to the sweep (not the cell): it stops the cell, keeps it resumable, exits 130 */
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --data " CORPUS " " TINY
             " --steps 1000000 --seeds 1,2 --no-history & pid=$!; "
             /* signal once the first cell is training (the sweep's handler is in place) */
             "for i in $(seq 300); do [ -s %s/ab/control/seed1/metrics.jsonl ] && break; "
             "sleep 0.1; done; kill -INT $pid; wait $pid", d, d);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 130, "interrupted sweep exited %d:\n%s", rc, out);
    CHECKF(strstr(out, "interrupted") != NULL, "no word of the interruption:\n%s", out);
    snprintf(p, sizeof p, "%s/ab/control/seed1/summary.json", d);
    CHECK(!t_exists(p));
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/ab --report", d);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECK(rc == 0);
    CHECKF(strstr(out, "missing: control/seed1 (") && strstr(out, "control/seed2 (not run)"),
           "missing cells not listed:\n%s", out);
    /* bad input: one-line errors, exit 2 */
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/nothing --report", d);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 2 && strstr(out, "no ab.json"));
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/x --variant 'v: seed=2'", d);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 2 && strstr(out, "--seeds"));
    snprintf(cmd, sizeof cmd, DM_CLI " ab --dir %s/x --report --steps 3", d);
    CHECK(t_run_out(cmd, outp, out, sizeof out) == 2);
    CHECK(t_run_out(DM_CLI " ab --steps 3", outp, out, sizeof out) == 2 && strstr(out, "--dir"));
    CHECK(t_run_out(DM_CLI " ab --help", outp, out, sizeof out) == 0 && strstr(out, "--variant"));
    snprintf(p, sizeof p, "%s/x", d);
    CHECK(!t_exists(p));
    t_rmtree(d);
}

/* ---- history rows ---- */

TEST(history_append_rows) {
    char d[256], path[512], line[4096];
    t_tmpdir(d, sizeof d);
    snprintf(path, sizeof path, "%s/h.tsv", d);
    dm_history_row rows[2] = {
        {"bench:x", "d_model=32\tbad", "ms_per_step", 1.5, 0.25, 3, "contended"},
        {"bench:y", "", "val_bpb", 2.0, NAN, 1, NULL},
    };
    char err[256];
    CHECK(dm_history_append(path, rows, 2, err, sizeof err) == 0);
    CHECK(dm_history_append(path, rows, 1, err, sizeof err) == 0);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        int tabs = 0;
        for (char *q = line; *q; q++) tabs += *q == '\t';
        CHECKF(tabs == 9, "line %d has %d tabs: %s", n + 1, tabs, line);
        if (n == 0) CHECK(strncmp(line, DM_HISTORY_HEADER "\n", strlen(DM_HISTORY_HEADER) + 1) == 0);
        if (n == 1) {
            CHECK(strstr(line, "\tbench:x\td_model=32 bad\tms_per_step\t1.5\t0.25\t3\tcontended") != NULL);
            printf("  %s", line);
        }
        if (n == 2) CHECK(strstr(line, "\tbench:y\t-\tval_bpb\t2\t-\t1\t") != NULL);
        n++;
    }
    if (f) fclose(f);
    CHECKF(n == 4, "%d lines, expected header + 3 rows", n);
    char m[512];
    dm_history_machine(m, sizeof m);
    CHECK(strstr(m, "c") && strchr(m, '/'));
    t_rmtree(d);
}

/* ---- the append-only check on temporary git repositories ---- */

#define HCHECK "bash " DM_SOURCE_DIR "/scripts/history_check.sh"
#define GIT "git -c user.name=t -c user.email=t@t -c commit.gpgsign=false -C "

static int have_git(void) { return t_run("git --version", NULL, 0) == 0; }

static void write_hist(const char *repo, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/benches", repo);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/benches/history.tsv", repo);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static void commit(const char *repo) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, GIT "%s add -A && " GIT "%s commit -qm step", repo, repo);
    CHECK(t_run(cmd, NULL, 0) == 0);
}

/* A repository whose history.tsv went through `versions` commits. */
static void repo_with(char *d, size_t n, const char *const *versions, int nv) {
    char cmd[1024];
    t_tmpdir(d, n);
    snprintf(cmd, sizeof cmd, "git init -q %s", d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "echo x > %s/README", d); /* a first commit without the file */
    t_run(cmd, NULL, 0);
    commit(d);
    for (int i = 0; i < nv; i++) {
        write_hist(d, versions[i]);
        commit(d);
    }
}

static int hcheck(const char *repo, char *err, size_t n) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, HCHECK " %s", repo);
    int rc = t_run(cmd, err, n);
    printf("  [%d] %s%s", rc, err[0] ? "" : "(ok)\n", err);
    return rc;
}

#define H "date\tcommit\tmachine\twhat\tconfig\tmetric\tvalue\tspread\tn\tflags\n"
#define R1 "2025-01-01T00:00:00Z\tabc\tm\tab:x\tc\tval_bpb\t1.5\t0.1\t2\t-\n"
#define R2 "2025-01-02T00:00:00Z\tabd\tm\tab:y\tc\tval_bpb\t1.4\t0.1\t2\t-\n"
#define R3 "2025-01-03T00:00:00Z\tabe\tm\tab:z\tc\tms_per_step\t9\t1\t2\tcontended\n"

TEST(history_check_append_passes) {
    if (!have_git()) { printf("  SKIP: git is not installed\n"); return; }
    char d[256], err[2048];
    const char *v[] = {H, H R1, H R1 R2};
    repo_with(d, sizeof d, v, 3);
    CHECKF(hcheck(d, err, sizeof err) == 0, "appends failed the check: %s", err);
    write_hist(d, H R1 R2 R3); /* uncommitted append */
    CHECKF(hcheck(d, err, sizeof err) == 0, "an uncommitted append failed: %s", err);
    commit(d);
    CHECK(hcheck(d, err, sizeof err) == 0);
    t_rmtree(d);
}

TEST(history_check_change_fails) {
    if (!have_git()) { printf("  SKIP: git is not installed\n"); return; }
    char d[256], err[2048];
    const char *v[] = {H R1 R2};
    repo_with(d, sizeof d, v, 1);
    /* a changed value in the working tree */
    write_hist(d, H "2025-01-01T00:00:00Z\tabc\tm\tab:x\tc\tval_bpb\t1.3\t0.1\t2\t-\n" R2);
    CHECKF(hcheck(d, err, sizeof err) == 1, "a changed row passed");
    CHECK(strstr(err, "row 2") != NULL);
    /* ... and once committed, HEAD~1 -> HEAD catches it */
    commit(d);
    CHECKF(hcheck(d, err, sizeof err) == 1, "a committed change passed");
    CHECK(strstr(err, "HEAD~1 -> HEAD") != NULL);
    t_rmtree(d);
}

TEST(history_check_delete_fails) {
    if (!have_git()) { printf("  SKIP: git is not installed\n"); return; }
    char d[256], err[2048], cmd[600];
    const char *v[] = {H R1 R2 R3};
    repo_with(d, sizeof d, v, 1);
    write_hist(d, H R1 R3); /* a row from the middle */
    CHECKF(hcheck(d, err, sizeof err) == 1, "a deleted row passed");
    write_hist(d, H R1 R2); /* the last row */
    CHECKF(hcheck(d, err, sizeof err) == 1, "a deleted last row passed");
    CHECK(strstr(err, "lost rows") != NULL);
    write_hist(d, H R1 R2 R3);
    CHECK(hcheck(d, err, sizeof err) == 0);
    snprintf(cmd, sizeof cmd, "rm %s/benches/history.tsv", d); /* the whole file */
    t_run(cmd, NULL, 0);
    CHECKF(hcheck(d, err, sizeof err) == 1, "a deleted file passed");
    t_rmtree(d);
}

TEST(history_check_reorder_fails) {
    if (!have_git()) { printf("  SKIP: git is not installed\n"); return; }
    char d[256], err[2048];
    const char *v[] = {H R1 R2, H R2 R1 R3}; /* sorted differently, plus a new row */
    repo_with(d, sizeof d, v, 2);
    CHECKF(hcheck(d, err, sizeof err) == 1, "a reorder in the last commit passed");
    t_rmtree(d);
    const char *w[] = {H R1 R2 R3};
    repo_with(d, sizeof d, w, 1);
    write_hist(d, H R3 R1 R2 "extra\n");
    CHECKF(hcheck(d, err, sizeof err) == 1, "a reorder in the working tree passed");
    t_rmtree(d);
}

TEST(history_check_no_history_or_git) {
    if (!have_git()) { printf("  SKIP: git is not installed\n"); return; }
    char d[256], err[2048], cmd[600], out[4096];
    repo_with(d, sizeof d, NULL, 0); /* no history.tsv committed */
    CHECK(hcheck(d, err, sizeof err) == 0);
    write_hist(d, H R1); /* new, not yet committed */
    CHECK(hcheck(d, err, sizeof err) == 0);
    commit(d); /* first commit of the file: no previous version */
    CHECK(hcheck(d, err, sizeof err) == 0);
    t_rmtree(d);
    /* not a git checkout: a skip, with a message */
    t_tmpdir(d, sizeof d);
    write_hist(d, H R1);
    snprintf(cmd, sizeof cmd, HCHECK " %s >%s/o 2>&1", d, d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "%s/o", d);
    FILE *f = fopen(cmd, "r");
    size_t got = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[got] = 0;
    if (f) fclose(f);
    CHECKF(strstr(out, "skipped") != NULL, "no skip message: %s", out);
    t_rmtree(d);
}
