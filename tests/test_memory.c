/* test_memory.c — activation checkpointing and the memory report: none,
 * balanced and full give the same losses and gradients to the bit (KDA and GDN, fp32 and
 * bf16, both delta-core paths); the plan and the backward agree (what the plan does not
 * keep is NaN before the backward, and the gradients stay finite and equal); the memory
 * report is the arena that is allocated; a batch of one 65536-byte sequence trains with
 * `full` and evaluates. */
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "base/rng.h"
#include "jobs/eval.h"
#include "jobs/plan.h"
#include "model/model.h"
#include "optim/gradsum.h"
#include "optim/optim.h"

static const char *const MODE[] = {"none", "balanced", "full"};

static void text_tokens(uint8_t *tok, size_t n, uint64_t seed) {
    static const char txt[] =
        "In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep. ";
    dm_rng r;
    dm_rng_seed(&r, seed, 3);
    size_t off = (size_t)dm_rng_below(&r, sizeof txt - 1);
    for (size_t i = 0; i < n; i++) tok[i] = (uint8_t)txt[(off + i) % (sizeof txt - 1)];
}

/* two layers, heads the chunked core takes, a partial last chunk at T = 40 */
static dm_config small(int mixer) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32;
    c.n_layer = 2;
    c.n_head = 2;
    c.head_dim = 16;
    c.gate_rank = 8;
    c.conv_size = 3;
    c.mixer = mixer;
    c.chunk_size = 16;
    c.seed = 5;
    c.precision = DM_PRECISION_FP32;
    return c;
}

static float loss_grads(dm_model *m, const uint8_t *tok, int B, int T) {
    float l = dm_model_forward(m, tok, B, T, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    return l;
}

/* The model of c under checkpointing mode; with bf16_ref its products run the reference
 * bf16 path (operands rounded, f32 GEMM), as on a CPU without hardware bf16. */
static dm_model *make(dm_config c, int mode, int bf16_ref) {
    char err[DM_ERRLEN];
    c.checkpointing = mode;
    if (bf16_ref) setenv("DM_CPU_NO_BF16", "1", 1);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    if (bf16_ref) unsetenv("DM_CPU_NO_BF16");
    CHECKF(m != NULL, "%s: %s", MODE[mode], err);
    if (m && bf16_ref) m->ops.precision = DM_PRECISION_BF16;
    return m;
}

/* What the plan does not keep (the workspace) and every backward scratch, as NaN; the
 * workspace then holds no unit's activations. */
static size_t poison(dm_model *m) {
    size_t n = m->sizes.recompute + m->sizes.scratch;
    float *ws = dm_backend_host_view(m->be, m->arena + m->sizes.saved); /* the cpu's */
    memset(ws, 0xff, n * sizeof(float)); /* NaN as f32 and as bf16 */
    dm_network_forget_ws(m);
    return m->sizes.recompute;
}

/* c under each mode against none, on one batch: the loss and every gradient to the bit;
 * with nan, the forward's unkept activations and the scratch are NaN before the backward. */
static void modes_agree(dm_config c, const char *what, int bf16_ref, int nan) {
    int B = 3, T = 40;
    uint8_t tok[3 * 41];
    text_tokens(tok, sizeof tok, 11);
    dm_model *ref = make(c, DM_CKPT_NONE, bf16_ref);
    if (!ref) return;
    size_t np = dm_model_num_params(ref);
    float l0 = loss_grads(ref, tok, B, T);
    CHECKF(isfinite(l0), "%s: loss %g", what, l0);
    if (bf16_ref) {
        char table[8192];
        dm_model_dispatch_table(ref, table, sizeof table);
        CHECKF(strstr(table, "reference-bf16") != NULL, "%s: the reference bf16 path did not run",
               what);
    }
    for (int mode = 0; mode < 3; mode++) {
        dm_model *m = make(c, mode, bf16_ref);
        if (!m) break;
        float l = dm_model_forward(m, tok, B, T, NULL);
        size_t poisoned = nan ? poison(m) : 0;
        dm_model_zero_grad(m);
        dm_model_backward(m);
        const float *g = dm_model_grads(m), *g0 = dm_model_grads(ref);
        CHECKF(memcmp(&l, &l0, sizeof l) == 0, "%s, %s: loss %.9g vs none %.9g", what, MODE[mode],
               l, l0);
        CHECKF(t_all_finite(g, np), "%s, %s: a gradient is not finite", what, MODE[mode]);
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < np; i++)
            if (memcmp(&g[i], &g0[i], sizeof(float)) && !diff++) first = i;
        CHECKF(diff == 0, "%s, %s: %zu gradients differ from none (first at %zu: %.9g vs %.9g)",
               what, MODE[mode], diff, first, g[first], g0[first]);
        /* balanced and full keep less and recompute the rest into the workspace */
        if (mode != DM_CKPT_NONE) CHECKF(m->sizes.recompute > 0, "%s: no workspace", MODE[mode]);
        if (nan && mode != DM_CKPT_NONE)
            CHECK(poisoned == m->sizes.recompute && poisoned > 0);
        dm_model_free(m);
    }
    printf("  %s: loss %.9g; none, balanced, full the same bits%s\n", what, l0,
           nan ? " (unkept activations and scratch NaN before the backward)" : "");
    dm_model_free(ref);
}

