/* dormouse.h — public C API of libdormouse.
 *
 * dormouse trains small byte-level language models whose token mixer is a gated delta
 * rule (KDA; GDN as its scalar-gate case). This header is the stable interface:
 * configuration, the model (one flat parameter buffer + a parameter table), forward and
 * backward on a batch of bytes, checkpoints, evaluation in bits per byte, training steps
 * (a model with its optimizer: dm_trainer), and the delta-rule core as standalone
 * functions. tests/api_client.c uses it as an installed library would be used.
 *
 * Conventions
 *   - All tensors are float32, row-major, contiguous. Shapes are written [a,b,c] with the
 *     last index fastest.
 *   - Functions that can fail return 0 on success and non-zero on failure, writing a
 *     one-line message into err (when err != NULL).
 */
#ifndef DORMOUSE_H
#define DORMOUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DM_VOCAB 256 /* the byte vocabulary: inputs and outputs are bytes (vocab=256) */

/* Token ids: a model of vocab V reads ids of dm_id_width(V) bytes each, little-endian as
 * the machine stores them: 1 (uint8_t, the bytes) for V <= 256, 2 (uint16_t) for
 * V <= 65536, else 4 (uint32_t). */
static inline int dm_id_width(int vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }
/* the i-th of ids of width w (0 is taken as 1) */
static inline uint32_t dm_id_at(const void *ids, int w, size_t i) {
    return w == 2 ? ((const uint16_t *)ids)[i] : w == 4 ? ((const uint32_t *)ids)[i]
                                                        : ((const uint8_t *)ids)[i];
}
#define DM_ERRLEN 256

/* ------------------------------------------------------------------------------------ */
/* Configuration                                                                         */
/* ------------------------------------------------------------------------------------ */

enum { DM_MIXER_KDA = 0, DM_MIXER_GDN = 1 };
enum { DM_IMPL_AUTO = 0, DM_IMPL_CHUNKED = 1, DM_IMPL_REFERENCE = 2 };
enum { DM_GEMM_AUTO = 0, DM_GEMM_OPENBLAS = 1, DM_GEMM_ONEDNN = 2 };
enum { DM_SCHED_COSINE = 0, DM_SCHED_WSD = 1, DM_SCHED_CONSTANT = 2 };
enum { DM_OPT_MUON = 0, DM_OPT_ADAMW = 1 };
enum { DM_NS_QUINTIC5 = 0, DM_NS_POLAR5 = 1 };
enum { DM_HEADWISE_QK = 0, DM_HEADWISE_NONE = 1 };
enum { DM_MUON_NORM_NONE = 0, DM_MUON_NORM_NEURON = 1 };
enum { DM_RETRACT_SPHERE = 0, DM_RETRACT_STIEFEL = 1, DM_RETRACT_OFF = 2 };
enum { DM_CKPT_NONE = 0, DM_CKPT_BALANCED = 1, DM_CKPT_FULL = 2 };
enum { DM_GRAPH_AUTO = 0, DM_GRAPH_OFF = 1 };
enum { DM_PRECISION_AUTO = 0, DM_PRECISION_FP32 = 1, DM_PRECISION_BF16 = 2 };
/* where a model's memory lives and its ops run (docs/backends.md): auto = cpu today;
 * fenced is test-only (the CPU kernels on memory the host cannot touch between calls) */
enum { DM_BACKEND_AUTO = 0, DM_BACKEND_CPU = 1, DM_BACKEND_FENCED = 2, DM_BACKEND_CUDA = 3 };

/* Every field is a config key of the same name (JSON file or --set key=value).
 * dm_config_default() gives the "d2" run. Each key belongs to one group:
 *   model     what the network is: the parameter layout and the function it computes;
 *             a checkpoint fixes these (resume, eval and sample refuse a change)
 *   training  how it is trained and evaluated (seed, batches, optimizer, schedule, ...)
 *   backend   how a step runs on this machine (kernels, threads, timing), not what it is */
