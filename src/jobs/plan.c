/* plan.c — the memory report (what train prints and writes) and the plan job behind
 * `dormouse plan`: a config's memory figures and a measured ms/step, without training. */
#include "jobs/plan.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/stats.h"
#include "jobs/step.h"
#include "model/host.h"
#include "optim/gradsum.h"
#include "optim/optim.h"

#define MIB (1024.0 * 1024.0)

void dm_memory_add_step(dm_memory *mem, const struct dm_optim *o, const struct dm_gradsum *gs) {
    if (o) {
        dm_optim_mem om;
        dm_optim_memory(o, &om);
        mem->optimizer += om.state;
        mem->optimizer_scratch += om.scratch;
        mem->exchange += om.gather;
    }
    mem->exchange += dm_gradsum_bytes(gs);
}

int dm_memory_report(const dm_model *m, const struct dm_optim *o, const struct dm_gradsum *gs,
                     dm_memory *mem) {
    if (dm_model_memory(m, mem)) return 1;
    dm_memory_add_step(mem, o, gs);
    return 0;
}

size_t dm_memory_total(const dm_memory *mem) {
    return mem->params + mem->params_bf16 + mem->grads + mem->optimizer +
           mem->optimizer_scratch + mem->exchange + mem->saved + mem->recompute + mem->scratch +
           mem->verify + mem->products;
}

/* A small file of /proc or /sys into buf (NUL-terminated), with read(2) and no stdio, so
 * the check leaves the heap as it found it; 0 ok. */
static int read_small(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    size_t got = 0;
    for (ssize_t k; got + 1 < n && (k = read(fd, buf + got, n - 1 - got)) != 0;) {
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = 0;
    return got == 0;
}

/* the number of kB after "key:" in /proc/meminfo's text, 0 when absent */
static size_t meminfo_kb(const char *text, const char *key) {
    const char *p = strstr(text, key);
    unsigned long long kb = 0;
    return p && sscanf(p + strlen(key), " %llu", &kb) == 1 ? (size_t)kb * 1024 : 0;
}

size_t dm_machine_memory(char *what, size_t n) {
    char text[8192];
    size_t have = 0, total = 0;
    if (read_small("/proc/meminfo", text, sizeof text) == 0) {
        have = meminfo_kb(text, "MemAvailable:");
        total = meminfo_kb(text, "MemTotal:");
    }
    if (!total) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) total = (size_t)pages * (size_t)page;
    }
    if (!have) have = total;
    int used = snprintf(what, n, "%.2f GiB available of %.2f GiB", have / (MIB * 1024),
                        total / (MIB * 1024));
    /* a cgroup (a container's memory limit), then the address-space ulimit */
    unsigned long long lim;
    if (read_small("/sys/fs/cgroup/memory.max", text, sizeof text) == 0 &&
        sscanf(text, "%llu", &lim) == 1 && lim < have) {
        have = (size_t)lim;
        used += snprintf(what + used, n > (size_t)used ? n - (size_t)used : 0,
                         ", a cgroup limit of %.2f GiB", lim / (MIB * 1024));
    }
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < have) {
        have = (size_t)r.rlim_cur;
        snprintf(what + used, n > (size_t)used ? n - (size_t)used : 0,
                 ", an address-space limit (ulimit -v) of %.2f GiB", r.rlim_cur / (MIB * 1024));
    }
    return have;
}

/* The optimizer's state is at least its momentum, one value per parameter (Muon's
 * momentum, AdamW's first moment); AdamW on every parameter keeps a second. */
static size_t optimizer_floor(const dm_config *c, const dm_memory *mem) {
    return (c->optimizer == DM_OPT_ADAMW ? 2 : 1) * mem->params;
}

