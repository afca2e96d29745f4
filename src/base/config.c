/* config.c — the config keys: one table gives each key's name, group, type, range,
 * accepted values and help. --set, JSON config files, config.json in a run directory,
 * checkpoint metadata, the "model keys cannot change" check and `dormouse train --help`
 * all go through it. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/num.h"
#include "base/text.h"
#include "dormouse.h"

enum { K_INT, K_LONG, K_U64, K_FLOAT, K_BOOL, K_ENUM, K_SECONDS, K_WINDOWS };

typedef struct {
    const char *name;
    int group;           /* DM_KEY_MODEL | DM_KEY_TRAINING | DM_KEY_BACKEND */
    int type;
    size_t off;
    double lo, hi;       /* inclusive range for numbers */
    const char *choices; /* K_ENUM: names separated by '|', in enum order */
    const char *help;
} key_t_;

#define F(field) offsetof(dm_config, field)
static const key_t_ KEYS[] = {
    /* model */
    {"d_model", DM_KEY_MODEL, K_INT, F(d_model), 1, 65536, NULL, "residual width"},
    {"n_layer", DM_KEY_MODEL, K_INT, F(n_layer), 1, 1024, NULL, "number of blocks"},
    {"n_head", DM_KEY_MODEL, K_INT, F(n_head), 1, 1024, NULL, "delta-rule heads"},
    {"head_dim", DM_KEY_MODEL, K_INT, F(head_dim), 1, 1024, NULL,
     "key/value dim per head; n_head*head_dim must equal d_model"},
    {"gate_rank", DM_KEY_MODEL, K_INT, F(gate_rank), 1, 65536, NULL,
     "rank of the KDA gate (W_f1,W_f2) and output gate (W_g1,W_g2) projections"},
    {"conv_size", DM_KEY_MODEL, K_INT, F(conv_size), 1, 64, NULL,
     "width of the causal conv on q, k, v"},
    {"mixer", DM_KEY_MODEL, K_ENUM, F(mixer), 0, 0, "kda|gdn",
     "token mixer: kda (per-channel gate) or gdn (scalar gate)"},
    {"gate_lower_bound", DM_KEY_MODEL, K_FLOAT, F(gate_lower_bound), -100, 0, NULL,
     "0: softplus gate; < 0: g = lb*sigmoid(...) bounded in (lb, 0)"},
    {"tie_embeddings", DM_KEY_MODEL, K_BOOL, F(tie_embeddings), 0, 1, NULL,
     "lm_head shares the embedding table"},
    {"vocab", DM_KEY_MODEL, K_INT, F(vocab), 256, 1 << 24, NULL,
     "token ids the embedding and head cover: 256 the bytes; a token data directory sets "
     "its tokenizer's (an explicit other value is an error)"},
    /* run: training and backend keys */
    {"seed", DM_KEY_TRAINING, K_U64, F(seed), 0, 9007199254740991.0, NULL,
     "seed of init, batches and sampling"},
    {"batch_size", DM_KEY_TRAINING, K_INT, F(batch_size), 1, 1 << 20, NULL,
     "sequences per micro-batch (one forward and backward)"},
    {"grad_accum", DM_KEY_TRAINING, K_INT, F(grad_accum), 1, 1 << 20, NULL,
     "micro-batches per optimizer step: the step's batch is batch_size x grad_accum "
     "sequences (under mpirun a multiple of the processes, which share them)"},
    {"seq_len", DM_KEY_TRAINING, K_INT, F(seq_len), 1, 1 << 24, NULL,
     "bytes per training sequence"},
    {"steps", DM_KEY_TRAINING, K_INT, F(steps), 1, 1 << 30, NULL, "optimizer steps"},
    {"time_budget", DM_KEY_TRAINING, K_SECONDS, F(time_budget), 0, 1e7, NULL,
     "wall clock of a fresh run (e.g. 5m, 1h30m, 90s), evaluation included: steps is fixed "
     "after the warmup's first steps (at most 64) from their rate (or at a stop before), cut "
     "(with a cooldown, schedule_steps) when the machine slows and grown back up to the plan "
     "when it recovers; 0 = off"},
    {"schedule_steps", DM_KEY_TRAINING, K_INT, F(schedule_steps), 0, 1 << 30, NULL,
     "the steps the lr schedule was planned over when a time budget cut the run: that "
     "schedule, then a linear cooldown over the last tenth of steps; 0 = steps"},
    {"lr", DM_KEY_TRAINING, K_FLOAT, F(lr), 0, 10, NULL, "peak learning rate of AdamW parameters"},
    {"muon_lr", DM_KEY_TRAINING, K_FLOAT, F(muon_lr), 0, 10, NULL,
     "peak learning rate of Muon matrices"},
    {"weight_decay", DM_KEY_TRAINING, K_FLOAT, F(weight_decay), 0, 10, NULL,
     "decoupled weight decay on matrices (times the base lr)"},
    {"beta1", DM_KEY_TRAINING, K_FLOAT, F(beta1), 0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", DM_KEY_TRAINING, K_FLOAT, F(beta2), 0, 0.999999, NULL, "AdamW beta2"},
    {"adam_eps", DM_KEY_TRAINING, K_FLOAT, F(adam_eps), 0, 1, NULL,
     "AdamW epsilon, above 0 (at 0 a parameter whose gradient is 0 gets 0/0)"},
    {"muon_momentum", DM_KEY_TRAINING, K_FLOAT, F(muon_momentum), 0, 0.999999, NULL,
     "Muon momentum (Nesterov)"},
    {"warmup_steps", DM_KEY_TRAINING, K_INT, F(warmup_steps), 0, 1 << 30, NULL,
     "linear warmup steps"},
    {"lr_schedule", DM_KEY_TRAINING, K_ENUM, F(lr_schedule), 0, 0, "cosine|wsd|constant",
     "decay after warmup: cosine, wsd (flat then linear decay over the last 20%), constant"},
    {"min_lr_frac", DM_KEY_TRAINING, K_FLOAT, F(min_lr_frac), 0, 1, NULL,
     "final lr as a fraction of the peak"},
    {"grad_clip", DM_KEY_TRAINING, K_FLOAT, F(grad_clip), 0, 1e9, NULL,
     "clip the global gradient norm; 0 = off"},
    {"eval_every", DM_KEY_TRAINING, K_INT, F(eval_every), 0, 1 << 30, NULL,
     "steps between evaluations; 0 = only at the end"},
    {"eval_window", DM_KEY_TRAINING, K_LONG, F(eval_window), 2, 1e15, NULL,
     "validation bytes: the last bytes of the corpus"},
    {"eval_windows", DM_KEY_TRAINING, K_WINDOWS, F(eval_windows), 0, 1e9, NULL,
     "validation windows of eval_window bytes: 1 = the last ones; N = N fixed windows drawn "
     "from the validation set (the same every run); all = all of it (docs/data.md)"},
    {"log_every", DM_KEY_TRAINING, K_INT, F(log_every), 1, 1 << 30, NULL,
     "steps between metrics lines"},
    {"ckpt_every", DM_KEY_TRAINING, K_INT, F(ckpt_every), 0, 1 << 30, NULL,
     "steps between checkpoints; 0 = only at the end (and every ckpt_time)"},
    {"ckpt_time", DM_KEY_TRAINING, K_SECONDS, F(ckpt_time), 0, 1e7, NULL,
     "wall clock between checkpoints (e.g. 5m, 90s); 0 = off"},
    {"kda_impl", DM_KEY_BACKEND, K_ENUM, F(kda_impl), 0, 0, "auto|chunked|reference",
     "delta-rule core: auto (fused where supported), chunked, reference"},
    {"gemm", DM_KEY_BACKEND, K_ENUM, F(gemm), 0, 0, "auto|openblas|onednn",
     "GEMM backend of the matrix products: auto (the measured rule in docs/ops.md), openblas, "
     "onednn"},
    {"precision", DM_KEY_BACKEND, K_ENUM, F(precision), 0, 0, "auto|fp32|bf16",
     "matrix products: fp32, bf16 (operands rounded to bf16, f32 accumulation; on the cpu "
     "needs avx512_bf16 or amx_bf16; on cuda the delta core's chunk products too), auto "
     "(bf16 where the CPU has it; fp32 on cuda)"},
    {"chunk_size", DM_KEY_BACKEND, K_INT, F(chunk_size), 16, 64, NULL,
     "chunk of the fused core: 16, 32 or 64"},
    {"norm_impl", DM_KEY_BACKEND, K_ENUM, F(norm_impl), 0, 0, "auto|fused|reference",
     "RMSNorm and gated norm: auto (fused), fused, reference (composed, slow)"},
    {"verify_fused", DM_KEY_BACKEND, K_INT, F(verify_fused), 0, 1 << 30, NULL,
     "every N steps run fused and reference and compare; 0 = off"},
    {"optimizer", DM_KEY_TRAINING, K_ENUM, F(optimizer), 0, 0, "muon|adamw",
     "muon: Muon on hidden matrices + AdamW on the rest; adamw: AdamW on all"},
    {"ns", DM_KEY_TRAINING, K_ENUM, F(ns), 0, 0, "quintic5|polar5",
     "Newton-Schulz schedule of Muon"},
    {"ns_precision", DM_KEY_BACKEND, K_ENUM, F(ns_precision), 0, 0, "auto|fp32|bf16",
     "Newton-Schulz products: fp32, bf16 (operands rounded to bf16, f32 accumulation; on the "
     "cpu needs avx512_bf16 or amx_bf16), auto (bf16 where the CPU has it; fp32 on cuda)"},
    {"ns_headwise", DM_KEY_TRAINING, K_ENUM, F(ns_headwise), 0, 0, "qk|none",
     "orthogonalize W_q, W_k per head (one batched NS) or as whole matrices"},
    {"muon_norm", DM_KEY_TRAINING, K_ENUM, F(muon_norm), 0, 0, "none|neuron",
     "normalisation of Muon's orthogonalized update: none, or neuron (NorMuon: each output "
     "row divided by the root of its second moment, the slice's norm kept; docs/muon.md)"},
    {"normuon_beta2", DM_KEY_TRAINING, K_FLOAT, F(normuon_beta2), 0, 0.999999, NULL,
     "decay of NorMuon's per-row second moment (muon_norm=neuron)"},
    {"cautious_wd", DM_KEY_TRAINING, K_BOOL, F(cautious_wd), 0, 1, NULL,
     "cautious weight decay: decay a weight only where its update has the weight's sign "
     "(Muon and AdamW groups)"},
    {"retract", DM_KEY_TRAINING, K_ENUM, F(retract), 0, 0, "sphere|stiefel|off",
     "retraction of Muon matrices after the update"},
    {"retract_every", DM_KEY_TRAINING, K_INT, F(retract_every), 1, 1 << 30, NULL,
     "retract on steps where step % N == 0"},
    {"checkpointing", DM_KEY_BACKEND, K_ENUM, F(checkpointing), 0, 0, "none|balanced|full",
     "activations the backward recomputes: none, balanced (the memory-bound ops), full (each "
     "residual branch from its input); the same results"},
    {"threads", DM_KEY_BACKEND, K_INT, F(threads), 0, 4096, NULL, "threads; 0 = all cores"},
    {"atlas", DM_KEY_BACKEND, K_BOOL, F(atlas), 0, 1, NULL,
     "time every stage and op and print the step atlas"},
    {"backend", DM_KEY_BACKEND, K_ENUM, F(backend), 0, 0, "auto|cpu|fenced|cuda",
     "where the model's memory lives and its ops run: auto (cpu; the start says why not "
     "cuda), cpu, fenced (test only: the CPU kernels on memory the host cannot touch outside "
     "the backend's calls), cuda (an NVIDIA GPU: refused at start with the reason where none "
     "answers; its code has run on the CUDA emulator only)"},
    {"device", DM_KEY_BACKEND, K_INT, F(device), 0, 1023, NULL,
     "the CUDA device (index) of backend=cuda"},
    {"comm_timeout", DM_KEY_BACKEND, K_SECONDS, F(comm_timeout), 0, 1e7, NULL,
     "under mpirun, how long an exchange between the ranks may wait (e.g. 90s, 10m): past "
     "it the job stops with an error naming the rank that does not answer; 0 = no limit"},
    {"step_graph", DM_KEY_BACKEND, K_ENUM, F(step_graph), 0, 0, "auto|off",
     "auto: on a backend that queues its work (cuda), a training step's forward, backward "
     "and update are each captured once as a graph and replayed (one launch each) from the "
     "third step on; off: every kernel launched every step"},
};
#undef F
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

/* The keys whose range is open at lo: the value, as the float it is stored in, must be
 * above it (adam_eps: 0, -0 and 1e-400, which is 0 as a float, are refused). */
static int lo_open(const key_t_ *k) { return k->off == offsetof(dm_config, adam_eps); }

void dm_config_default(dm_config *c) {
    memset(c, 0, sizeof *c);
    c->d_model = 256;
    c->n_layer = 2;
    c->n_head = 4;
    c->head_dim = 64;
    c->gate_rank = 64;
    c->conv_size = 4;
    c->mixer = DM_MIXER_KDA;
    c->gate_lower_bound = 0.0f;
    c->tie_embeddings = 0;
    c->vocab = DM_VOCAB;
    c->seed = 1;
    c->batch_size = 8;
    c->grad_accum = 1;
    c->seq_len = 512;
    c->steps = 1000;
    c->lr = 3e-3f;
    c->muon_lr = 0.02f;
    c->weight_decay = 0.0f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->adam_eps = 1e-8f;
    c->muon_momentum = 0.95f;
    c->warmup_steps = 50;
    c->lr_schedule = DM_SCHED_COSINE;
    c->min_lr_frac = 0.1f;
    c->grad_clip = 1.0f;
    c->eval_every = 250;
    c->eval_window = 81920;
    c->eval_windows = 1;
    c->log_every = 10;
    c->ckpt_every = 0;
    /* a kill loses at most 5 minutes; a d2 checkpoint costs well under 1% of that */
    c->ckpt_time = 300;
    c->kda_impl = DM_IMPL_AUTO;
    c->gemm = DM_GEMM_AUTO;
    /* auto (bf16 where the CPU has it): at the make-run budget bf16 products and bf16
     * Newton-Schulz reach fp32's validation BPB within the controls' spread, in less time
     * per step (docs/defaults.md) */
    c->precision = DM_PRECISION_AUTO;
    /* 32, not 64: on the CPU the chunked KDA core is faster at chunk 32 than at 64 at
     * short and long sequences (bench_delta), equally accurate; 64 suits GPUs
     * (docs/defaults.md) */
    c->chunk_size = 32;
    c->norm_impl = DM_IMPL_AUTO;
    c->verify_fused = 0;
    c->optimizer = DM_OPT_MUON;
    c->ns = DM_NS_QUINTIC5;
    c->ns_headwise = DM_HEADWISE_QK;
    c->ns_precision = DM_PRECISION_AUTO;
    /* NorMuon and cautious decay off: at the make-run budget neither, nor both, beat plain
     * Muon beyond the seeds' spread (docs/defaults.md) */
    c->muon_norm = DM_MUON_NORM_NONE;
    c->normuon_beta2 = 0.95f;
    c->cautious_wd = 0;
    /* retraction off: at the make-run budget Muon without retraction beats sphere and
     * stiefel beyond every spread (docs/defaults.md) */
    c->retract = DM_RETRACT_OFF;
    c->retract_every = 1;
    c->checkpointing = DM_CKPT_NONE;
    c->threads = 0;
    c->atlas = 0;
    /* minutes: longer than any exchange of a healthy run (a checkpoint of rank 0, a
     * corpus read, an evaluation all finish inside it), short enough to end a hung job */
    c->comm_timeout = 600;
    c->step_graph = DM_GRAPH_AUTO;
}

int dm_config_mlp_hidden(const dm_config *c) {
    int h = (8 * c->d_model) / 3;
    return 256 * ((h + 255) / 256);
}

static const key_t_ *find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

const char *dm_config_key_name(int i) { return i >= 0 && i < NKEYS ? KEYS[i].name : NULL; }
const char *dm_config_key_help(int i) { return i >= 0 && i < NKEYS ? KEYS[i].help : NULL; }
int dm_config_key_group(int i) { return i >= 0 && i < NKEYS ? KEYS[i].group : -1; }

const char *dm_config_group_name(int group) {
    switch (group) {
    case DM_KEY_MODEL: return "model";
    case DM_KEY_TRAINING: return "training";
    case DM_KEY_BACKEND: return "backend";
    }
    return NULL;
}

int dm_config_is_model_key(const char *key) {
    const key_t_ *k = find_key(key);
    return k && k->group == DM_KEY_MODEL;
}

/* index of name within "a|b|c", or -1 */
static int choice_index(const char *choices, const char *name) {
    int idx = 0;
    size_t n = strlen(name);
    for (const char *p = choices;; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return idx;
        if (!bar) return -1;
        p = bar + 1;
    }
}

static void choice_name(const char *choices, int idx, char *buf, size_t buflen) {
    const char *p = choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) { snprintf(buf, buflen, "%d", idx); return; }
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    snprintf(buf, buflen, "%.*s", (int)len, p);
}