typedef struct dm_config {
    /* model */
    int d_model;            /* residual width                                  (256) */
    int n_layer;            /* blocks                                          (2)   */
    int n_head;             /* delta-rule heads                                (4)   */
    int head_dim;           /* key/value dim per head; n_head*head_dim = mixer width (64) */
    int gate_rank;          /* rank of the KDA gate and output-gate projections (64) */
    int conv_size;          /* depthwise causal conv width on q, k, v          (4)   */
    int mixer;              /* DM_MIXER_KDA | DM_MIXER_GDN                     (kda) */
    float gate_lower_bound; /* 0 = softplus gate; lb < 0 = lb*sigmoid gate     (0)   */
    int tie_embeddings;     /* lm_head shares the embedding table              (0)   */
    int vocab;              /* token ids 0 .. vocab-1: 256 the bytes; more a
                               tokenizer's pieces (a token data directory's) (256) */
    /* run: training and backend keys */
    uint64_t seed;          /* init, batches, sampling                         (1)   */
    int batch_size;         /* sequences per micro-batch                       (8)   */
    int grad_accum;         /* micro-batches per step: the step's batch is
                               batch_size x grad_accum sequences               (1)   */
    int seq_len;            /* bytes per sequence                              (512) */
    int steps;              /* optimizer steps                                 (1000)*/
    int schedule_steps;     /* the steps the lr schedule was planned over, when a
                               time budget ended the run earlier: the schedule of
                               schedule_steps, then a linear cooldown to
                               min_lr_frac over the last tenth of steps; 0 = steps */
    long time_budget;       /* seconds of wall clock a fresh run fits (set-up,
                               steps, evaluation): fixes steps from the measured
                               rate; 0 = off                                   (0)   */
    float lr;               /* peak learning rate (AdamW side)                  */
    float muon_lr;          /* peak learning rate of Muon matrices              */
    float weight_decay;     /* decoupled, on matrices                           */
    float beta1, beta2;     /* AdamW betas                                      */
    float adam_eps;
    float muon_momentum;
    int warmup_steps;
    int lr_schedule;        /* DM_SCHED_*                                       */
    float min_lr_frac;      /* final lr as a fraction of peak                    */
    float grad_clip;        /* global-norm clip; 0 = off                         */
    int eval_every;         /* steps between evaluations; 0 = only at the end    */
    long eval_window;       /* validation bytes at the end of the corpus (81920) */
    long eval_windows;      /* validation windows of eval_window bytes: 1 the last
                               ones, N >= 2 fixed windows, 0 ("all") all of it (1) */
    int log_every;
    int ckpt_every;         /* steps between checkpoints; 0 = only at the end    */
    long ckpt_time;         /* seconds of wall clock between checkpoints; 0 = off (300) */
    int kda_impl;           /* DM_IMPL_*                                         */
    int gemm;               /* DM_GEMM_*: GEMM backend of the matrix products     */
    int precision;          /* DM_PRECISION_*: of the matrix products (fp32)      */
    int chunk_size;         /* 16 | 32 | 64                                      */
    int norm_impl;          /* DM_IMPL_AUTO | DM_IMPL_CHUNKED (= fused) | DM_IMPL_REFERENCE */
    int verify_fused;       /* every N steps run fused and reference; 0 = off    */
    int optimizer;          /* DM_OPT_*                                          */
    int ns;                 /* DM_NS_*                                           */
    int ns_headwise;        /* DM_HEADWISE_*                                     */
    int ns_precision;       /* DM_PRECISION_*: of the Newton-Schulz products (fp32) */
    int muon_norm;          /* DM_MUON_NORM_*: NorMuon's row normalisation   (none) */
    float normuon_beta2;    /* NorMuon's second-moment decay                 (0.95) */
    int cautious_wd;        /* 1: weight decay only where update and weight agree
                               in sign (Muon and AdamW)                         (0) */
    int retract;            /* DM_RETRACT_*                                      */
    int retract_every;      /* retract on steps where step % N == 0              (1) */
    int checkpointing;      /* activation checkpointing: DM_CKPT_NONE | _BALANCED | _FULL */
    int threads;            /* 0 = all cores                                      */
    int atlas;              /* print the step atlas                               */
    int backend;            /* DM_BACKEND_*: the model's memory and kernels      (auto) */
    int device;             /* the CUDA device of backend=cuda (and auto)       (0) */
    long comm_timeout;      /* seconds a collective between ranks may wait; 0 = no limit */
    int step_graph;         /* DM_GRAPH_*: a training step replayed as captured graphs
                               where the backend can (auto)                          */
} dm_config;

