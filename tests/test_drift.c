/* test_drift.c — the step time's drift over a run (dm_step_drift: known step times in,
 * medians and ratio out; the run's summary computed from its logged step times), the
 * step's floor from given peaks and per-op counts (dm_floor_seconds, dm_atlas_floor), and
 * the time budget's re-plan from the recent rate when the step slows gradually. No test
 * here reads the wall clock for a verdict. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "jobs/budget.h"
#include "ops/atlas.h"
#include "ops/optim_ops.h"
#include "optim/optim.h" /* dm_lr_cooldown_start */

#define TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
             "--set gate_rank=8 --set batch_size=2 --set seq_len=32"

/* ---- the drift from known step times ---- */

/* 2 warm-up steps, 100 after them (tenths of 10): the early tenth is steps 3-12, the late
 * one 93-102; the medians ignore one outlier in each and the warm-up's slow steps. */
TEST(drift_from_known_step_times) {
    double ms[102];
    for (int late = 0; late < 3; late++) {
        double late_ms = late == 0 ? 100 : late == 1 ? 108 : 130;
        for (int i = 0; i < 102; i++) ms[i] = i < 2 ? 1000 : i < 92 ? 100 : late_ms;
        ms[5] = 400;   /* one slow early step */
        ms[95] = 1;    /* one fast late step */
        dm_drift d;
        CHECK(dm_step_drift(ms, 102, 1, &d) == 0);
        CHECKF(d.n == 100 && d.tenth == 10, "n %ld tenth %ld", d.n, d.tenth);
        CHECKF(d.early_from == 3 && d.late_from == 93, "from %ld and %ld", d.early_from,
               d.late_from);
        CHECKF(d.early_ms == 100 && d.late_ms == late_ms, "medians %g and %g (want 100, %g)",
               d.early_ms, d.late_ms, late_ms);
        CHECKF(fabs(d.ratio - late_ms / 100) < 1e-12, "ratio %g", d.ratio);
        CHECKF(d.slower == (late == 2), "late %g ms: slower %d", late_ms, d.slower);
        char line[1024];
        dm_drift_text(&d, line, sizeof line);
        CHECKF(strstr(line, "steps 3-12") && strstr(line, "steps 93-102"), "%s", line);
        CHECKF((strstr(line, "note: the late steps are 30% slower") != NULL) == (late == 2),
               "late %g ms: %s", late_ms, line);
    }
    /* the step numbers of a resumed run count from its first step */
    for (int i = 0; i < 102; i++) ms[i] = 50;
    dm_drift d;
    CHECK(dm_step_drift(ms, 102, 501, &d) == 0 && d.early_from == 503 && d.late_from == 593);
    /* an even tenth: the median is the mean of the middle two */
    double even[22] = {9, 9, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 8};
    CHECK(dm_step_drift(even, 22, 1, &d) == 0 && d.tenth == 2);
    CHECKF(d.early_ms == 2 && d.late_ms == 6 && d.ratio == 3 && d.slower, "%g %g %g",
           d.early_ms, d.late_ms, d.ratio);
    /* too few steps after the warm-up: none */
    CHECK(dm_step_drift(ms, DM_DRIFT_WARM + DM_DRIFT_MIN - 1, 1, &d) == 1 && d.n == 0);
    CHECK(dm_step_drift(ms, 0, 1, &d) == 1 && d.n == 0);
    CHECK(dm_step_drift(ms, DM_DRIFT_WARM + DM_DRIFT_MIN, 1, &d) == 0 && d.n == DM_DRIFT_MIN);
}