static void accepts(const key_t_ *k, char *buf, size_t n) {
    switch (k->type) {
    case K_ENUM: snprintf(buf, n, "one of %s", k->choices); break;
    case K_BOOL: snprintf(buf, n, "true|false|1|0"); break;
    case K_U64: snprintf(buf, n, "an integer in [0, %.0f]", k->hi); break;
    case K_FLOAT: snprintf(buf, n, "a decimal number in %c%g, %g]", lo_open(k) ? '(' : '[', k->lo, k->hi); break;
    case K_SECONDS: snprintf(buf, n, "a duration up to %.0f s: seconds, or e.g. 90s, 5m, 1h30m", k->hi); break;
    case K_WINDOWS: snprintf(buf, n, "all or an integer in [1, %.0f]", k->hi); break;
    default: snprintf(buf, n, "an integer in [%.0f, %.0f]", k->lo, k->hi); break;
    }
}

int dm_config_set(dm_config *c, const char *key, const char *value, char *err, size_t errlen) {
    const key_t_ *k = find_key(key);
    char pk[64], pv[64]; /* quoted on one line */
    if (!k) {
        const char *names[NKEYS], *near;
        for (int i = 0; i < NKEYS; i++) names[i] = KEYS[i].name;
        near = dm_nearest(key, names, NKEYS);
        if (err && near)
            snprintf(err, errlen, "unknown config key '%s': did you mean '%s'? (see `dormouse "
                     "train --help`)", dm_printable(key, pk, sizeof pk), near);
        else if (err)
            snprintf(err, errlen, "unknown config key '%s' (see `dormouse train --help`)",
                     dm_printable(key, pk, sizeof pk));
        return 1;
    }
    char acc[96];
    accepts(k, acc, sizeof acc);
    void *p = (char *)c + k->off;
    switch (k->type) {
    case K_ENUM: {
        int i = choice_index(k->choices, value);
        if (i < 0) goto bad;
        *(int *)p = i;
        return 0;
    }
    case K_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "1")) *(int *)p = 1;
        else if (!strcmp(value, "false") || !strcmp(value, "0")) *(int *)p = 0;
        else goto bad;
        return 0;
    case K_U64: {
        uint64_t v;
        if (dm_parse_u64(value, &v) || (double)v > k->hi) goto bad;
        *(uint64_t *)p = v;
        return 0;
    }
    case K_FLOAT: {
        double v;
        if (dm_parse_real(value, &v) || v < k->lo || v > k->hi ||
            (lo_open(k) && !((float)v > k->lo)))
            goto bad;
        *(float *)p = (float)v;
        return 0;
    }
    case K_SECONDS: {
        long long v;
        if (dm_parse_duration(value, (long long)k->hi, &v)) goto bad;
        *(long *)p = (long)v;
        return 0;
    }
    default: {
        long long v;
        if (k->type == K_WINDOWS && !strcmp(value, "all")) v = 0; /* "all" is stored as 0 */
        else if (dm_parse_int(value, k->type == K_WINDOWS ? 1 : (long long)k->lo,
                              (long long)k->hi, &v))
            goto bad;
        if (k->type == K_INT) *(int *)p = (int)v;
        else *(long *)p = (long)v;
        return 0;
    }
    }