int dm_memory_fits(const dm_config *c, int B, int T, int threads, dm_memory *planned,
                   dm_status *st) {
    char err[DM_ERRLEN], what[256];
    dm_memory mem;
    if (dm_memory_plan(c, B, T, threads, &mem, err, sizeof err))
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    mem.optimizer = optimizer_floor(c, &mem);
    if (planned) *planned = mem;
    size_t need = dm_memory_total(&mem), have = dm_machine_memory(what, sizeof what);
    if (!have || need <= have) return 0;
    return dm_fail(st, DM_JOB_FAILED, "out of memory before starting: the memory plan needs at "
                   "least %.2f GiB (parameters %.2f, gradients %.2f, optimizer state %.2f or "
                   "more, activations and scratch %.2f for batch %d x %d) and this machine has "
                   "%s; nothing was allocated. A smaller model, batch_size or seq_len, or "
                   "checkpointing=full fits better (`dormouse plan` shows the figures)",
                   need / (MIB * 1024), mem.params / (MIB * 1024), mem.grads / (MIB * 1024),
                   mem.optimizer / (MIB * 1024),
                   (mem.saved + mem.recompute + mem.scratch + mem.verify + mem.params_bf16) /
                       (MIB * 1024), B, T, what);
}

static const char *ckpt_name(int mode) {
    return mode == DM_CKPT_FULL ? "full" : mode == DM_CKPT_BALANCED ? "balanced" : "none";
}

void dm_memory_line(const dm_memory *mem, int checkpointing, char *buf, size_t n) {
    char bf[48] = "", vf[96] = "", xf[48] = "";
    if (mem->params_bf16) snprintf(bf, sizeof bf, " (+%.1f bf16)", mem->params_bf16 / MIB);
    size_t at = 0;
    if (mem->verify) at += (size_t)snprintf(vf, sizeof vf, ", verify %.1f", mem->verify / MIB);
    if (mem->products)
        snprintf(vf + at, sizeof vf - at, ", bf16 operands %.1f", mem->products / MIB);
    if (mem->exchange) snprintf(xf, sizeof xf, ", gradient sum and exchange %.1f",
                                mem->exchange / MIB);
    snprintf(buf, n, "memory: parameters %.1f MiB%s, gradients %.1f, optimizer %.1f (+%.1f "
             "scratch)%s, saved activations %.1f (checkpointing %s), recompute %.1f, scratch "
             "%.1f%s; total %.1f MiB for batch %d x %d", mem->params / MIB, bf,
             mem->grads / MIB, mem->optimizer / MIB, mem->optimizer_scratch / MIB, xf,
             mem->saved / MIB, ckpt_name(checkpointing), mem->recompute / MIB,
             mem->scratch / MIB, vf, dm_memory_total(mem) / MIB, mem->batch, mem->seq_len);
}

void dm_memory_json(const dm_memory *mem, char *buf, size_t n) {
    snprintf(buf, n, "\"parameters_bytes\": %zu, \"parameters_bf16_bytes\": %zu, "
             "\"gradients_bytes\": %zu, \"optimizer_bytes\": %zu, \"optimizer_scratch_bytes\": "
             "%zu, \"exchange_bytes\": %zu, \"saved_activations_bytes\": %zu, "
             "\"recompute_bytes\": %zu, \"scratch_bytes\": %zu, \"verify_bytes\": %zu, "
             "\"bf16_operands_bytes\": %zu, \"total_bytes\": %zu", mem->params, mem->params_bf16,
             mem->grads, mem->optimizer, mem->optimizer_scratch, mem->exchange, mem->saved,
             mem->recompute, mem->scratch, mem->verify, mem->products, dm_memory_total(mem));
}

size_t dm_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* KiB on Linux */
}

/* ---- the plan job ---------------------------------------------------------------------- */

typedef struct {
    const dm_plan_args *a;
    const dm_job_io *io;
    dm_status *st;
    dm_config cfg;
    int threads;
    dm_model *m;
    dm_optim *o;
    dm_corpus corpus; /* bytes from the seeded generator: the steps' batches */
    dm_stepper step;  /* the training step: grad_accum micro-batches and the update */
    double *t;        /* seconds per timed step */
} plan_ctx;

static int plan_config(plan_ctx *p) {
    char err[DM_ERRLEN];
    if (p->a->reps < 0) return dm_fail(p->st, DM_JOB_BAD_INPUT, "reps must be at least 0");
    dm_config_default(&p->cfg);
    if ((p->a->config_file && dm_config_apply_file(&p->cfg, p->a->config_file, p->st)) ||
        dm_config_apply_sets(&p->cfg, "--set", p->a->sets, p->a->n_sets, p->st))
        return p->st->code;
    if (dm_config_validate(&p->cfg, err, sizeof err))
        return dm_fail(p->st, DM_JOB_BAD_INPUT, "invalid config: %s", err);
    p->threads = dm_step_threads(&p->cfg, NULL);
    return 0;
}

