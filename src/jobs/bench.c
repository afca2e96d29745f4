/* bench.c — the step benchmark behind `dormouse bench`, and the helpers the benchmark
 * programs in bench/ share (see bench.h). */
#include "jobs/bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/ab.h"    /* dm_ab_median */
#include "ops/atlas.h" /* dm_now */
#include "io/data.h"
#include "optim/optim.h"

/* ---- shared helpers ------------------------------------------------------------------ */

double dm_bench_median(const double *x, int n, double *spread) {
    double *c = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!c || n < 1) {
        free(c);
        if (spread) *spread = NAN;
        return NAN;
    }
    memcpy(c, x, sizeof(double) * (size_t)n);
    double m = dm_ab_median(c, n); /* sorts c */
    if (spread) *spread = c[n - 1] - c[0];
    free(c);
    return m;
}

void dm_bench_flags(const dm_probe_result *r, char *buf, size_t n) {
    char words[64];
    buf[0] = 0;
    if (!r->flags) return;
    dm_probe_flags_text(r->flags, words, sizeof words);
    snprintf(buf, n, "contended,%s", words);
}

void dm_bench_probe_note(const dm_probe_result *r, char *buf, size_t n) {
    char words[64];
    dm_probe_flags_text(r->flags, words, sizeof words);
    snprintf(buf, n, "%s: load max %.2f, other processes %.2f cores, steal %.1f%% (%d threads "
             "on %d cpus, %.1f s)",
             r->flags ? "contended" : "quiet", r->load_max, r->others_cores,
             100 * r->steal_frac, r->threads, r->ncpu, r->wall_s);
    if (r->flags) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, " [%s]", words);
    }
}

/* ---- the step benchmark -------------------------------------------------------------- */

enum { ST_FWD, ST_FB, ST_STEP, ST_N };
static const char *const STAGE[ST_N] = {"forward", "fwd_bwd", "step"};

typedef struct {
    dm_config cfg;
    dm_model *m;
    dm_optim *o;
    double *t[ST_N]; /* seconds per rep */
    char impl[16];   /* kda_impl */
    char config[1536];
} arm;

/* The config column: the shape, the implementation and the threads always, then every
 * other key that differs from the defaults. */
static void arm_config(arm *a, int threads) {
    static const char *const always[] = {"mixer", "d_model", "n_layer", "n_head", "head_dim",
                                         "gate_rank", "batch_size", "seq_len", "kda_impl",
                                         "chunk_size", NULL};
    dm_config d;
    dm_config_default(&d);
    char va[64], vb[64];
    size_t used = 0, n = sizeof a->config;
    for (int i = 0; always[i]; i++) {
        dm_config_get(&a->cfg, always[i], va, sizeof va);
        used += (size_t)snprintf(a->config + used, n - used, "%s%s=%s", used ? " " : "",
                                 always[i], va);
    }
    used += (size_t)snprintf(a->config + used, n - used, " threads=%d", threads);
    for (int i = 0; dm_config_key_name(i) && used < n; i++) {
        const char *k = dm_config_key_name(i);
        int listed = !strcmp(k, "threads");
        for (int j = 0; always[j]; j++) listed |= !strcmp(k, always[j]);
        dm_config_get(&a->cfg, k, va, sizeof va);
        dm_config_get(&d, k, vb, sizeof vb);
        if (!listed && strcmp(va, vb) != 0)
            used += (size_t)snprintf(a->config + used, n - used, " %s=%s", k, va);
    }
}

/* 0 ok; 2 the model cannot be built for this config (bad input); 1 out of memory. */
static int arm_init(arm *a, const dm_config *cfg, int reps, int threads, char *err,
                    size_t errlen) {
    memset(a, 0, sizeof *a);
    a->cfg = *cfg;
    dm_config_get(cfg, "kda_impl", a->impl, sizeof a->impl);
    arm_config(a, threads);
    a->m = dm_model_create(cfg, err, errlen);
    if (!a->m) return 2;
    if (dm_model_reserve(a->m, cfg->batch_size, cfg->seq_len, err, errlen)) return 1;
    a->o = dm_optim_create(a->m, cfg, err, errlen);
    if (!a->o) return 1;
    for (int s = 0; s < ST_N; s++) {
        a->t[s] = calloc((size_t)reps, sizeof(double));
        if (!a->t[s]) {
            snprintf(err, errlen, "out of memory");
            return 1;
        }
    }
    return 0;
}