void dm_config_default(dm_config *c);
/* 0 if valid; else writes "field: reason" into err. */
int dm_config_validate(const dm_config *c, char *err, size_t errlen);
/* Set one key from its text form (as --set key=value). 0 ok; else an error naming the key
 * and what it accepts. */
int dm_config_set(dm_config *c, const char *key, const char *value, char *err, size_t errlen);
/* Text form of one key's value into buf; 0 ok, non-zero for an unknown key. */
int dm_config_get(const dm_config *c, const char *key, char *buf, size_t buflen);
/* The whole config as a JSON object (numbers, booleans, enum names as strings);
 * malloc'd, free() it. */
char *dm_config_to_json(const dm_config *c);
/* Apply the keys of a JSON object (a config file, or config.json of a run) onto c.
 * Unknown keys and bad values are errors naming the key. 0 ok. */
int dm_config_from_json(dm_config *c, const char *json, char *err, size_t errlen);
/* Iterate the key table: name, help and group of key i (NULL / -1 past the end). */
const char *dm_config_key_name(int i);
const char *dm_config_key_help(int i);
enum { DM_KEY_MODEL = 0, DM_KEY_TRAINING = 1, DM_KEY_BACKEND = 2 };
#define DM_KEYS_MODEL (1u << DM_KEY_MODEL) /* group masks for dm_config_diff */
#define DM_KEYS_ALL ((1u << DM_KEY_MODEL) | (1u << DM_KEY_TRAINING) | (1u << DM_KEY_BACKEND))
int dm_config_key_group(int i);
const char *dm_config_group_name(int group); /* "model", "training", "backend" */
int dm_config_is_model_key(const char *key);
/* The first key of the groups in mask `groups` on which a and b differ, with both values
 * as text in va, vb (n bytes each); NULL when they agree on all of them. */
const char *dm_config_diff(const dm_config *a, const dm_config *b, unsigned groups, char *va,
                           char *vb, size_t n);
/* The one "model keys cannot change" check (resume, eval / sample, the checkpoint loader):
 * 0 when asked has the model keys of saved; else 1 and the one-line refusal in err:
 * "checkpoint has n_layer=1, the run asks for n_layer=3 (model keys cannot change)". */
int dm_config_check_model(const dm_config *saved, const dm_config *asked, char *err,
                          size_t errlen);
/* MLP hidden width: 256*ceil(floor(8d/3)/256). */
int dm_config_mlp_hidden(const dm_config *c);

/* ------------------------------------------------------------------------------------ */
/* Threads                                                                               */
/* ------------------------------------------------------------------------------------ */

/* Use n threads (0 = all cores) for OpenMP regions (a model sets them to its config's
 * `threads` when it is made, and again before its forward when they differ); OpenBLAS
 * keeps one of its own (each GEMM tile runs on one thread). Every thread of the pool
 * flushes denormal floats to zero (x86 FTZ and DAZ): a trained model's decays reach them,
 * and they cost the CPU ~100x an ordinary operation. Returns the number in use. */
int dm_set_threads(int n);
/* 1 when the calling thread and every thread of a region of the current size flush
 * denormals to zero; 0 where they do not (DM_CPU_KEEP_DENORMALS=1 in the environment, or
 * a CPU that is neither x86 nor Arm). */
int dm_denormals_flushed(void);

/* ------------------------------------------------------------------------------------ */
/* Model                                                                                 */
/* ------------------------------------------------------------------------------------ */

/* Parameter flags: how the optimizer treats a tensor. */
enum {
    DM_P_MATRIX = 1u << 0,   /* hidden 2-D matrix (Muon candidate)              */
    DM_P_NO_DECAY = 1u << 1, /* no weight decay (norms, biases, A_log, dt_bias) */
    DM_P_HEADWISE = 1u << 2, /* W_q / W_k: rows split into n_head blocks        */
};