TEST(checkpointing_bitwise_kda_gdn) {
    for (int mx = 0; mx < 2; mx++) {
        dm_config c = small(mx ? DM_MIXER_GDN : DM_MIXER_KDA);
        modes_agree(c, mx ? "gdn" : "kda", 0, 0);
        /* the reference core (no saved chunk state) and the composed reference norms */
        c.kda_impl = DM_IMPL_REFERENCE;
        c.norm_impl = DM_IMPL_REFERENCE;
        modes_agree(c, mx ? "gdn, reference core and norms" : "kda, reference core and norms", 0,
                    0);
    }
    dm_config c = small(DM_MIXER_KDA);
    c.gate_lower_bound = -5;
    c.tie_embeddings = 1;
    c.n_layer = 3;
    modes_agree(c, "kda, 3 layers, lower-bounded gate, tied embeddings", 0, 0);
    /* the mixer's part of the workspace the largest (the last MLP's survives the head) */
    c = small(DM_MIXER_KDA);
    c.d_model = 96;
    c.head_dim = 48;
    modes_agree(c, "kda, d_model 96", 0, 0);
    modes_agree(c, "kda, d_model 96, unkept NaN", 0, 1);
}

/* bf16 through the reference bf16 path (rounded operands, f32 GEMM): runs on any CPU */
TEST(checkpointing_bitwise_bf16_reference) {
    modes_agree(small(DM_MIXER_KDA), "kda, bf16 reference path", 1, 0);
    modes_agree(small(DM_MIXER_GDN), "gdn, bf16 reference path", 1, 0);
}

/* bf16 on the hardware kernel, with the arena's bf16 copies of the products' inputs */
TEST(checkpointing_bitwise_bf16_hardware) {
    dm_config c = small(DM_MIXER_KDA);
    c.precision = DM_PRECISION_BF16;
    char err[DM_ERRLEN];
    dm_model *probe = dm_model_create(&c, err, sizeof err);
    if (!probe) {
        t_skip("%s", err);
        return;
    }
    CHECK(probe->ops.bf16_why == NULL);
    dm_model_free(probe);
    modes_agree(c, "kda, bf16", 0, 0);
    modes_agree(c, "kda, bf16, unkept NaN", 0, 1);
    c.mixer = DM_MIXER_GDN;
    modes_agree(c, "gdn, bf16", 0, 0);
}

/* the same with the arena's bf16 copies read by the reference bf16 path standing in for
 * the kernel (DM_CPU_BF16_REFERENCE, with DM_CPU_NO_BF16: on any CPU) */