static void arm_free(arm *a) {
    for (int s = 0; s < ST_N; s++) free(a->t[s]);
    dm_optim_free(a->o);
    dm_model_free(a->m);
}

/* One training step on tok, timed into rep (rep < 0: the warm-up, not recorded).
 * 0 ok; 1 with err when the loss or the gradient norm is not finite. */
static int arm_step(arm *a, const uint8_t *tok, int rep, char *err, size_t errlen) {
    int B = a->cfg.batch_size, T = a->cfg.seq_len;
    double t0 = dm_now();
    float loss = dm_model_forward(a->m, tok, B, T, NULL);
    double t1 = dm_now();
    dm_model_zero_grad(a->m);
    dm_model_backward(a->m);
    double t2 = dm_now();
    double gnorm = dm_optim_step(a->o, a->m, rep < 0 ? 0 : rep + 1);
    double t3 = dm_now();
    if (!isfinite(loss) || !isfinite(gnorm)) {
        snprintf(err, errlen, "kda_impl=%s: %s is %g at rep %d", a->impl,
                 isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? gnorm : loss,
                 rep + 1);
        return 1;
    }
    if (rep >= 0) {
        a->t[ST_FWD][rep] = t1 - t0;
        a->t[ST_FB][rep] = t2 - t0;
        a->t[ST_STEP][rep] = t3 - t0;
    }
    return 0;
}

/* 0 when path can be appended to (the file, or else its directory, is writable). */
static int history_writable(const char *path, char *err, size_t errlen) {
    if (access(path, F_OK) == 0) {
        if (access(path, W_OK) == 0) return 0;
    } else {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = 0;
        else *slash = 0;
        if (access(dir, W_OK) == 0) return 0;
    }
    snprintf(err, errlen, "cannot append to history %s: %s", path, strerror(errno));
    return 1;
}

/* Rows: per arm and stage, ms and tokens/s; per stage the speed-up of arm 0 over arm 1. */
#define MAX_ROWS (2 * 2 * ST_N + ST_N)