typedef struct dm_tensor {
    char name[64];    /* stable; used as the checkpoint name            */
    int ndim;         /* 1 or 2                                          */
    int shape[2];     /* [rows, cols] for matrices ([out, in] layout)    */
    size_t offset;    /* in floats, into dm_model_params()/dm_model_grads() */
    size_t numel;
    unsigned flags;   /* DM_P_*                                          */
} dm_tensor;

typedef struct dm_model dm_model;

/* Build the model of cfg (validated) and initialize it from cfg->seed. NULL on error. */
dm_model *dm_model_create(const dm_config *cfg, char *err, size_t errlen);
void dm_model_free(dm_model *m);
const dm_config *dm_model_config(const dm_model *m);

size_t dm_model_num_params(const dm_model *m);
int dm_model_num_tensors(const dm_model *m);
const dm_tensor *dm_model_tensor(const dm_model *m, int i);
const dm_tensor *dm_model_find(const dm_model *m, const char *name);
/* The model's memory lives on its backend (the `backend` key). These give a host view of
 * it, [num_params] in the parameter table's layout, where the backend allows one (cpu
 * does), else NULL: then copy (dm_model_get / dm_model_set, the *_to_host calls below). */
float *dm_model_params(dm_model *m);
float *dm_model_grads(dm_model *m);
void dm_model_zero_grad(dm_model *m);
/* The name of the model's backend ("cpu", "fenced"). */
const char *dm_model_backend_name(const dm_model *m);
/* Copies of the whole buffers, [num_params] floats, whatever the backend (from_host
 * replaces every parameter, as dm_model_set does one tensor). */
void dm_model_params_to_host(const dm_model *m, float *dst);
void dm_model_params_from_host(dm_model *m, const float *src);
void dm_model_grads_to_host(const dm_model *m, float *dst);
/* One tensor by name (dm_model_find), copied: n must be its numel. 0 ok; else err. */
int dm_model_get(const dm_model *m, const char *name, float *dst, size_t n, char *err,
                 size_t errlen);
int dm_model_set(dm_model *m, const char *name, const float *src, size_t n, char *err,
                 size_t errlen);

/* The tokenizer of a model of tokens (vocab > 256): its serialized SentencePiece model
 * (the bytes of a data directory's tokenizer.model) and their checksum ("xxh64:" and 16
 * hex digits), which checkpoints carry beside the parameters (docs/tokens.md). set
 * copies them (n 0: none); get gives them (NULL when the model has none) and the
 * checksum in *checksum. 0 ok; 1 out of memory. */
int dm_model_set_tokenizer(dm_model *m, const void *bytes, size_t n, const char *checksum);
const void *dm_model_tokenizer(const dm_model *m, size_t *n, const char **checksum);

/* Size the activation arena for batches of B x T (forward calls this as needed). */
int dm_model_reserve(dm_model *m, int B, int T, char *err, size_t errlen);
size_t dm_model_arena_bytes(const dm_config *cfg, int B, int T, int nthreads);

/* Memory of a model and its activation arena, in bytes. The arena is saved + recompute +
 * scratch; what `checkpointing` changes is saved (and recompute). */
typedef struct dm_memory {
    size_t params;      /* the parameters (f32)                                         */
    size_t params_bf16; /* their bf16 copy, when the products run on hardware bf16       */
    size_t grads;       /* the gradients (f32, the parameters' layout)                   */
    size_t optimizer;   /* the optimizer's state (filled by who has the optimizer; 0 here) */
    size_t optimizer_scratch; /* its scratch: Muon's update buffer, Newton-Schulz work (same) */
    size_t exchange;    /* the step's gradient sum over micro-batches (grad_accum > 1) and
                           ranks, and the all-gather buffer of Muon's units among ranks
                           (filled by who has the step; 0 here)                          */
    size_t saved;       /* activations kept from the forward for the backward: every
                           unit's input (the residual stream) and what the plan keeps    */
    size_t recompute;   /* the workspace: one unit's activations that are not kept
                           (written by every forward, recomputed by the backward)        */
    size_t scratch;     /* backward gradients and the kernels' scratch                   */
    size_t verify;      /* verify mode's room for the second implementations (verify_fused
                           > 0 or verify turned on), beside the arena                    */
    size_t products;    /* the bf16 products' operand scratch, at most: operands rounded
                           for a product where no bf16 copy holds them (0 in fp32)       */
    int batch, seq_len; /* the batch the arena is laid out for                           */
} dm_memory;
/* The figures of cfg for batches of B x T on nthreads threads, without building the model
 * (optimizer = 0). 0 ok; else err (an invalid config). */