/* the values of key in every line of a metrics.jsonl; the count */
static int metric_values(const char *text, const char *key, double *v, int max) {
    int n = 0;
    for (const char *p = text; p && *p && n < max;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        cJSON *j = cJSON_Parse(line);
        cJSON *x = j ? cJSON_GetObjectItem(j, key) : NULL;
        if (cJSON_IsNumber(x)) v[n++] = x->valuedouble;
        cJSON_Delete(j);
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* A run's summary (summary.json's step_drift, the console's line) is the drift of the step
 * times metrics.jsonl logs (log_every=1: one line a step, its ms_per_step that step's). */
TEST(train_summary_drift_from_logged_step_times) {
    char d[256], run[512], cmd[2048], outp[600];
    static char out[1 << 16];
    t_tmpdir(d, sizeof d);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    snprintf(cmd, sizeof cmd, DM_CLI " train " TINY " --set steps=42 --set log_every=1 --set "
             "eval_every=0 --set eval_window=4096 --set threads=1 --out %s 2>&1", run);
    int rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "train exited %d:\n%s", rc, out);
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    char *metrics = t_read_text(path);
    snprintf(path, sizeof path, "%s/summary.json", run);
    char *sum = t_read_text(path);
    CHECK(metrics && sum);
    if (!rc && metrics && sum) {
        double ms[64];
        int n = metric_values(metrics, "ms_per_step", ms, 64);
        CHECKF(n == 42, "%d ms_per_step values", n);
        dm_drift want;
        CHECK(dm_step_drift(ms, n, 1, &want) == 0);
        cJSON *j = cJSON_Parse(sum), *sd = j ? cJSON_GetObjectItem(j, "step_drift") : NULL;
        CHECKF(cJSON_IsObject(sd), "no step_drift object in summary.json:\n%s", sum);
        if (cJSON_IsObject(sd)) {
            static const char *const keys[] = {"steps", "tenth", "early_from", "late_from",
                                               "early_ms", "late_ms", "ratio", NULL};
            double got[7];
            for (int k = 0; keys[k]; k++) {
                cJSON *x = cJSON_GetObjectItem(sd, keys[k]);
                CHECKF(cJSON_IsNumber(x), "step_drift.%s missing", keys[k]);
                got[k] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
            }
            CHECK(got[0] == want.n && got[1] == want.tenth && got[2] == want.early_from &&
                  got[3] == want.late_from);
            /* the log rounds to 0.01 ms: a median of rounded times is within 0.005 ms */
            CHECKF(fabs(got[4] - want.early_ms) <= 0.0051 && fabs(got[5] - want.late_ms) <= 0.0051,
                   "summary %g and %g ms, from the log %g and %g", got[4], got[5],
                   want.early_ms, want.late_ms);
            CHECKF(fabs(got[6] - got[5] / got[4]) <= 1e-3 * got[6], "ratio %g", got[6]);
            cJSON *sl = cJSON_GetObjectItem(sd, "slower");
            CHECK(cJSON_IsBool(sl) && cJSON_IsTrue(sl) == (got[6] > DM_DRIFT_SLOW));
        }
        cJSON_Delete(j);
        CHECKF(strstr(out, "step time drift: median") != NULL, "no drift line:\n%s", out);
    }
    free(metrics);
    free(sum);
    /* too short a run for a drift: null */
    snprintf(cmd, sizeof cmd, DM_CLI " train " TINY " --set steps=8 --set eval_every=0 --set "
             "eval_window=4096 --set threads=1 --out %s/short 2>&1", d);
    rc = t_run_out(cmd, outp, out, sizeof out);
    CHECKF(rc == 0, "train exited %d:\n%s", rc, out);
    snprintf(path, sizeof path, "%s/short/summary.json", d);
    sum = t_read_text(path);
    CHECKF(sum && strstr(sum, "\"step_drift\": null"), "%s", sum ? sum : "(no summary)");
    CHECK(!strstr(out, "step time drift"));
    free(sum);
    t_rmtree(d);
}

/* ---- the floor ---- */

/* The bytes an op moves, as the dispatch counts them for the floor: its outputs written
 * and each of its inputs read once. SiLU's forward of n floats moves 8n bytes (x read, y
 * written), its backward 12n (dy and x read, dx written), AdamW on n parameters 28n (p, g,
 * m and v read; p, m and v written), the gradient norm 4n + 8 (g read, the norm's double
 * written). */
TEST(floor_counts_reads_and_writes) {
    enum { n = 1000 };
    dm_config c;
    dm_config_default(&c);
    dm_ops ops;
    dm_ops_init(&ops, &c);
    dm_atlas *a = calloc(1, sizeof *a);
    float *x = t_alloc(n), *y = t_alloc(n), *dy = t_alloc(n), *m1 = t_alloc(n), *m2 = t_alloc(n);
    CHECK(a != NULL);
    if (!a) return;
    t_fill_normal(x, n, 1, 1.0f), t_fill_normal(dy, n, 2, 1.0f);
    ops.atlas = a;
    dm_op_silu_fwd(&ops, dm_bm(y), dm_bm(x), n);
    dm_op_silu_bwd(&ops, dm_bm(y), dm_bm(dy), dm_bm(x), n);
    float h[DM_ADAM_HYPER];
    dm_adam_hyper(h, 1e-3f, 0.0f, 0.9f, 0.95f, 1);
    dm_op_adamw(&ops, dm_bm(x), dm_bm(m1), dm_bm(m2), dm_bm(dy), n, dm_bm(h), 0.9f, 0.95f, 1e-8f,
                NULL, 0);
    double norm;
    dm_op_grad_norm(&ops, &norm, NULL, dm_bm(dy), n, 0.0f);
    static const struct { const char *op, *dir; double bytes; } want[] = {
        {"silu", "fwd", 8.0 * n}, {"silu", "bwd", 12.0 * n}, {"adamw", "fwd", 28.0 * n},
        {"grad_norm", "fwd", 4.0 * n + 8}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        double got = -1;
        for (int i = 0; i < a->n_ops; i++)
            if (!strcmp(a->op[i].name, want[k].op) && !strcmp(a->op[i].dir, want[k].dir))
                got = a->op[i].bytes;
        CHECKF(got == want[k].bytes, "%s.%s: %g bytes, want %g", want[k].op, want[k].dir, got,
               want[k].bytes);
    }
    dm_ops_free(&ops);
    free(a), free(x), free(y), free(dy), free(m1), free(m2);
}


/* floor = sum over ops of max(flops / peak, bytes / bandwidth) */
TEST(floor_from_given_peaks_and_counts) {
    /* a GEMM (1e9 FLOPs, 1e6 bytes), an elementwise pass (no FLOPs, 2e8 bytes), a
     * core whose FLOPs and bytes take 3 and 4 ms: at 100 GFLOP/s and 50 GB/s */
    double fl[3] = {1e9, 0, 3e8}, by[3] = {1e6, 2e8, 2e8};
    double f = dm_floor_seconds(fl, by, 3, 100e9, 50e9);
    double want = 1e9 / 100e9 + 2e8 / 50e9 + fmax(3e8 / 100e9, 2e8 / 50e9);
    CHECKF(fabs(f - want) < 1e-15, "floor %.9g s, want %.9g", f, want);
    CHECKF(fabs(want - 0.018) < 1e-15, "want %g", want);
    /* twice the bandwidth: only the memory-bound parts shrink */
    f = dm_floor_seconds(fl, by, 3, 100e9, 100e9);
    CHECKF(fabs(f - (0.010 + 0.002 + 0.003)) < 1e-15, "floor %.9g", f);
    /* an absent peak adds nothing on its side */
    CHECK(fabs(dm_floor_seconds(fl, by, 3, 0, 50e9) - (2e-5 + 4e-3 + 4e-3)) < 1e-15);
    CHECK(dm_floor_seconds(fl, by, 0, 100e9, 50e9) == 0);

    /* from an atlas: the peak is the GEMM sets' FLOPs over their standalone times,
     * weighted by calls; per step over a->steps */
    dm_atlas *a = calloc(1, sizeof *a);
    CHECK(a != NULL);
    if (!a) return;
    dm_floor fr;
    CHECK(dm_atlas_floor(a, &fr) == 1 && fr.why); /* no steps */
    a->steps = 2;
    dm_atlas_add(a, "matmul", "fwd", NULL, 0.1, 2e9);
    dm_atlas_bytes(a, "matmul", "fwd", NULL, 4e6);
    dm_atlas_add(a, "rmsnorm", "fwd", NULL, 0.1, 0);
    dm_atlas_bytes(a, "rmsnorm", "fwd", NULL, 3e8);
    dm_atlas_add(a, "rmsnorm", "fwd", NULL, 0.1, 0);
    dm_atlas_bytes(a, "rmsnorm", "fwd", NULL, 1e8);
    CHECK(a->n_ops == 2 && a->op[1].bytes == 4e8 && a->op[1].calls == 2);
    a->measured = 1; /* the roofline as a backend would leave it: no measuring here */
    a->n_gemm = 2;
    for (int j = 0; j < 2; j++)
        a->gemm[j] = (dm_atlas_gemm){.label = "matmul.fwd", .n = 1, .reps = 1, .slices = 1,
                                     .tiled = 1, .prod = {{0, 0, 64, 64, 64, 0}}};
    a->gemm[0].flops = 1e9, a->gemm[0].calls = 1, a->gemm[0].best = 0.02;
    a->gemm[1].flops = 5e8, a->gemm[1].calls = 2, a->gemm[1].best = 0.005;
    CHECK(dm_atlas_floor(a, &fr) == 1 && fr.why); /* no bandwidth measured */
    a->bw = 20e9;
    CHECK(dm_atlas_floor(a, &fr) == 0);
    double peak = (1e9 + 2 * 5e8) / (0.02 + 2 * 0.005); /* 66.7 GFLOP/s */
    CHECKF(fabs(fr.peak_flops - peak) < 1e-3 && fr.bw == 20e9, "peak %g bw %g", fr.peak_flops,
           fr.bw);
    want = (fmax(2e9 / peak, 4e6 / 20e9) + 4e8 / 20e9) / 2;
    CHECKF(fabs(fr.floor_s - want) < 1e-12, "floor %.9g s a step, want %.9g", fr.floor_s, want);
    /* the atlas prints it */
    char *txt = NULL;
    size_t len = 0;
    FILE *f2 = open_memstream(&txt, &len);
    CHECK(f2 != NULL);
    if (f2) {
        dm_atlas_print(a, f2);
        fclose(f2);
        char expect[64];
        snprintf(expect, sizeof expect, "floor: %.2f ms a step", 1e3 * want);
        CHECKF(txt && strstr(txt, expect), "no '%s' in:\n%s", expect, txt ? txt : "");
        CHECK(txt && !strstr(txt, "step time drift")); /* no drift set */
    }
    free(txt);
    a->drift = (dm_drift){.n = 100, .tenth = 10, .early_from = 3, .late_from = 93,
                          .early_ms = 100, .late_ms = 220, .ratio = 2.2, .slower = 1};
    txt = NULL;
    f2 = open_memstream(&txt, &len);
    if (f2) {
        dm_atlas_print(a, f2);
        fclose(f2);
        CHECKF(txt && strstr(txt, "step time drift") && strstr(txt, "120% slower"), "%s",
               txt ? txt : "");
    }
    free(txt);
    free(a);
}

/* ---- the budget under a gradual slowdown ---- */

/* The step slows gradually over the run, as when the arithmetic gets slower while the
 * weights train (1x at the start, 2.2x by the planned end; the plan fixed from the
 * warmup's rate). The budget re-plans from the recent rate (the last DM_BUDGET_WINDOW
 * steps, dm_budget_cut after every step, as train_budget_tick): the run is cut, more than
 * once as the rate keeps falling, and ends within 5% of the budget; planned at the
 * warmup's rate alone it would overrun by more than half. */
TEST(budget_replans_from_recent_rate_under_gradual_drift) {
    const double B = 300, step = 0.15, eval = 1;
    const int every = 250;
    double t = 10;
    long done = 8, plan = dm_budget_steps(B, t, done, step, eval, every, 1L << 30);
    long steps = plan, sched = 0;
    int cuts = 0;
    double ring[DM_BUDGET_WINDOW], uncut = t;
    int nr = 7;
    for (int i = 0; i < nr; i++) ring[i] = step;
    for (long s = done; s < plan; s++) /* the plan at the warmup's rate, never cut */
        uncut += step * (1 + 1.2 * (double)s / plan) + ((s + 1) % every == 0 ? eval : 0);
    while (done < steps) {
        double dt = step * (1 + 1.2 * (double)done / plan);
        t += dt + ((done + 1) % every == 0 || done + 1 == steps ? eval : 0);
        done++;
        ring[nr++ % DM_BUDGET_WINDOW] = dt;
        int n = nr < DM_BUDGET_WINDOW ? nr : DM_BUDGET_WINDOW;
        double r = 0;
        for (int i = 0; i < n; i++) r += ring[i] / n;
        long s = dm_budget_cut(B, t, done, steps, sched, r, eval, every);
        if (s != steps) {
            CHECKF(s < steps && dm_lr_cooldown_start(s) >= done, "a cut at %ld to %ld", done, s);
            if (!sched) sched = steps;
            steps = s, cuts++;
        }
    }
    printf("  planned %ld steps at the warmup's rate (%.0f s uncut); cut %d times to %ld, "
           "ending at %.1f s of %.0f\n", plan, uncut, cuts, steps, t, B);
    CHECKF(uncut > 1.4 * B, "the drift would overrun an uncut plan: %.1f s", uncut);
    CHECKF(cuts >= 2, "%d cuts", cuts);
    CHECKF(steps < plan && t <= 1.05 * B, "%ld steps of %ld end at %.1f s of %.0f", steps,
           plan, t, B);
}