TEST(checkpointing_bitwise_bf16_stand_in) {
    setenv("DM_CPU_NO_BF16", "1", 1);
    setenv("DM_CPU_BF16_REFERENCE", "1", 1);
    dm_config c = small(DM_MIXER_KDA);
    c.precision = DM_PRECISION_BF16;
    char err[DM_ERRLEN];
    dm_model *probe = dm_model_create(&c, err, sizeof err);
    CHECKF(probe && probe->ops.policy->prec.matmul_via, "%s", probe ? "no stand-in" : err);
    dm_model_free(probe);
    modes_agree(c, "kda, bf16 stand-in", 0, 0);
    modes_agree(c, "kda, bf16 stand-in, unkept NaN", 0, 1);
    c.mixer = DM_MIXER_GDN;
    modes_agree(c, "gdn, bf16 stand-in", 0, 0);
    unsetenv("DM_CPU_BF16_REFERENCE");
    unsetenv("DM_CPU_NO_BF16");
}

/* The plan and the backward agree: everything the plan does not keep, and all scratch, is
 * NaN when the backward starts; each unit recomputes what it needs, and the gradients are
 * finite and equal to none's. */
TEST(checkpointing_plan_and_backward_agree) {
    for (int mx = 0; mx < 2; mx++) {
        dm_config c = small(mx ? DM_MIXER_GDN : DM_MIXER_KDA);
        modes_agree(c, mx ? "gdn" : "kda", 0, 1);
        modes_agree(c, mx ? "gdn, bf16 reference path" : "kda, bf16 reference path", 1, 1);
        c.kda_impl = DM_IMPL_REFERENCE;
        c.norm_impl = DM_IMPL_REFERENCE;
        modes_agree(c, mx ? "gdn, reference core and norms" : "kda, reference core and norms", 0,
                    1);
    }
}

/* Each mode's rule: none keeps every step's outputs; balanced exactly the compute-bound
 * steps'; full none but the residual stream; what is not kept is recomputed, and a step
 * writing the next unit's input never is. */
TEST(checkpointing_plan_rules) {
    for (int mx = 0; mx < 2; mx++) {
        dm_config c = small(mx ? DM_MIXER_GDN : DM_MIXER_KDA);
        for (int mode = 0; mode < 3; mode++) {
            c.checkpointing = mode;
            dm_plan p;
            dm_plan_make(&p, &c, 0);
            int kept = 0;
            for (int s = 0; s < DM_NSTEPS; s++) {
                int out = p.cls[s] == DM_SC_OUT;
                int head = dm_step_defs[s].unit == DM_UNIT_HEAD;
                int want = out || mode == DM_CKPT_NONE ||
                           (mode == DM_CKPT_BALANCED && p.cls[s] == DM_SC_COMPUTE && !head);
                char outs[128];
                CHECKF(p.keep[s] == want, "%s: step %s (%s) keep %d", MODE[mode],
                       dm_step_defs[s].name, dm_step_outputs(s, outs, sizeof outs), p.keep[s]);
                CHECKF(p.rerun[s] == (!want && !out), "%s: step %s rerun %d", MODE[mode],
                       dm_step_defs[s].name, p.rerun[s]);
                CHECKF(out == (dm_step_outputs(s, outs, sizeof outs)[0] == 0),
                       "step %s: outputs '%s'", dm_step_defs[s].name, outs);
                kept += p.keep[s] && !out;
            }
            for (int k = 0; k < DM_UNIT_KINDS; k++)
                CHECKF(dm_plan_recomputes(&p, k) == (mode != DM_CKPT_NONE), "%s: kind %d",
                       MODE[mode], k);
            if (mode == DM_CKPT_FULL) CHECK(kept == 0);
        }
        /* the low-rank gate paths are KDA's; GDN's f and z are products of the normed input.
         * The head's logits stay in the workspace from its forward to its backward */
        c.checkpointing = DM_CKPT_BALANCED;
        dm_plan p;
        dm_plan_make(&p, &c, 0);
        CHECK(p.keep[DM_S_F] == (mx == 1) && p.keep[DM_S_Z] == (mx == 1));
        CHECK(p.keep[DM_S_F1] == (mx == 1) && p.keep[DM_S_Z1] == (mx == 1));
        CHECK(p.keep[DM_S_QKV] && p.keep[DM_S_CORE] && p.keep[DM_S_UP] && !p.keep[DM_S_LOGITS]);
        CHECK(!p.keep[DM_S_CONV] && !p.keep[DM_S_ACT] && !p.keep[DM_S_GATE] &&
              !p.keep[DM_S_NORM1] && !p.keep[DM_S_SWIGLU]);
    }
}