bad:
    if (err)
        snprintf(err, errlen, "bad value '%s' for key '%s': expected %s",
                 dm_printable(value, pv, sizeof pv), key, acc);
    return 1;
}

int dm_config_get(const dm_config *c, const char *key, char *buf, size_t buflen) {
    const key_t_ *k = find_key(key);
    if (!k) return 1;
    const void *p = (const char *)c + k->off;
    switch (k->type) {
    case K_ENUM: choice_name(k->choices, *(const int *)p, buf, buflen); break;
    case K_BOOL: snprintf(buf, buflen, "%s", *(const int *)p ? "true" : "false"); break;
    case K_U64: snprintf(buf, buflen, "%" PRIu64, *(const uint64_t *)p); break;
    case K_FLOAT: { /* the shortest text that reads back as the same float */
        float v = *(const float *)p;
        for (int prec = 6; prec <= 9; prec++) {
            snprintf(buf, buflen, "%.*g", prec, (double)v);
            if (strtof(buf, NULL) == v) break;
        }
        break;
    }
    case K_LONG:
    case K_SECONDS: snprintf(buf, buflen, "%ld", *(const long *)p); break;
    case K_WINDOWS:
        if (*(const long *)p == 0) snprintf(buf, buflen, "all");
        else snprintf(buf, buflen, "%ld", *(const long *)p);
        break;
    default: snprintf(buf, buflen, "%d", *(const int *)p); break;
    }
    return 0;
}