int dm_memory_plan(const dm_config *cfg, int B, int T, int nthreads, dm_memory *mem, char *err,
                   size_t errlen);
/* The figures of m's arena as laid out now (optimizer = 0); 1 when none is laid out yet. */
int dm_model_memory(const dm_model *m, dm_memory *mem);

/* Forward on tokens [B, T+1] (inputs tokens[:, :T], targets tokens[:, 1:]), ids of
 * dm_id_width(vocab) bytes each (bytes for the byte vocabulary).
 * Returns the mean cross-entropy in nats; logits [B,T,vocab] are written when non-NULL.
 * Returns NAN if the arena cannot be sized. */
float dm_model_forward(dm_model *m, const void *tokens, int B, int T, float *logits);
/* Backward of the last forward: grads += d(mean loss)/d(params). */
void dm_model_backward(dm_model *m);

/* The op layer's counters as one line, e.g.
 * "fused matmul=84/84 ... delta=4/4 delta_bwd=2/2 ... declined=0" (fused = calls not run
 * by an op's reference implementation; declined = calls that fell back to it). */
void dm_model_dispatch_report(const dm_model *m, char *buf, size_t n);
/* The same as a table: per op and direction the calls, which implementation ran them,
 * what did not run and why, and the verify maximum when verify mode ran. */
void dm_model_dispatch_table(const dm_model *m, char *buf, size_t n);
/* Verify mode: while on, every op call also runs a second implementation on the same
 * inputs (the reference, or the fast one when the reference ran) and the largest relative
 * RMS difference of its outputs and gradients is recorded. Turning it on makes the second
 * implementations' scratch beside the arena (dm_memory.verify); out of memory leaves it off. */
void dm_model_set_verify(dm_model *m, int on);
/* The largest relative difference recorded since the last call (then reset), and the
 * output or gradient it came from in what. -1 if no op was verified. */
double dm_model_verify_take(dm_model *m, char *what, size_t n);
/* Time every op into atlas (struct dm_atlas, src/atlas.h); NULL turns timing off. */
struct dm_atlas;
void dm_model_set_atlas(dm_model *m, struct dm_atlas *atlas);

/* ------------------------------------------------------------------------------------ */
/* Training, checkpoints and evaluation, without knowing the layout                     */
/* ------------------------------------------------------------------------------------ */

/* A model with its optimizer (the config's optimizer, schedule and clipping), as the
 * `dormouse train` command runs one process: one step is grad_accum micro-batches of
 * batch_size x seq_len, forward, backward, the summed gradient, the update. */
typedef struct dm_trainer dm_trainer;
dm_trainer *dm_trainer_create(const dm_config *cfg, char *err, size_t errlen);
void dm_trainer_free(dm_trainer *t);
dm_model *dm_trainer_model(dm_trainer *t);
/* The optimizer's 0-based step the next dm_trainer_step runs (a loaded checkpoint's). */
long dm_trainer_next_step(const dm_trainer *t);
/* Load a checkpoint (its directory or model.safetensors) into the model and, when the
 * checkpoint has it, the optimizer's state: training continues from there. The model
 * keys must match. 0 ok; else err. */
int dm_trainer_load(dm_trainer *t, const char *path, char *err, size_t errlen);
/* Save the model and optimizer state as the checkpoint of the steps done so far into
 * the run directory dir (dir/ckpt-<step>/, as `dormouse train` writes them). 0 ok. */