/* every tensor pointer of the layout: inside [lo, hi) of the arena (NULL ones skipped) */
static int inside(const void *p, const dm_bf *lo, const dm_bf *hi) {
    return !p || ((const char *)p >= (const char *)lo && (const char *)p < (const char *)hi);
}

/* The memory report is the arena: saved + recompute + scratch = the floats allocated (and
 * dm_model_arena_bytes), the planned figures equal the model's, each activation lies in
 * the region its step's keep says, full keeps the residual stream alone, and the
 * optimizer's state is what it holds. */
TEST(memory_report_matches_arena) {
    static const int shapes[][2] = {{3, 40}, {1, 100}};
    for (int mx = 0; mx < 2; mx++)
        for (int mode = 0; mode < 3; mode++)
            for (int sh = 0; sh < 2; sh++) {
                dm_config c = small(mx ? DM_MIXER_GDN : DM_MIXER_KDA);
                c.checkpointing = mode;
                int B = shapes[sh][0], T = shapes[sh][1], L = c.n_layer;
                char err[DM_ERRLEN];
                dm_model *m = dm_model_create(&c, err, sizeof err);
                CHECKF(m != NULL, "%s", err);
                if (!m) return;
                dm_memory mem, planned;
                CHECK(dm_model_memory(m, &mem) == 1); /* no arena yet */
                CHECK(dm_model_reserve(m, B, T, err, sizeof err) == 0);
                CHECK(dm_model_memory(m, &mem) == 0);
                size_t arena = mem.saved + mem.recompute + mem.scratch;
                CHECKF(arena == m->arena_floats * sizeof(float),
                       "%s: report %zu bytes, arena %zu", MODE[mode], arena,
                       m->arena_floats * sizeof(float));
                CHECK(arena == dm_model_arena_bytes(&c, B, T, m->nthreads));
                CHECK(dm_memory_plan(&c, B, T, m->nthreads, &planned, err, sizeof err) == 0);
                CHECK(memcmp(&planned, &mem, sizeof mem) == 0);
                CHECK(mem.params == dm_model_num_params(m) * sizeof(float) &&
                      mem.grads == mem.params && mem.params_bf16 == 0 && mem.verify == 0);
                size_t resid = (size_t)(2 * L + 1) * B * T * c.d_model * sizeof(float);
                if (mode == DM_CKPT_NONE) CHECK(mem.recompute == 0);
                if (mode == DM_CKPT_FULL) CHECKF(mem.saved == resid, "full saves %zu, the "
                                                 "residual stream is %zu", mem.saved, resid);
                else CHECK(mem.saved > resid);
                /* each tensor in its region */
                dm_bf *a0 = m->arena, *ws = a0 + m->sizes.saved, *sc = ws + m->sizes.recompute;
                for (int u = 0; u <= 2 * L; u++) {
                    const char *base = u == 2 * L ? (const char *)&m->head
                                                  : (const char *)&m->act[u / 2];
                    for (int i = 0; dm_plan_tensor(i, NULL, NULL, NULL); i++) {
                        int step;
                        size_t field;
                        const char *name = dm_plan_tensor(i, &step, &field, NULL);
                        if (dm_step_defs[step].unit != dm_unit_kind(u, L)) continue;
                        void *p = *(void *const *)(base + field);
                        CHECKF(m->plan.keep[step] ? inside(p, a0, ws) : inside(p, ws, sc),
                               "%s, unit %d: %s outside its region", MODE[mode], u, name);
                    }
                }
                CHECK(inside(m->s.dres, sc, a0 + m->arena_floats) &&
                      inside(m->s.delta_work, sc, a0 + m->arena_floats));
                /* the optimizer's state: AdamW moments and Muon momentum */
                dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
                CHECK(o && dm_memory_report(m, o, NULL, &mem) == 0);
                CHECK(mem.optimizer >= 3 * mem.params && mem.optimizer < 3 * mem.params + 4096);
                CHECK(mem.optimizer_scratch > 0 && mem.exchange == 0);
                dm_optim_free(o);
                dm_model_free(m);
            }
}