int dm_config_validate(const dm_config *c, char *err, size_t errlen) {
    char acc[96];
    /* every key within its own range */
    for (int i = 0; i < NKEYS; i++) {
        const key_t_ *k = &KEYS[i];
        const void *p = (const char *)c + k->off;
        double v;
        switch (k->type) {
        case K_U64: v = (double)*(const uint64_t *)p; break;
        case K_FLOAT: v = *(const float *)p; break;
        case K_LONG:
        case K_WINDOWS:
        case K_SECONDS: v = (double)*(const long *)p; break;
        case K_ENUM: {
            int n = 1;
            for (const char *s = k->choices; *s; s++) n += *s == '|';
            v = *(const int *)p;
            if (v < 0 || v >= n) goto bad;
            continue;
        }
        default: v = *(const int *)p; break;
        }
        if (!(v >= k->lo && v <= k->hi) || (lo_open(k) && !(v > k->lo))) {
        bad:
            accepts(k, acc, sizeof acc);
            if (err) snprintf(err, errlen, "%s: out of range (expected %s)", k->name, acc);
            return 1;
        }
    }
    /* relations between keys */
    if (c->n_head * c->head_dim != c->d_model) {
        if (err)
            snprintf(err, errlen, "head_dim: n_head*head_dim (%d*%d = %d) must equal d_model (%d)",
                     c->n_head, c->head_dim, c->n_head * c->head_dim, c->d_model);
        return 1;
    }
    /* the ops take their row counts as int: B*T rows of the model, B*T*n_head of the heads */
    double rows = (double)c->batch_size * c->seq_len * c->n_head;
    if (rows > 2147483647.0) {
        if (err)
            snprintf(err, errlen, "seq_len: batch_size*seq_len*n_head (%d*%d*%d = %.0f) must be "
                     "at most 2147483647", c->batch_size, c->seq_len, c->n_head, rows);
        return 1;
    }
    if ((long long)c->batch_size * c->grad_accum > (1 << 20)) {
        if (err)
            snprintf(err, errlen, "grad_accum: the step's batch, batch_size x grad_accum (%d x "
                     "%d), must be at most %d sequences", c->batch_size, c->grad_accum, 1 << 20);
        return 1;
    }
    if (c->time_budget > 0 && c->warmup_steps < 1) {
        if (err)
            snprintf(err, errlen, "time_budget: measures the steps of the warmup (their learning "
                     "rates do not depend on steps): warmup_steps must be at least 1");
        return 1;
    }
    if (c->schedule_steps != 0 && c->schedule_steps < c->steps) {
        if (err)
            snprintf(err, errlen, "schedule_steps: must be 0 or at least steps (%d < %d); with "
                     "more steps set schedule_steps=0", c->schedule_steps, c->steps);
        return 1;
    }
    if (c->muon_norm != DM_MUON_NORM_NONE && c->optimizer != DM_OPT_MUON) {
        if (err)
            snprintf(err, errlen, "muon_norm: normalizes Muon's update, and optimizer=adamw "
                     "has none (set muon_norm=none or optimizer=muon)");
        return 1;
    }
    if (c->chunk_size != 16 && c->chunk_size != 32 && c->chunk_size != 64) {
        if (err) snprintf(err, errlen, "chunk_size: must be 16, 32 or 64 (got %d)", c->chunk_size);
        return 1;
    }
    return 0;
}