int dm_bench_step(const dm_config *cfg, const dm_bench_args *a, FILE *out) {
    char err[8192];
    int rc = 0, reps = a->reps;
    dm_corpus corpus = {0};
    arm arms[2];
    memset(arms, 0, sizeof arms);
    uint8_t *tok = NULL;
    double *buf = NULL;

    int threads = dm_set_threads(cfg->threads);
    if (reps < 1) {
        fprintf(stderr, "error: reps must be at least 1\n");
        return 2;
    }
    if (a->history && history_writable(a->history, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 2;
    }
    if (dm_corpus_load(&corpus, a->data, err, sizeof err) ||
        dm_corpus_split(&corpus, cfg->eval_window, cfg->seq_len, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        rc = 2;
        goto done;
    }
    dm_config base = *cfg;
    base.kda_impl = DM_IMPL_REFERENCE;
    for (int i = 0; i < 2 && !rc; i++) {
        rc = arm_init(&arms[i], i ? &base : cfg, reps, threads, err, sizeof err);
        if (rc) fprintf(stderr, "error: %s\n", err);
    }
    if (rc) goto done;
    int B = cfg->batch_size, T = cfg->seq_len;
    tok = malloc((size_t)B * (T + 1));
    buf = malloc(sizeof(double) * (size_t)reps);
    if (!tok || !buf) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto done;
    }
    dm_corpus_batch(&corpus, cfg->seed, 0, B, T, tok);

    fprintf(out, "# dormouse bench: %s mixer, d_model %d, %d layers, %d heads x %d, %zu "
                 "parameters; batch %d x %d bytes of %s; %d threads\n",
            cfg->mixer == DM_MIXER_KDA ? "kda" : "gdn", cfg->d_model, cfg->n_layer,
            cfg->n_head, cfg->head_dim, dm_model_num_params(arms[0].m), B, T, a->data,
            threads);
    fprintf(out, "# arms kda_impl=%s and kda_impl=reference (the baseline): one warm-up step "
                 "each, then %d rep%s, interleaved rep by rep; ms: median (max - min)\n",
            arms[0].impl, reps, reps == 1 ? "" : "s");
    fflush(out);

    /* warm-up: arena pages, optimizer state, the thread pool */
    for (int i = 0; i < 2 && !rc; i++) rc = arm_step(&arms[i], tok, -1, err, sizeof err);
    dm_probe probe;
    dm_probe_result pr;
    dm_probe_begin(&probe);
    for (int r = 0; r < reps && !rc; r++) {
        for (int j = 0; j < 2 && !rc; j++) /* alternate which arm goes first */
            rc = arm_step(&arms[(r + j) % 2], tok, r, err, sizeof err);
        dm_probe_tick(&probe);
    }
    dm_probe_end(&probe, threads, &pr);
    if (rc) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    for (int i = 0; i < 2; i++) {
        char disp[1024];
        dm_model_dispatch_report(arms[i].m, disp, sizeof disp);
        fprintf(out, "# dispatch kda_impl=%s: %s\n", arms[i].impl, disp);
    }

    /* rows */
    static char metric[MAX_ROWS][64];
    dm_history_row rows[MAX_ROWS];
    char flags[96];
    dm_bench_flags(&pr, flags, sizeof flags);
    int nr = 0;
    double med[2][ST_N], ratio[ST_N];
    fprintf(out, "# %-10s %18s %18s %18s %14s\n", "kda_impl", "forward ms", "fwd_bwd ms",
            "step ms", "step tokens/s");
    for (int i = 0; i < 2; i++) {
        double sp[ST_N], tps = 0;
        for (int s = 0; s < ST_N; s++) {
            for (int r = 0; r < reps; r++) buf[r] = 1e3 * arms[i].t[s][r];
            med[i][s] = dm_bench_median(buf, reps, &sp[s]);
            snprintf(metric[nr], sizeof metric[nr], "%s_ms", STAGE[s]);
            rows[nr] = (dm_history_row){"bench:step", arms[i].config, metric[nr], med[i][s],
                                        sp[s], reps, flags};
            nr++;
        }
        for (int s = 0; s < ST_N; s++) {
            double tsp;
            for (int r = 0; r < reps; r++) buf[r] = (double)B * T / arms[i].t[s][r];
            double v = dm_bench_median(buf, reps, &tsp);
            if (s == ST_STEP) tps = v;
            snprintf(metric[nr], sizeof metric[nr], "%s_tokens_per_s", STAGE[s]);
            rows[nr] = (dm_history_row){"bench:step", arms[i].config, metric[nr], v, tsp,
                                        reps, flags};
            nr++;
        }
        char c1[40], c2[40], c3[40];
        snprintf(c1, sizeof c1, "%.2f (%.2f)", med[i][0], sp[0]);
        snprintf(c2, sizeof c2, "%.2f (%.2f)", med[i][1], sp[1]);
        snprintf(c3, sizeof c3, "%.2f (%.2f)", med[i][2], sp[2]);
        fprintf(out, "# %-10s %18s %18s %18s %14.0f\n", arms[i].impl, c1, c2, c3, tps);
    }
    for (int s = 0; s < ST_N; s++) {
        double rsp;
        for (int r = 0; r < reps; r++) buf[r] = arms[1].t[s][r] / arms[0].t[s][r];
        ratio[s] = dm_bench_median(buf, reps, &rsp);
        snprintf(metric[nr], sizeof metric[nr], "%s_speedup_over_reference", STAGE[s]);
        rows[nr] = (dm_history_row){"bench:step", arms[0].config, metric[nr], ratio[s], rsp,
                                    reps, flags};
        nr++;
    }
    fprintf(out, "# speed-up of kda_impl=%s over the reference (reference time / its time, "
                 "median over reps): forward %.2fx, fwd_bwd %.2fx, step %.2fx\n",
            arms[0].impl, ratio[ST_FWD], ratio[ST_FB], ratio[ST_STEP]);
    char note[256];
    dm_bench_probe_note(&pr, note, sizeof note);
    fprintf(out, "# %s\n#%s\n", note, DM_HISTORY_HEADER);
    if (dm_history_report(out, a->history, rows, nr, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        rc = 1;
        goto done;
    }
    if (a->history) fprintf(out, "# history: appended %d rows to %s\n", nr, a->history);

done:
    for (int i = 0; i < 2; i++) arm_free(&arms[i]);
    free(tok);
    free(buf);
    dm_corpus_free(&corpus);
    return rc;
}