int dm_trainer_save(dm_trainer *t, const char *dir, char *err, size_t errlen);
/* One optimizer step on tokens [grad_accum * batch_size, seq_len + 1] (each row: seq_len
 * inputs and the next token; ids as dm_model_forward takes them); the step's mean loss in *loss and the gradient norm before
 * clipping in *grad_norm (either may be NULL). 0 ok; else err. */
int dm_trainer_step(dm_trainer *t, const void *tokens, float *loss, double *grad_norm,
                    char *err, size_t errlen);
/* Bits per byte of the model on bytes[0..n) as `dormouse eval` computes it (sequences of
 * seq_len, the rest as one shorter sequence). A model of the byte vocabulary only (else
 * err). 0 ok; else err. */
int dm_model_eval_bpb(dm_model *m, const uint8_t *bytes, size_t n, double *bpb, char *err,
                      size_t errlen);
/* The config and step of a checkpoint (a run directory: its newest; a checkpoint
 * directory; or a model.safetensors), e.g. to create the model or trainer it loads into. */
int dm_checkpoint_config(const char *path, dm_config *cfg, long *step, char *err,
                         size_t errlen);
/* Load the parameters of a checkpoint (as dm_checkpoint_config names it) into a model
 * without an optimizer, e.g. to evaluate it; the optimizer's state, if any, is not read.
 * The model keys must match (else err names the key). 0 ok. */
int dm_model_load(dm_model *m, const char *path, char *err, size_t errlen);
/* Save the model (no optimizer state: `dormouse eval` and `sample` read it, a resume
 * does not) as dir/ckpt-<step>/, dir made when it is not there. 0 ok. */
int dm_model_save(dm_model *m, const char *dir, long step, char *err, size_t errlen);
/* The training batch of 0-based step `step` as `dormouse train` draws it from a corpus of
 * bytes[0..n) (its last eval_window bytes are the validation window, never drawn):
 * tokens [grad_accum * batch_size, seq_len + 1]. 0 ok; else err (the corpus too small, or
 * a cfg of another vocabulary than the bytes). */
int dm_train_batch(const dm_config *cfg, const uint8_t *bytes, size_t n, long step,
                   uint8_t *tokens, char *err, size_t errlen);

/* ------------------------------------------------------------------------------------ */
/* The delta-rule core, standalone                                                       */
/* ------------------------------------------------------------------------------------ */

/* Shapes of one delta-rule call. Per batch b and head h, with S a [dk, dv] state:
 *   S' = Diag(exp(g_t)) S_{t-1};  e = v_t - S'^T k_t;  S_t = S' + beta_t k_t e^T;
 *   o_t = scale * S_t^T q_t.
 * Layout (token-major, as the projections produce it):
 *   q, k : [B, T, H, dk]          v, o : [B, T, H, dv]
 *   g    : [B, T, H, dk] (KDA, per key channel) or [B, T, H] (GDN, scalar_gate = 1)
 *   beta : [B, T, H]
 *   h0, hT : [B, H, dk, dv] initial / final state (may be NULL: zero / not wanted)
 * g is the log-decay (<= 0 in the model; any finite value is accepted). */
typedef struct dm_delta_dims {
    int B, T, H, dk, dv;
    int scalar_gate; /* 0: KDA, g per key channel; 1: GDN, g per head */
    float scale;     /* output scale, usually dk^-1/2 */
} dm_delta_dims;

/* Forward. Returns 0, or non-zero (with err) on bad dims or out of memory. */
int dm_delta_forward(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                     const float *g, const float *beta, const float *h0, float *o, float *hT,
                     char *err, size_t errlen);
/* Backward: given dO [B,T,H,dv] and dhT (or NULL), writes dq, dk, dv, dg, dbeta (shapes
 * of their inputs) and dh0 (if non-NULL). Overwrites, does not accumulate. */
int dm_delta_backward(const dm_delta_dims *d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, const float *h0, const float *dO,
                      const float *dhT, float *dq, float *dk, float *dv, float *dg,
                      float *dbeta, float *dh0, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* DORMOUSE_H */