char *dm_config_to_json(const dm_config *c) {
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    for (int i = 0; i < NKEYS; i++) {
        const key_t_ *k = &KEYS[i];
        dm_config_get(c, k->name, buf, sizeof buf);
        /* numbers as JSON numbers: integers (the seed too, kept within 2^53 so that every
         * JSON reader reads it exactly), floats in their shortest exact form */
        if (k->type == K_ENUM || (k->type == K_WINDOWS && !strcmp(buf, "all")))
            cJSON_AddStringToObject(o, k->name, buf);
        else if (k->type == K_BOOL) cJSON_AddBoolToObject(o, k->name, *(const int *)((const char *)c + k->off));
        else cJSON_AddRawToObject(o, k->name, buf);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/* ---- the JSON text of a config ------------------------------------------------------
 * One object of keys, read here rather than through cJSON so that every value reaches
 * dm_config_set as the text the file spells (the one parser of --set: `1e2` or `64.0` for
 * an integer is refused as on the command line, never rounded first) and so that nothing
 * is read past: a BOM, a NUL byte (\u0000 in a key or value), text after the object. A
 * value's JSON type must suit its key (wants, below). */

typedef struct {
    const char *s, *p; /* the text, the position */
    char *err;
    size_t errlen;
} jtext;

static int jfail(jtext *j, const char *what) {
    if (j->err) snprintf(j->err, j->errlen, "config: %s (at byte %zu)", what, (size_t)(j->p - j->s));
    return 1;
}

static void jspace(jtext *j) {
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* four hex digits at p into *u; 0 ok */
static int hex4(const char *p, unsigned *u) {
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return 1;
        *u = *u << 4 | (unsigned)h;
    }
    return 0;
}

/* A JSON string at j->p into out (UTF-8, NUL-terminated, at most n - 1 bytes). */
static int jstring(jtext *j, char *out, size_t n) {
    size_t k = 0;
    if (*j->p != '"') return jfail(j, "expected a string");
    j->p++;
    for (;;) {
        unsigned char c = (unsigned char)*j->p;
        unsigned u;
        if (c == '"') break;
        if (c < 0x20) return jfail(j, c ? "a control character in a string" : "unterminated string");
        j->p++;
        if (c == '\\') {
            char e = *j->p++;
            switch (e) {
            case '"': case '\\': case '/': c = (unsigned char)e; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: c = 0; break;
            }
            if (c) {
            } else if (e == 'u' && !hex4(j->p, &u)) {
                j->p += 4;
                if (u >= 0xD800 && u < 0xDC00) { /* a surrogate pair */
                    unsigned lo;
                    if (j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) || lo < 0xDC00 ||
                        lo > 0xDFFF)
                        return jfail(j, "a lone surrogate in a \\u escape");
                    j->p += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return jfail(j, "a lone surrogate in a \\u escape");
                }
                if (u == 0) return jfail(j, "a NUL character (\\u0000) in a string");
                char b[4];
                int len = u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4;
                static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
                for (int i = len - 1; i > 0; i--, u >>= 6) b[i] = (char)(0x80 | (u & 0x3F));
                b[0] = (char)(lead[len] | u);
                if (k + (size_t)len >= n) return jfail(j, "a string too long");
                memcpy(out + k, b, (size_t)len);
                k += (size_t)len;
                continue;
            } else {
                return jfail(j, "a bad escape in a string");
            }
        }
        if (k + 1 >= n) return jfail(j, "a string too long");
        out[k++] = (char)c;
    }
    j->p++;
    out[k] = 0;
    return 0;
}

/* A JSON number at j->p: its text (the grammar of JSON) into out. */
static int jnumber(jtext *j, char *out, size_t n) {
    const char *b = j->p, *p = b + (*b == '-');
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return jfail(j, "a bad number");
    if (*p == '.') {
        if (!(p[1] >= '0' && p[1] <= '9')) return jfail(j, "a bad number");
        for (p++; *p >= '0' && *p <= '9'; p++) {}
    }
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '+' || p[1] == '-');
        if (!(*p >= '0' && *p <= '9')) return jfail(j, "a bad number");
        while (*p >= '0' && *p <= '9') p++;
    }
    if ((size_t)(p - b) >= n) return jfail(j, "a number too long");
    memcpy(out, b, (size_t)(p - b));
    out[p - b] = 0;
    j->p = p;
    return 0;
}

