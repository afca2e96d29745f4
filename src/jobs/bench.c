/* bench.c — the step benchmark behind `dormouse bench` (an arm against a baseline), and
 * the helpers the benchmark programs in bench/ share (see bench.h). */
#include "jobs/bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/ckpt.h"
#include "io/data.h"
#include "jobs/load.h"
#include "jobs/plan.h" /* the memory report */
#include "jobs/step.h"
#include "model/model.h" /* the precision record */
#include "ops/atlas.h"   /* the step floor */
#include "base/clock.h"
#include "optim/optim.h"

/* ---- shared helpers ------------------------------------------------------------------ */

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

enum { ST_FWD, ST_FB, ST_STEP, ST_N, ST_COMM_MS = ST_N, ST_COMM_MB, ST_ALL };
static const char *const STAGE[ST_N] = {"forward", "fwd_bwd", "step"};

typedef struct {
    dm_config cfg;
    int threads;       /* in use while this arm runs */
    int processes;     /* ranks (mpirun) */
    dm_model *m;
    dm_optim *o;
    dm_stepper step;   /* the step: its batch is that of training step 0 */
    double *t[ST_ALL]; /* seconds per rep (ST_COMM_MS: in exchanges; ST_COMM_MB: bytes) */
    char label[256];   /* the baseline's keys with this arm's values: "kda_impl=auto" */
    char values[256];  /* the values alone (the table): "auto" */
    char config[1536]; /* the config column of its rows */
    char weights[64];  /* --from: "trained-step-N" or "init"; "" without it */
} arm;

typedef struct {
    const dm_bench_args *a;
    const dm_job_io *io;
    dm_status *st;
    const char *data;
    const char *const *base_sets; /* the baseline's overrides of the arm */
    int n_base;
    int reference;                /* the baseline is the default, kda_impl=reference */
    char base_text[512];          /* the overrides: "gemm=openblas threads=2" */
    char keys[256];               /* their keys: "gemm threads" */
    dm_corpus corpus;
    dm_ckpt *ckpt;                /* --from: the checkpoint the arm loads */
    int ckpt_optim;               /* it holds the optimizer state */
    int init_baseline;            /* --from without baseline keys: the baseline is init */
    long from_step;
    arm arms[2];                  /* [0] the arm, [1] the baseline */
    dm_probe_result pr;
    dm_floor floor;               /* the arm's step floor on this machine (why: not derived) */
} bench_ctx;

static const char *const DEFAULT_BASELINE[] = {"kda_impl=reference"};
static const char *const INIT_BASELINE[] = {"weights=init"};

/* The config column: the shape, the implementation and the threads always, then every
 * other key that differs from the defaults. */