/* The figure rows of mem, and the saved activations under each checkpointing mode. */
static void print_figures(plan_ctx *p, const dm_memory *mem, const dm_memory *mode) {
    char line[1024];
    dm_job_note(p->io, "  %-22s %12s\n", "memory", "MiB");
    const struct { const char *name; size_t v; int always; } rows[] = {
        {"parameters", mem->params, 1},          {"parameters, bf16 copy", mem->params_bf16, 0},
        {"gradients", mem->grads, 1},            {"optimizer state", mem->optimizer, 1},
        {"optimizer scratch", mem->optimizer_scratch, 1},
        {"gradient sum", mem->exchange, 0},
        {"saved activations", mem->saved, 1},    {"recompute workspace", mem->recompute, 1},
        {"scratch", mem->scratch, 1},            {"verify room", mem->verify, 0},
        {"bf16 operands (at most)", mem->products, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].v || rows[i].always)
            dm_job_note(p->io, "  %-22s %12.1f\n", rows[i].name, rows[i].v / MIB);
    dm_job_note(p->io, "  %-22s %12.1f  (%.2f GiB)\n", "total", dm_memory_total(mem) / MIB,
                dm_memory_total(mem) / (MIB * 1024));
    size_t used = (size_t)snprintf(line, sizeof line, "saved activations by checkpointing:");
    for (int k = 0; k < 3 && used < sizeof line; k++)
        used += (size_t)snprintf(line + used, sizeof line - used, "%s %s %.1f MiB (%.0f%%)",
                                 k ? "," : "", ckpt_name(k), mode[k].saved / MIB,
                                 100.0 * mode[k].saved / (double)mode[0].saved);
    dm_job_note(p->io, "%s\n", line);
}

/* The figures: the planned ones (parameters, gradients and the arena from the config
 * alone), the saved activations under each checkpointing mode, and with the optimizer and
 * the step built what they allocate. A plan that does not fit the machine is shown (the
 * optimizer's state at its least) and refused before anything is allocated. */
static int figures(plan_ctx *p) {
    const dm_config *c = &p->cfg;
    char err[DM_ERRLEN];
    dm_memory mem, mode[3];
    int B = c->batch_size, T = c->seq_len;
    for (int k = 0; k < 3; k++) {
        dm_config ck = *c;
        ck.checkpointing = k;
        if (dm_memory_plan(&ck, B, T, p->threads, &mode[k], err, sizeof err))
            return dm_fail(p->st, DM_JOB_BAD_INPUT, "%s", err);
    }
    mem = mode[c->checkpointing];
    dm_job_note(p->io, "dormouse plan: %s mixer, d_model %d, %d layer%s, %d head%s x %d, %zu "
                "parameters; batch %d x %d; checkpointing %s; %d thread%s\n",
                c->mixer == DM_MIXER_KDA ? "kda" : "gdn", c->d_model, c->n_layer,
                c->n_layer == 1 ? "" : "s", c->n_head, c->n_head == 1 ? "" : "s", c->head_dim,
                mem.params / sizeof(float), B, T, ckpt_name(c->checkpointing), p->threads,
                p->threads == 1 ? "" : "s");
    dm_memory least;
    if (dm_memory_fits(c, B, T, p->threads, &least, p->st)) {
        print_figures(p, &least, mode);
        return p->st->code;
    }
    p->m = dm_model_create_threads(c, p->threads, err, sizeof err);
    if (!p->m) return dm_fail(p->st, DM_JOB_FAILED, "%s", err);
    p->o = dm_optim_create(p->m, c, err, sizeof err);
    if (!p->o) return dm_fail(p->st, DM_JOB_FAILED, "%s", err);
    if (dm_stepper_init(&p->step, p->m, p->o, c, NULL, err, sizeof err))
        return dm_fail(p->st, DM_JOB_FAILED, "%s", err);
    dm_memory_add_step(&mem, p->o, p->step.gs);
    print_figures(p, &mem, mode);
    return 0;
}