enum { J_STRING, J_NUMBER, J_BOOL };

/* The JSON types a key's value may have: a choice a string, a boolean true or false, a
 * number a number or a string (the text of either read by the same rules; the seed of an
 * older dormouse's config.json is a string). */
static int wants(const key_t_ *k, int got) {
    switch (k->type) {
    case K_ENUM: return got == J_STRING;
    case K_BOOL: return got == J_BOOL;
    default: return got == J_STRING || got == J_NUMBER;
    }
}

int dm_config_from_json(dm_config *c, const char *json, char *err, size_t errlen) {
    jtext j = {json, json, err, errlen};
    const char *seen[NKEYS]; /* the keys seen, each a known one */
    int nseen = 0;
    if ((unsigned char)json[0] == 0xEF && (unsigned char)json[1] == 0xBB &&
        (unsigned char)json[2] == 0xBF)
        return jfail(&j, "the text starts with a byte-order mark; save the file as UTF-8 "
                     "without one");
    jspace(&j);
    if (*j.p != '{') return jfail(&j, "config is not a JSON object");
    j.p++;
    jspace(&j);
    int first = 1;
    while (*j.p != '}') {
        if (!first) {
            if (*j.p != ',') return jfail(&j, "expected ',' or '}'");
            j.p++;
            jspace(&j);
        }
        first = 0;
        char key[256], val[256], pk[64];
        if (jstring(&j, key, sizeof key)) return 1;
        jspace(&j);
        if (*j.p != ':') return jfail(&j, "expected ':'");
        j.p++;
        jspace(&j);
        int got;
        if (*j.p == '"') {
            if (jstring(&j, val, sizeof val)) return 1;
            got = J_STRING;
        } else if (!strncmp(j.p, "true", 4) || !strncmp(j.p, "false", 5)) {
            snprintf(val, sizeof val, "%s", *j.p == 't' ? "true" : "false");
            j.p += *j.p == 't' ? 4 : 5;
            got = J_BOOL;
        } else if (*j.p == '-' || (*j.p >= '0' && *j.p <= '9')) {
            if (jnumber(&j, val, sizeof val)) return 1;
            got = J_NUMBER;
        } else {
            if (err)
                snprintf(err, errlen, "config key '%s': expected a number, string or boolean",
                         dm_printable(key, pk, sizeof pk));
            return 1;
        }
        const key_t_ *k = find_key(key);
        if (k && !wants(k, got)) {
            static const char *const type[] = {"a string", "a number", "a boolean"};
            const char *need = k->type == K_ENUM ? "a string" : k->type == K_BOOL
                             ? "true or false" : "a number";
            if (err)
                snprintf(err, errlen, "config key '%s': expected %s, got %s", key, need,
                         type[got]);
            return 1;
        }
        for (int i = 0; i < nseen; i++)
            if (!strcmp(seen[i], key)) {
                if (err) snprintf(err, errlen, "config key '%s' appears twice", key);
                return 1;
            }
        if (dm_config_set(c, key, val, err, errlen)) return 1;
        seen[nseen++] = k->name; /* known: dm_config_set took it */
        jspace(&j);
    }
    j.p++;
    jspace(&j);
    if (*j.p) return jfail(&j, "text after the JSON object");
    return 0;
}

const char *dm_config_diff(const dm_config *a, const dm_config *b, unsigned groups, char *va,
                           char *vb, size_t n) {
    for (int i = 0; i < NKEYS; i++) {
        if (!(groups & (1u << KEYS[i].group))) continue;
        dm_config_get(a, KEYS[i].name, va, n);
        dm_config_get(b, KEYS[i].name, vb, n);
        if (strcmp(va, vb) != 0) return KEYS[i].name;
    }
    return NULL;
}

int dm_config_check_model(const dm_config *saved, const dm_config *asked, char *err,
                          size_t errlen) {
    char va[64], vb[64];
    const char *key = dm_config_diff(saved, asked, DM_KEYS_MODEL, va, vb, sizeof va);
    if (!key) return 0;
    if (err)
        snprintf(err, errlen, "checkpoint has %s=%s, the run asks for %s=%s (model keys cannot "
                 "change)", key, va, key, vb);
    return 1;
}