/* The heap in use (glibc's allocator: its arenas and mmapped chunks); 0 where another
 * allocator (a sanitizer's) serves malloc. */
static size_t heap_bytes(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* The report's optimizer and step figures are what the optimizer and the gradient sum
 * allocate: the heap grows by them (and by no more than the small tables: units, groups,
 * offsets) when each is built. AdamW alone has no scratch; Muon's update buffer and NS work
 * are its scratch; grad_accum 1 in one process sums nothing, grad_accum 2 holds a buffer
 * in the parameters' layout. */
TEST(memory_report_counts_optimizer_and_sum) {
    const size_t slack = 64 << 10;
    int measured = 0;
    for (int opt = 0; opt < 2; opt++) {
        dm_config c = small(DM_MIXER_KDA);
        c.d_model = 128, c.n_layer = 1, c.n_head = 2, c.head_dim = 64;
        c.optimizer = opt ? DM_OPT_MUON : DM_OPT_ADAMW;
        c.ns_precision = DM_PRECISION_FP32; /* oneDNN's scratch is its own */
        char err[DM_ERRLEN];
        dm_model *m = dm_model_create(&c, err, sizeof err);
        CHECKF(m != NULL, "%s", err);
        if (!m) return;
        size_t P = dm_model_num_params(m) * sizeof(float);
        size_t h0 = heap_bytes();
        dm_optim *o = dm_optim_create(m, &c, err, sizeof err);
        size_t h1 = heap_bytes();
        dm_gradsum *g1 = dm_gradsum_create(m, 1, NULL, err, sizeof err);
        size_t h2 = heap_bytes();
        dm_gradsum *g2 = dm_gradsum_create(m, 2, NULL, err, sizeof err);
        size_t h3 = heap_bytes();
        CHECK(o && g1 && g2);
        if (!o || !g1 || !g2) return;
        dm_memory mem = {0}, mem2 = {0};
        dm_memory_add_step(&mem, o, g1);
        dm_memory_add_step(&mem2, o, g2);
        printf("  %s: state %zu, scratch %zu, sum %zu bytes; heap +%zu, +%zu, +%zu\n",
               opt ? "muon" : "adamw", mem.optimizer, mem.optimizer_scratch, mem2.exchange,
               h1 - h0, h2 - h1, h3 - h2);
        CHECK(opt ? mem.optimizer > 3 * P && mem.optimizer < 3 * P + 4096
                  : mem.optimizer == 2 * P); /* + retraction radius and scale per slice */
        CHECK(opt ? mem.optimizer_scratch > slack : mem.optimizer_scratch == 0);
        CHECK(mem.exchange == 0 && mem2.exchange == P && mem2.optimizer == mem.optimizer);
        if (h0 && h1 > h0) {
            measured = 1;
            size_t want = mem.optimizer + mem.optimizer_scratch;
            CHECKF(h1 - h0 >= want && h1 - h0 <= want + slack,
                   "optimizer: heap +%zu bytes, report %zu", h1 - h0, want);
            CHECKF(h2 - h1 <= slack, "gradient sum, grad_accum 1: heap +%zu bytes", h2 - h1);
            CHECKF(h3 - h2 >= P && h3 - h2 <= P + slack,
                   "gradient sum, grad_accum 2: heap +%zu bytes, report %zu", h3 - h2, P);
        }
        dm_gradsum_free(g2);
        dm_gradsum_free(g1);
        dm_optim_free(o);
        dm_model_free(m);
    }
    if (!measured) t_skip("malloc is not glibc's here (a sanitizer's): heap growth unmeasured");
}

/* The d2 model at 8 x 512 and at 1 x 65536: what each mode keeps, from the plan (the
 * targets of the plan: balanced keeps at most half of none's saved activations where the
 * products' inputs are kept in bf16 as well, full at most a fifth; full at 65536 bytes
 * plans under 4 GiB in all). */
TEST(memory_plan_d2) {
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN];
    for (int bf16 = 0; bf16 < 2; bf16++) {
        if (!bf16) setenv("DM_CPU_NO_BF16", "1", 1); /* fp32: no bf16 copies */
        dm_memory mem[3];
        for (int mode = 0; mode < 3; mode++) {
            c.checkpointing = mode;
            CHECK(dm_memory_plan(&c, 8, 512, 2, &mem[mode], err, sizeof err) == 0);
        }
        unsetenv("DM_CPU_NO_BF16");
        double rb = (double)mem[1].saved / mem[0].saved, rf = (double)mem[2].saved / mem[0].saved;
        printf("  d2 8 x 512%s: saved none %.1f MiB, balanced %.1f%%, full %.1f%%\n",
               bf16 ? " with bf16 copies" : ", fp32", mem[0].saved / 1048576.0, 100 * rb,
               100 * rf);
        CHECK(rf <= 0.2 && rb <= 0.5); /* balanced at most half of none's */
    }
    c.checkpointing = DM_CKPT_FULL;
    dm_memory mem;
    CHECK(dm_memory_plan(&c, 1, 65536, 16, &mem, err, sizeof err) == 0);
    printf("  d2 1 x 65536 full, 16 threads: %.2f GiB planned\n",
           dm_memory_total(&mem) / (1024.0 * 1048576.0));
    CHECK(dm_memory_total(&mem) + 3 * mem.params < (size_t)4 << 30); /* + AdamW and Muon */
}