static void arm_config(arm *a) {
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
    used += (size_t)snprintf(a->config + used, n - used, " threads=%d", a->threads);
    if (a->processes > 1)
        used += (size_t)snprintf(a->config + used, n - used, " processes=%d", a->processes);
    if (a->weights[0])
        used += (size_t)snprintf(a->config + used, n - used, " weights=%s", a->weights);
    if (!dm_denormals_flushed()) /* DM_CPU_KEEP_DENORMALS, or a CPU without the mode */
        used += (size_t)snprintf(a->config + used, n - used, " denormals=kept");
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

/* The key of the baseline's override i into key; 0 when an earlier one names it too. */
static int first_key(const bench_ctx *b, int i, char *key, size_t n) {
    char other[64];
    dm_split_set(b->base_sets[i], key, n);
    for (int j = 0; j < i; j++) {
        dm_split_set(b->base_sets[j], other, sizeof other);
        if (!strcmp(key, other)) return 0;
    }
    return 1;
}

/* The keys the baseline overrides, each once: "gemm threads" (the table's header). */
static void base_keys(bench_ctx *b) {
    size_t n = 0;
    for (int i = 0; i < b->n_base && n < sizeof b->keys; i++) {
        char key[64];
        if (first_key(b, i, key, sizeof key))
            n += (size_t)snprintf(b->keys + n, sizeof b->keys - n, "%s%s", n ? " " : "", key);
    }
}

/* An arm's label and values: those keys with the arm's values ("weights=trained" and
 * "weights=init" for --from against its initial weights). */
static void arm_labels(const bench_ctx *b, arm *a) {
    size_t nl = 0, nv = 0;
    if (b->init_baseline) {
        const char *w = a == &b->arms[0] ? "trained" : "init";
        snprintf(a->label, sizeof a->label, "weights=%s", w);
        snprintf(a->values, sizeof a->values, "%s", w);
        return;
    }
    for (int i = 0; i < b->n_base && nl < sizeof a->label && nv < sizeof a->values; i++) {
        char key[64], val[64];
        if (!first_key(b, i, key, sizeof key)) continue;
        dm_config_get(&a->cfg, key, val, sizeof val);
        nl += (size_t)snprintf(a->label + nl, sizeof a->label - nl, "%s%s=%s", nl ? " " : "",
                               key, val);
        nv += (size_t)snprintf(a->values + nv, sizeof a->values - nv, "%s%s", nv ? " " : "",
                               val);
    }
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

/* --from: the newest checkpoint of the path that opens, with its optimizer file when it
 * has one (a loose model file has none: the optimizer then starts fresh, said in a note). */
static int open_from(bench_ctx *b) {
    for (int with_optim = 1; with_optim >= 0; with_optim--) {
        dm_ckpt_iter it = {.path = b->a->from, .with_optim = with_optim};
        dm_status st = {DM_JOB_OK, ""};
        b->ckpt = dm_ckpt_next(&it, &st);
        if (b->ckpt) {
            dm_ckpt_loaded(&it, b->io);
            b->ckpt_optim = with_optim;
            b->from_step = dm_ckpt_step(b->ckpt);
            dm_job_note(b->io, "# --from %s: step %ld%s\n", it.model_path, b->from_step,
                        with_optim ? ", with its optimizer state"
                                   : "; no optimizer state saved: the optimizer's starts fresh");
            return 0;
        }
        if (!with_optim) *b->st = st;
    }
    return b->st->code;
}

/* The two configs: the arm (the defaults, then the sets) and the baseline (the arm, then
 * the baseline's overrides), both validated; the history file checked. */
static int bench_configs(bench_ctx *b) {
    const dm_bench_args *a = b->a;
    char err[8192];
    if (a->reps < 1) return dm_fail(b->st, DM_JOB_BAD_INPUT, "reps must be at least 1");
    b->base_sets = a->n_baseline ? a->baseline : DEFAULT_BASELINE;
    b->n_base = a->n_baseline ? a->n_baseline : 1;
    dm_config *arm_cfg = &b->arms[0].cfg, *base_cfg = &b->arms[1].cfg;
    if (a->from) {
        if (open_from(b)) return b->st->code;
        *arm_cfg = *dm_ckpt_config(b->ckpt);
        b->init_baseline = !a->n_baseline;
        if (b->init_baseline) b->base_sets = INIT_BASELINE;
    } else
        dm_config_default(arm_cfg);
    if (dm_config_apply_sets(arm_cfg, "--set", a->sets, a->n_sets, b->st)) return b->st->code;
    if (a->from && dm_config_check_model(dm_ckpt_config(b->ckpt), arm_cfg, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "--from %s: %s", a->from, err);
    if (dm_config_validate(arm_cfg, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "invalid config: %s", err);
    *base_cfg = *arm_cfg;
    if (b->init_baseline) goto checked;
    if (dm_config_apply_sets(base_cfg, "--baseline", b->base_sets, b->n_base, b->st))
        return b->st->code;
    if (dm_config_validate(base_cfg, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "invalid baseline config: %s", err);
    if (a->from && dm_config_check_model(dm_ckpt_config(b->ckpt), base_cfg, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "--from %s: the baseline: %s", a->from, err);
checked:
    if (a->history && dm_comm_rank(a->comm) == 0 && history_writable(a->history, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "%s", err);
    size_t used = 0;
    for (int i = 0; i < b->n_base && used < sizeof b->base_text; i++)
        used += (size_t)snprintf(b->base_text + used, sizeof b->base_text - used, "%s%s",
                                 i ? " " : "", b->base_sets[i]);
    b->reference = !strcmp(b->base_text, DEFAULT_BASELINE[0]);
    base_keys(b);
    return 0;
}

/* Build an arm: threads, labels, its batch, the model and optimizer, the timing slots. */
static int arm_init(bench_ctx *b, arm *a) {
    const dm_config *c = &a->cfg;
    char err[8192];
    a->threads = dm_step_threads(c, b->a->comm);
    a->processes = dm_comm_size(b->a->comm);
    char over[256];
    if (dm_step_oversubscribed(c->threads, over, sizeof over)[0]) dm_job_note(b->io, "# %s", over);
    arm_labels(b, a);
    if (b->ckpt) {
        if (b->init_baseline && a == &b->arms[1]) snprintf(a->weights, sizeof a->weights, "init");
        else snprintf(a->weights, sizeof a->weights, "trained-step-%ld", b->from_step);
    }
    arm_config(a);
    /* a token corpus sets the vocabulary, as for train */
    if (dm_corpus_vocab(&b->corpus, &a->cfg.vocab, a->cfg.vocab != DM_VOCAB, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "%s: %s", b->data, err);
    if (dm_corpus_split(&b->corpus, c->eval_window, c->seq_len, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "%s", err);
    a->m = dm_model_create_threads(c, a->threads, err, sizeof err);
    if (!a->m) return dm_fail(b->st, DM_JOB_BAD_INPUT, "%s", err);
    if (dm_model_reserve(a->m, c->batch_size, c->seq_len, err, sizeof err))
        return dm_fail(b->st, DM_JOB_FAILED, "%s", err);
    a->o = dm_optim_create(a->m, c, err, sizeof err);
    if (!a->o) return dm_fail(b->st, DM_JOB_FAILED, "%s", err);
    if (b->ckpt && !(b->init_baseline && a == &b->arms[1])) {
        int rc = dm_ckpt_into(b->ckpt, a->m, b->ckpt_optim ? a->o : NULL, err, sizeof err);
        if (rc) return dm_fail(b->st, DM_JOB_BAD_INPUT, "--from %s: %s", b->a->from, err);
    }
    if (dm_stepper_init(&a->step, a->m, a->o, c, b->a->comm, err, sizeof err))
        return dm_fail(b->st, DM_JOB_BAD_INPUT, "%s", err);
    for (int s = 0; s < ST_ALL; s++) {
        a->t[s] = calloc((size_t)b->a->reps, sizeof(double));
        if (!a->t[s]) return dm_fail(b->st, DM_JOB_FAILED, "out of memory");
    }
    return 0;
}

static void arm_free(arm *a) {
    for (int s = 0; s < ST_ALL; s++) free(a->t[s]);
    dm_stepper_free(&a->step);
    dm_optim_free(a->o);
    dm_model_free(a->m);
}

/* One training step of an arm on its batch, timed into rep (rep < 0: the warm-up, not
 * recorded). 0 ok; failed when the loss or the gradient norm is not finite, or an exchange
 * between ranks failed. */
static int arm_step(bench_ctx *b, arm *a, int rep) {
    dm_comm_stats c0 = dm_comm_get_stats(b->a->comm);
    dm_step_out so;
    if (dm_stepper_run(&a->step, &b->corpus, a->cfg.seed, 0, rep < 0 ? 0 : rep + 1, &so))
        return dm_fail(b->st, DM_JOB_FAILED, "%s", dm_comm_error(b->a->comm));
    dm_comm_stats c1 = dm_comm_get_stats(b->a->comm);
    if (!isfinite(so.loss) || !isfinite(so.gnorm))
        return dm_fail(b->st, DM_JOB_FAILED, "%s: %s is %g at rep %d", a->label,
                       isfinite(so.loss) ? "gradient norm" : "loss",
                       isfinite(so.loss) ? so.gnorm : so.loss, rep + 1);
    if (rep >= 0) {
        a->t[ST_FWD][rep] = so.t_fwd;
        a->t[ST_FB][rep] = so.t_fwd + so.t_bwd;
        a->t[ST_STEP][rep] = so.t_fwd + so.t_bwd + so.t_opt;
        a->t[ST_COMM_MS][rep] = c1.sec - c0.sec;
        a->t[ST_COMM_MB][rep] = c1.bytes - c0.bytes;
    }
    return 0;
}

/* One warm-up step each, then the reps interleaved (the order alternating), probed. */
static int run_reps(bench_ctx *b) {
    arm *A = b->arms;
    int reps = b->a->reps;
    for (int i = 0; i < 2; i++)
        if (arm_step(b, &A[i], -1)) return b->st->code;
    dm_probe probe;
    dm_probe_begin(&probe);
    for (int r = 0; r < reps; r++) {
        for (int j = 0; j < 2; j++)
            if (arm_step(b, &A[(r + j) % 2], r)) return b->st->code;
        dm_probe_tick(&probe);
        /* every rank stops at the same rep, as the one that got the signal */
        int code = 0, failed;
        char msg[1024];
        int stop = dm_job_agree(b->io, b->a->comm, &code, msg, sizeof msg, &failed);
        if (failed) return dm_fail(b->st, DM_JOB_FAILED, "%s", msg);
        if (stop && r + 1 < reps)
            return dm_fail(b->st, DM_JOB_INTERRUPTED, "interrupted after %d of %d reps; "
                           "nothing reported", r + 1, reps);
    }
    dm_probe_end(&probe, A[0].threads > A[1].threads ? A[0].threads : A[1].threads, &b->pr);
    return 0;
}

/* The floor of the arm's step on this machine (ops/atlas.h: dm_atlas_floor, docs/bf16.md):
 * one more step with an atlas attached counts each op's FLOPs and bytes, then the step's
 * GEMMs are timed alone at their shapes on the engine the policy chose, and a streaming
 * copy measures the memory's bandwidth (each well under a second). Into b->floor. */
static void measure_floor(bench_ctx *b) {
    arm *a = &b->arms[0];
    dm_atlas *at = calloc(1, sizeof *at);
    if (!at) {
        b->floor.why = "out of memory for the atlas";
        return;
    }
    dm_model_set_atlas(a->m, at);
    dm_status st = {DM_JOB_OK, ""}, *keep = b->st;
    b->st = &st; /* a failed extra step leaves the floor out, not the benchmark */
    int rc = arm_step(b, a, -1);
    b->st = keep;
    dm_model_set_atlas(a->m, NULL);
    at->steps = 1;
    if (rc) b->floor.why = "the step with the atlas failed";
    else dm_atlas_floor(at, &b->floor); /* the threads are the arm's (arm_step set them) */
    free(at);
}

/* Rows: per arm and stage, ms and tokens/s; per stage the speed-up of arm 0 over arm 1;
 * with --memory per arm its saved activations and total, and the ratio of the two arms';
 * under mpirun per arm the exchanges' ms and MB per step. */
#define MAX_ROWS (2 * 2 * ST_N + ST_N + 1 + 2 * 2 + 1 + 2 * 2)

/* --memory: each arm's memory line, and its rows (not timings: never contended) */
static int memory_rows(bench_ctx *b, dm_history_row *rows, char (*metric)[64],
                       const char *ratio_config) {
    const arm *A = b->arms;
    dm_memory mem[2];
    int nr = 0;
    for (int i = 0; i < 2; i++) {
        char line[1024];
        dm_memory_report(A[i].m, A[i].o, A[i].step.gs, &mem[i]);
        dm_memory_line(&mem[i], A[i].cfg.checkpointing, line, sizeof line);
        dm_job_note(b->io, "# %s %s\n", A[i].label, line);
        snprintf(metric[nr], 64, "saved_activations_mib");
        rows[nr] = (dm_history_row){"bench:step", A[i].config, metric[nr],
                                    mem[i].saved / 1048576.0, 0, 1, ""};
        nr++;
        snprintf(metric[nr], 64, "total_mib");
        rows[nr] = (dm_history_row){"bench:step", A[i].config, metric[nr],
                                    dm_memory_total(&mem[i]) / 1048576.0, 0, 1, ""};
        nr++;
    }
    double r = (double)mem[0].saved / (double)mem[1].saved;
    snprintf(metric[nr], 64, "saved_activations_ratio_to_%s", b->reference ? "reference" : "baseline");
    rows[nr] = (dm_history_row){"bench:step", ratio_config, metric[nr], r, 0, 1, ""};
    dm_job_note(b->io, "# saved activations of %s: %.1f%% of the %s's\n", A[0].label, 100 * r,
                b->reference ? "reference" : "baseline");
    return nr + 1;
}

static int report(bench_ctx *b) {
    const arm *A = b->arms;
    int reps = b->a->reps;
    char err[8192], flags[96], speedup_config[2100];
    static char metric[MAX_ROWS][64];
    dm_history_row rows[MAX_ROWS];
    double *buf = malloc(sizeof(double) * (size_t)reps);
    if (!buf) return dm_fail(b->st, DM_JOB_FAILED, "out of memory");
    for (int i = 0; i < 2; i++) {
        char disp[1024];
        dm_model_dispatch_report(A[i].m, disp, sizeof disp);
        dm_job_note(b->io, "# dispatch %s: %s\n", A[i].label, disp);
        dm_precision_describe(dm_model_precision(A[i].m), disp, sizeof disp);
        dm_job_note(b->io, "# precision %s: %s\n", A[i].label, disp);
    }
    dm_bench_flags(&b->pr, flags, sizeof flags);
    int nr = 0, w = (int)strlen(b->keys);
    for (int i = 0; i < 2; i++)
        if ((int)strlen(A[i].values) > w) w = (int)strlen(A[i].values);
    if (w < 10) w = 10;
    double med[2][ST_N], ratio[ST_N], step_tps[2];
    dm_job_note(b->io, "# %-*s %18s %18s %18s %14s\n", w, b->keys, "forward ms", "fwd_bwd ms",
                "step ms", "step tokens/s");
    for (int i = 0; i < 2; i++) {
        double sp[ST_N], tps = 0,
               tokens = (double)A[i].cfg.batch_size * A[i].cfg.grad_accum * A[i].cfg.seq_len;
        for (int s = 0; s < ST_N; s++) {
            for (int r = 0; r < reps; r++) buf[r] = 1e3 * A[i].t[s][r];
            med[i][s] = dm_median(buf, reps, &sp[s]);
            snprintf(metric[nr], sizeof metric[nr], "%s_ms", STAGE[s]);
            rows[nr] = (dm_history_row){"bench:step", A[i].config, metric[nr], med[i][s],
                                        sp[s], reps, flags};
            nr++;
        }
        for (int s = 0; s < ST_N; s++) {
            double tsp;
            for (int r = 0; r < reps; r++) buf[r] = tokens / A[i].t[s][r];
            double v = dm_median(buf, reps, &tsp);
            if (s == ST_STEP) tps = v;
            snprintf(metric[nr], sizeof metric[nr], "%s_tokens_per_s", STAGE[s]);
            rows[nr] = (dm_history_row){"bench:step", A[i].config, metric[nr], v, tsp, reps,
                                        flags};
            nr++;
        }
        char c[ST_N][40];
        for (int s = 0; s < ST_N; s++) snprintf(c[s], sizeof c[s], "%.2f (%.2f)", med[i][s], sp[s]);
        dm_job_note(b->io, "# %-*s %18s %18s %18s %14.0f\n", w, A[i].values, c[0], c[1], c[2],
                    tps);
        step_tps[i] = tps;
    }
    if (b->corpus.tok && b->corpus.ts[0].n) { /* tokens: the text they stand for, too */
        double bpt = (double)b->corpus.train_n / (double)b->corpus.ts[0].n;
        dm_job_note(b->io, "# tokens of vocab %d, %.3f bytes each (train.tok): step bytes/s "
                    "%s %.0f, %s %.0f\n", b->corpus.vocab, bpt, A[0].values, step_tps[0] * bpt,
                    A[1].values, step_tps[1] * bpt);
    }
    /* the speed-up rows name what they compare */
    const char *over = b->reference ? "reference" : "baseline";
    if (b->reference) snprintf(speedup_config, sizeof speedup_config, "%s", A[0].config);
    else snprintf(speedup_config, sizeof speedup_config, "%s | baseline %s", A[0].config,
                  b->base_text);
    for (int s = 0; s < ST_N; s++) {
        double rsp;
        for (int r = 0; r < reps; r++) buf[r] = A[1].t[s][r] / A[0].t[s][r];
        ratio[s] = dm_median(buf, reps, &rsp);
        snprintf(metric[nr], sizeof metric[nr], "%s_speedup_over_%s", STAGE[s], over);
        rows[nr] = (dm_history_row){"bench:step", speedup_config, metric[nr], ratio[s], rsp,
                                    reps, flags};
        nr++;
    }
    dm_job_note(b->io, "# speed-up of %s over the %s%s%s (%s time / its time, median over "
                "reps): forward %.2fx, fwd_bwd %.2fx, step %.2fx\n", A[0].label, over,
                b->reference ? "" : " ", b->reference ? "" : A[1].label, over, ratio[ST_FWD],
                ratio[ST_FB], ratio[ST_STEP]);
    if (b->floor.floor_s > 0) { /* the arm's step against its floor on this machine */
        double f_ms = 1e3 * b->floor.floor_s, fsp;
        for (int r = 0; r < reps; r++) buf[r] = 1e3 * A[0].t[ST_STEP][r] / f_ms;
        double over_floor = dm_median(buf, reps, &fsp);
        snprintf(metric[nr], sizeof metric[nr], "step_over_floor");
        rows[nr] = (dm_history_row){"bench:step", A[0].config, metric[nr], over_floor, fsp,
                                    reps, flags};
        nr++;
        dm_job_note(b->io, "# floor of %s: %.2f ms a step (each op at the slower of its FLOPs "
                    "at %.1f GFLOP/s, the step's GEMMs alone, and the bytes it reads and writes "
                    "at %.1f GB/s, a streaming copy; docs/bf16.md): the step is %.2fx its "
                    "floor\n",
                    A[0].label, f_ms, b->floor.peak_flops / 1e9, b->floor.bw / 1e9,
                    over_floor);
    } else
        dm_job_note(b->io, "# floor of %s: not derived (%s)\n", A[0].label,
                    b->floor.why ? b->floor.why : "?");
    if (b->a->memory) nr += memory_rows(b, rows + nr, metric + nr, speedup_config);
    for (int i = 0; i < 2 && A[i].processes > 1; i++) { /* the exchanges of a step */
        double v[2], spr[2];
        for (int k = 0; k < 2; k++) {
            double f = k == 0 ? 1e3 : 1e-6; /* ms, MB */
            for (int r = 0; r < reps; r++) buf[r] = f * A[i].t[ST_COMM_MS + k][r];
            v[k] = dm_median(buf, reps, &spr[k]);
            snprintf(metric[nr], sizeof metric[nr], k == 0 ? "comm_ms_per_step" : "comm_mb_per_step");
            rows[nr] = (dm_history_row){"bench:step", A[i].config, metric[nr], v[k], spr[k],
                                        reps, flags};
            nr++;
        }
        dm_job_note(b->io, "# %s: %d processes; rank 0 sent %.3f MB per step and spent %.2f ms "
                    "(%.2f) in exchanges, %.1f%% of the step\n", A[i].label, A[i].processes, v[1],
                    v[0], spr[0], 100 * v[0] / med[i][ST_STEP]);
    }
    free(buf);
    char note[256];
    dm_bench_probe_note(&b->pr, note, sizeof note);
    dm_job_note(b->io, "# %s\n", note);
    /* the rows in the history columns: a detail (-v), appended with --history */
    dm_job_detail(b->io, "#%s\n", DM_HISTORY_HEADER);
    dm_note_buf nb;
    FILE *f = dm_note_open(&nb);
    /* rank 0 alone appends to the history */
    const char *hist = dm_comm_rank(b->a->comm) == 0 ? b->a->history : NULL;
    int rc = dm_history_report(f, hist, rows, nr, err, sizeof err);
    dm_note_close_detail(&nb, b->io, NULL);
    if (rc) return dm_fail(b->st, DM_JOB_FAILED, "%s", err);
    if (b->a->history) dm_job_note(b->io, "# history: appended %d rows to %s\n", nr, b->a->history);
    else dm_job_note(b->io, "# %d rows in the columns of benches/history.tsv: -v prints them, "
                     "--history FILE appends them\n", nr);
    return 0;
}

dm_status dm_bench_step(const dm_bench_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    char err[8192], dflt[4096];
    bench_ctx b = {.a = a, .io = io, .st = &st, .data = dm_data_path(a->data, dflt, sizeof dflt,
                                                                      &st)};
    if (b.data && !bench_configs(&b) && dm_corpus_load(&b.corpus, b.data, err, sizeof err))
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s", err);
    if (!st.code && b.corpus.notes) dm_job_note(io, "%s", b.corpus.notes);
    if (!st.code && a->verify_data && dm_corpus_verify(&b.corpus, err, sizeof err))
        dm_fail(&st, DM_JOB_BAD_INPUT, "%s: %s", b.data, err);
    if (!st.code && !arm_init(&b, &b.arms[0])) arm_init(&b, &b.arms[1]);
    /* the ranks agree on the set-up before their steps exchange anything */
    int code = st.code, stop = 0;
    dm_comm_agree(a->comm, &code, st.msg, sizeof st.msg, &stop);
    if ((st.code = code) != DM_JOB_OK) goto done;
    const arm *A = b.arms;
    const dm_config *c = &A[0].cfg;
    char procs[64] = "";
    if (A[0].processes > 1)
        snprintf(procs, sizeof procs, " per process, %d processes (MPI)", A[0].processes);
    dm_job_note(io, "# dormouse bench: %s mixer, d_model %d, %d layer%s, %d head%s x %d, %zu "
                "parameters; batch %d x %d bytes x grad_accum %d of %s; %d thread%s%s\n",
                c->mixer == DM_MIXER_KDA ? "kda" : "gdn", c->d_model, c->n_layer,
                c->n_layer == 1 ? "" : "s", c->n_head, c->n_head == 1 ? "" : "s", c->head_dim,
                dm_model_num_params(A[0].m), c->batch_size, c->seq_len, c->grad_accum, b.data,
                A[0].threads, A[0].threads == 1 ? "" : "s", procs);
    dm_job_note(io, "# arms %s and %s (the baseline): one warm-up step each, then %d rep%s, "
                "interleaved rep by rep; ms: median (max - min)\n", A[0].label, A[1].label,
                a->reps, a->reps == 1 ? "" : "s");
    if (!run_reps(&b)) {
        measure_floor(&b);
        report(&b);
    }
done:
    for (int i = 0; i < 2; i++) arm_free(&b.arms[i]);
    if (b.ckpt) dm_ckpt_close(b.ckpt);
    dm_corpus_free(&b.corpus);
    return st;
}