/* reps timed training steps (every micro-batch's forward and backward, their sum, the
 * optimizer update; the batch drawn apart) after a warm-up, on bytes from the seeded
 * generator; the peak RSS */
static int timed(plan_ctx *p) {
    const dm_config *c = &p->cfg;
    int B = c->batch_size, T = c->seq_len, A = c->grad_accum, reps = p->a->reps;
    char err[DM_ERRLEN];
    size_t nt = (size_t)A * B * (T + 1);
    p->corpus = (dm_corpus){.bytes = malloc(nt), .n = nt, .train_n = nt, .n_files = 1};
    p->corpus.train = p->corpus.bytes;
    p->t = calloc((size_t)reps, sizeof *p->t);
    if (!p->corpus.bytes || !p->t)
        return dm_fail(p->st, DM_JOB_FAILED, "out of memory for the batch");
    dm_rng r;
    dm_rng_seed(&r, c->seed, 0x706c616e); /* "plan" */
    for (size_t i = 0; i < nt; i++) p->corpus.bytes[i] = (uint8_t)dm_rng_below(&r, 256);
    if (dm_model_reserve(p->m, B, T, err, sizeof err))
        return dm_fail(p->st, DM_JOB_FAILED, "%s", err);
    /* a vocabulary of tokens: ids of its width drawn below it, one batch for every step */
    int w = dm_id_width(c->vocab);
    uint8_t *ids = w > 1 ? malloc(nt * (size_t)w) : NULL;
    if (w > 1 && !ids) return dm_fail(p->st, DM_JOB_FAILED, "out of memory for the batch");
    for (size_t i = 0; ids && i < nt; i++) {
        uint32_t id = (uint32_t)dm_rng_below(&r, (uint64_t)c->vocab);
        if (w == 2) ((uint16_t *)ids)[i] = (uint16_t)id;
        else ((uint32_t *)ids)[i] = id;
    }
    int bad = 0;
    for (int i = -1; i < reps && !bad; i++) {
        dm_step_out so;
        if (ids ? dm_stepper_step(&p->step, ids, i + 1, &so)
                : dm_stepper_run(&p->step, &p->corpus, c->seed, 0, i + 1, &so))
            bad = dm_fail(p->st, DM_JOB_FAILED, "an exchange failed at step %d", i + 2);
        else if (!isfinite(so.loss) || !isfinite(so.gnorm))
            bad = dm_fail(p->st, DM_JOB_FAILED, "%s is %g at step %d",
                          isfinite(so.loss) ? "gradient norm" : "loss",
                          isfinite(so.loss) ? so.gnorm : so.loss, i + 2);
        else if (i >= 0) p->t[i] = so.t_fwd + so.t_bwd + so.t_opt;
        if (!bad && dm_job_stopped(p->io))
            bad = dm_fail(p->st, DM_JOB_INTERRUPTED, "interrupted after %d of %d steps", i + 2,
                          reps + 1);
    }
    free(ids);
    if (bad) return bad;
    double spread, med = dm_median(p->t, reps, &spread);
    char dur[32];
    dm_fmt_duration(dur, sizeof dur, med * c->steps);
    char acc[96] = "";
    if (A > 1) snprintf(acc, sizeof acc, " of %d micro-batches of %d x %d and the update", A,
                        B, T);
    dm_job_note(p->io, "time: %d step%s%s after a warm-up: %.1f ms/step (median; spread %.1f), "
                "%.0f tokens/s; steps=%d take about %s (evaluation apart)\n", reps,
                reps == 1 ? "" : "s", acc, 1e3 * med, 1e3 * spread, (double)A * B * T / med,
                c->steps, dur);
    size_t rss = dm_peak_rss_bytes();
    if (rss) dm_job_note(p->io, "peak resident memory: %.1f MiB (%.2f GiB; the whole process)\n",
                         rss / MIB, rss / (MIB * 1024));
    return 0;
}

dm_status dm_plan_job(const dm_plan_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    plan_ctx p = {.a = a, .io = io, .st = &st};
    if (!plan_config(&p) && !figures(&p) && a->reps > 0) timed(&p);
    dm_corpus_free(&p.corpus);
    free(p.t);
    dm_stepper_free(&p.step);
    dm_optim_free(p.o);
    dm_model_free(p.m);
    return st;
}