/* A batch of one 65536-byte sequence trains with full checkpointing (a small model: the
 * d2 figure is `dormouse plan`'s), giving none's loss and gradients; evaluation at that
 * seq_len cuts the window as at any other. */
TEST(long_context_65536_full_step) {
    dm_config c = small(DM_MIXER_KDA);
    c.n_layer = 1;
    c.chunk_size = 32;
    int T = 65536;
    size_t n = 65536 + 1 + 4095; /* a full window and a short one */
    uint8_t *tok = malloc(n);
    text_tokens(tok, n, 2);
    dm_model *m[2];
    float l[2];
    char err[DM_ERRLEN];
    for (int i = 0; i < 2; i++) {
        c.checkpointing = i ? DM_CKPT_FULL : DM_CKPT_NONE;
        m[i] = dm_model_create(&c, err, sizeof err);
        CHECKF(m[i] != NULL, "%s", err);
        if (!m[i]) return;
        l[i] = loss_grads(m[i], tok, 1, T);
        CHECKF(isfinite(l[i]), "loss %g", l[i]);
    }
    size_t np = dm_model_num_params(m[0]);
    CHECK(memcmp(&l[0], &l[1], sizeof l[0]) == 0);
    CHECK(t_all_finite(dm_model_grads(m[1]), np));
    CHECK(memcmp(dm_model_grads(m[0]), dm_model_grads(m[1]), np * sizeof(float)) == 0);
    dm_memory mem[2];
    dm_model_memory(m[0], &mem[0]);
    dm_model_memory(m[1], &mem[1]);
    printf("  1 x 65536: loss %.6f; saved activations none %.1f MiB, full %.1f MiB\n", l[0],
           mem[0].saved / 1048576.0, mem[1].saved / 1048576.0);
    CHECK(mem[1].saved * 5 < mem[0].saved);
    /* evaluation at seq_len 65536 cuts the window into one full sequence and the rest:
     * its BPB is that of the step's forward and of the rest's */
    int rest = (int)(n - 1) - T;
    double b = dm_eval_bpb(m[1], tok, n, 1, T, NULL);
    float lr = dm_model_forward(m[0], tok + T, 1, rest, NULL);
    double want = ((double)l[0] * T + (double)lr * rest) / (double)(n - 1) / log(2.0);
    printf("  eval at seq_len 65536 on %zu bytes: %.6f bpb (from the forwards: %.6f)\n", n, b,
           want);
    CHECK(isfinite(b) && fabs(b - want) <= 1e-12 * want);
    /* and an optimizer step */
    dm_optim *o = dm_optim_create(m[1], &c, err, sizeof err);
    CHECK(o && isfinite(dm_optim_step(o, m[1], 0)));
    dm_optim_free(o);
    dm_model_free(m[0]);
    dm_model_free(m[1]);
    free(tok);
}

/* The ops take row counts as int: a batch whose rows (of the heads: B*T*n_head) do not fit
 * is a config error naming the key, not an overflow. */
TEST(long_context_rows_bound) {
    dm_config c;
    dm_config_default(&c);
    char err[DM_ERRLEN] = "";
    c.batch_size = 1;
    c.seq_len = 1 << 24;
    CHECK(dm_config_validate(&c, err, sizeof err) == 0); /* 2^26 rows of heads */
    c.batch_size = 1 << 7;                               /* 2^33 */
    CHECK(dm_config_validate(&c, err, sizeof err) != 0);
    printf("  %s\n", err);
    CHECK(strstr(err, "seq_len") && strstr(err, "2147483647"));
    dm_memory mem;
    CHECK(dm_memory_plan(&c, c.batch_size, c.seq_len, 1, &mem, err, sizeof err) != 0);
}

#define TINY_SETS                                                                          \
    " --set d_model=32 --set n_head=2 --set head_dim=16 --set gate_rank=8 --set batch_size=2" \
    " --set seq_len=64"

/* `dormouse plan`: the figures (the planned ones, under each mode), a timed step and the
 * peak resident memory; bad input is one line and exit 2. `dormouse bench --memory`: each
 * arm's figures and the ratio row. */
TEST(plan_cli_figures_and_time) {
    char d[256], outp[512], out[16384], cmd[2048], want[64], err[DM_ERRLEN];
    t_tmpdir(d, sizeof d);
    snprintf(outp, sizeof outp, "%s/out.txt", d);
    CHECK(t_run_out(DM_CLI " plan --help", outp, out, sizeof out) == 0);
    CHECK(strstr(out, "--reps") && strstr(out, "saved activations") && strstr(out, "checkpointing"));
    CHECK(t_run_out(DM_CLI " --help", outp, out, sizeof out) == 0 && strstr(out, "  plan "));

    int rc = t_run_out(DM_CLI " plan --reps 0 --set checkpointing=balanced", outp, out, sizeof out);
    CHECKF(rc == 0, "plan exited %d:\n%s", rc, out);
    dm_config c;
    dm_config_default(&c);
    c.checkpointing = DM_CKPT_BALANCED;
    dm_memory mem;
    CHECK(dm_memory_plan(&c, c.batch_size, c.seq_len, 1, &mem, err, sizeof err) == 0);
    snprintf(want, sizeof want, "%.1f", mem.saved / 1048576.0);
    const char *line = strstr(out, "  saved activations ");
    CHECKF(line && strstr(line, want) && strstr(line, want) < strchr(line, '\n'),
           "saved activations %s MiB expected:\n%s", want, out);
    CHECK(strstr(out, "saved activations by checkpointing: none") && strstr(out, "balanced") &&
          strstr(out, "full") && strstr(out, "checkpointing balanced"));
    CHECK(!strstr(out, "ms/step")); /* --reps 0: nothing run */

    rc = t_run_out(DM_CLI " plan --reps 1 --set checkpointing=full" TINY_SETS, outp, out, sizeof out);
    CHECKF(rc == 0, "plan --reps 1 exited %d:\n%s", rc, out);
    CHECK(strstr(out, "1 step after a warm-up") && strstr(out, "ms/step") &&
          strstr(out, "tokens/s") && strstr(out, "peak resident memory"));
    printf("  %.*s\n", (int)strcspn(strstr(out, "time:"), "\n"), strstr(out, "time:"));
    CHECK(strstr(out, "optimizer scratch") && !strstr(out, "gradient sum"));
    /* a step of grad_accum micro-batches: timed whole, its gradient sum in the figures */
    rc = t_run_out(DM_CLI " plan --reps 1 --set grad_accum=2" TINY_SETS, outp, out, sizeof out);
    CHECKF(rc == 0, "plan --reps 1 --set grad_accum=2 exited %d:\n%s", rc, out);
    CHECKF(strstr(out, "1 step of 2 micro-batches of ") && strstr(out, "  gradient sum "),
           "grad_accum=2:\n%s", out);

    static const char *const bad[] = {" plan --reps x", " plan --set checkpointing=partial",
                                      " plan --bogus", " plan extra",
                                      " plan --set batch_size=1024 --set seq_len=16777216"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI "%s", bad[i]);
        rc = t_run_out(cmd, outp, out, sizeof out);
        int nl = 0;
        for (char *p = out; *p; p++) nl += *p == '\n';
        CHECKF(rc == 2 && nl == 1, "'%s' exited %d, expected 2 and one line:\n%s", bad[i], rc,
               out);
    }

    rc = t_run_out(DM_CLI " bench -v --reps 1 --memory --set checkpointing=full"
                   " --baseline checkpointing=none" TINY_SETS, outp, out, sizeof out);
    CHECKF(rc == 0, "bench --memory exited %d:\n%s", rc, out);
    CHECK(strstr(out, "saved_activations_mib") && strstr(out, "total_mib") &&
          strstr(out, "saved_activations_ratio_to_baseline") &&
          strstr(out, "memory: parameters"));
    t_rmtree(d);
}

/* The backward recomputes what the plan says and nothing more: once per unit, except the
 * head (never) and the last MLP when its part of the workspace and the head's do not
 * overlap (they do not where the mixer's part is the largest, as at d2; they do where the
 * MLP's is, as at d_model 32) — counted by the op layer, per op, against the forward's. */
TEST(checkpointing_recompute_counts) {
    uint8_t tok[2 * 33];
    text_tokens(tok, sizeof tok, 4);
    /* forward calls per layer of each op, and the first mode whose plan reruns it */
    static const struct { int op, per_layer, rerun_from; } C[] = {
        {DM_OP_SWIGLU, 1, DM_CKPT_BALANCED}, /* the MLP */
        {DM_OP_CONV, 3, DM_CKPT_BALANCED},   /* the mixer */
        {DM_OP_L2NORM, 2, DM_CKPT_BALANCED},
        {DM_OP_DELTA, 1, DM_CKPT_FULL},
    };
    for (int wide = 0; wide < 2; wide++) {
        dm_config c = small(DM_MIXER_KDA);
        c.n_layer = 3;
        if (wide) c.d_model = 96, c.head_dim = 48; /* MLP hidden 256: under 3x d_model */
        int L = c.n_layer;
        for (int mode = 0; mode < 3; mode++) {
            dm_model *m = make(c, mode, 0);
            if (!m) return;
            loss_grads(m, tok, 2, 32);
            int apart = !dm_plan_ws_overlap(&m->sizes, DM_UNIT_MLP, DM_UNIT_HEAD);
            if (mode != DM_CKPT_NONE)
                CHECKF(apart == wide,
                       "d_model %d, %s: the MLP's and the head's workspace %s", c.d_model,
                       MODE[mode], apart ? "apart" : "overlap");
            for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
                long fwd = m->ops.calls[C[i].op][DM_FWD], want = (long)C[i].per_layer * L;
                int mlp = C[i].op == DM_OP_SWIGLU;
                if (mode >= C[i].rerun_from)
                    want += (long)C[i].per_layer * (mlp && apart ? L - 1 : L);
                CHECKF(fwd == want, "d_model %d, %s: %s.fwd ran %ld times, expected %ld",
                       c.d_model, MODE[mode], dm_op_name(C[i].op), fwd, want);
            }
            /* norms: 2 per layer and the head's in the forward; the head's never again */
            long rms = m->ops.calls[DM_OP_RMSNORM][DM_FWD];
            long want_rms = 2L * L + 1 + (mode == DM_CKPT_NONE ? 0 : 2L * L - apart);
            CHECKF(rms == want_rms, "d_model %d, %s: rmsnorm.fwd ran %ld times, expected %ld",
                   c.d_model, MODE[mode], rms, want_rms);
            dm_model_free(m);
        }
    }
}
