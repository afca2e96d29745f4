/* test_vocab.c — the vocabulary as a model key: embedding and head sized by it, token ids
 * wider than a byte through the embedding, the cross-entropy, the batches and the
 * recurrent inference; bits per byte of token data against a brute force
 * (docs/tokens.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dormouse.h"
#include "io/data.h"
#include "jobs/eval.h"
#include "io/tokenizer.h"
#include "model/infer.h"

static dm_config tiny(int vocab, int tie) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32;
    c.n_layer = 1;
    c.n_head = 2;
    c.head_dim = 16;
    c.gate_rank = 8;
    c.threads = 2;
    c.vocab = vocab;
    c.tie_embeddings = tie;
    return c;
}

/* ids [n] of width w, drawn below V */
static void *draw_ids(size_t n, int V, uint64_t seed) {
    int w = dm_id_width(V);
    uint8_t *p = malloc(n * (size_t)w);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t id = (uint32_t)(s % (uint64_t)V);
        if (w == 2) ((uint16_t *)p)[i] = (uint16_t)id;
        else if (w == 4) ((uint32_t *)p)[i] = id;
        else p[i] = (uint8_t)id;
    }
    return p;
}

/* The loss against one computed from the logits it returns, every row's target looked up
 * among V columns; the embedding's gradient only on the rows of the input ids; the fast
 * ops against their references (verify mode). */
static void forward_brute(int V, int tie) {
    dm_config c = tiny(V, tie);
    char err[512];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (!m) return;
    const dm_tensor *e = dm_model_find(m, "embed"), *h = dm_model_find(m, tie ? "embed" : "lm_head");
    CHECK(e && e->shape[0] == V && h && h->shape[0] == V);
    CHECK(tie == !dm_model_find(m, "lm_head"));
    int B = 2, T = 24, w = dm_id_width(V);
    uint8_t *ids = draw_ids((size_t)B * (T + 1), V, (uint64_t)V);
    float *logits = malloc(((size_t)B * T * V + 1) * sizeof(float));
    logits[(size_t)B * T * V] = 12345.0f; /* nothing written past B x T x V */
    dm_model_zero_grad(m);
    dm_model_set_verify(m, 1);
    float loss = dm_model_forward(m, ids, B, T, logits);
    dm_model_backward(m);
    char what[256];
    double vmax = dm_model_verify_take(m, what, sizeof what);
    CHECKF(vmax >= 0 && vmax < 1e-4, "verify: %g (%s)", vmax, what);
    CHECK(logits[(size_t)B * T * V] == 12345.0f);
    double sum = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *x = logits + ((size_t)b * T + t) * V;
            uint32_t tg = dm_id_at(ids, w, (size_t)b * (T + 1) + t + 1);
            double mx = -INFINITY, s = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, x[v]);
            for (int v = 0; v < V; v++) s += exp((double)x[v] - mx);
            sum += mx + log(s) - x[tg];
        }
    double want = sum / (B * T);
    printf("  vocab %d (ids of %d bytes, %s): loss %.6f, brute force %.6f\n", V, w,
           tie ? "tied" : "untied", loss, want);
    CHECKF(fabs(loss - want) <= 1e-5 * want, "loss %.7f, brute force %.7f", loss, want);
    if (!tie) { /* untied: the embedding's gradient only on the rows the inputs name */
        const float *g = dm_model_grads(m) + e->offset;
        char *used = calloc((size_t)V, 1);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) used[dm_id_at(ids, w, (size_t)b * (T + 1) + t)] = 1;
        int bad = 0, nonzero = 0;
        for (int v = 0; v < V; v++) {
            double r = 0;
            for (int d = 0; d < c.d_model; d++) r += fabs(g[(size_t)v * c.d_model + d]);
            if (!used[v] && r != 0) bad++;
            if (used[v] && r > 0) nonzero++;
        }
        CHECKF(bad == 0 && nonzero > 0, "%d unused rows with a gradient, %d used with one", bad,
               nonzero);
        free(used);
    }
    /* the recurrent inference on the same ids gives the same logits */
    dm_infer *s = dm_infer_create(m);
    float *got = malloc((size_t)V * sizeof(float));
    double worst = 0;
    for (int t = 0; t < T; t++) {
        dm_infer_step(s, dm_id_at(ids, w, (size_t)t), got);
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) {
            num = fmax(num, fabs(got[v] - logits[(size_t)t * V + v]));
            den = fmax(den, fabs(logits[(size_t)t * V + v]));
        }
        worst = fmax(worst, num / den);
    }
    CHECKF(worst <= 1e-5, "recurrent vs training logits: %.3e", worst);
    dm_infer_free(s);
    free(got);
    free(ids);
    free(logits);
    dm_model_free(m);
}

TEST(vocab_wide_ids_uint16_untied) { forward_brute(300, 0); }
TEST(vocab_wide_ids_uint16_tied) { forward_brute(1000, 1); }
TEST(vocab_wide_ids_uint32) { forward_brute(65537, 0); }

/* the config key: its range, and the model of the byte vocabulary is today's */
TEST(vocab_key_and_default) {
    dm_config c;
    dm_config_default(&c);
    char err[512];
    CHECK(c.vocab == 256 && dm_id_width(256) == 1 && dm_id_width(257) == 2 &&
          dm_id_width(65536) == 2 && dm_id_width(65537) == 4);
    CHECK(dm_config_set(&c, "vocab", "4096", err, sizeof err) == 0 && c.vocab == 4096);
    CHECK(dm_config_set(&c, "vocab", "100", err, sizeof err) != 0 && strstr(err, "vocab"));
    dm_config a = tiny(256, 0), b = tiny(512, 0);
    CHECK(dm_config_check_model(&a, &b, err, sizeof err) != 0 && strstr(err, "vocab"));
}

/* A token data directory: the model takes its vocabulary; BPB of a validation window is
 * the NLL of the tokens covering it (the first the context) over the bytes the scored
 * tokens cover, against a brute force that walks every token's bytes itself. */
TEST(vocab_token_bpb_brute_force) {
    if (dm_tokenizer_missing()) {
        t_skip("%s", dm_tokenizer_missing());
        return;
    }
    char d[256], cmd[2048], err[4096];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, "cd %s && gzip -dc " T_CORPUS " | head -c 300000 > x.txt && "
             DM_CLI " prepare x.txt --out tok --vocab 600 --val-bytes 20000 > /dev/null 2>&1",
             d);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "prepare --vocab 600: %s", err);
    dm_corpus c;
    char p[512];
    snprintf(p, sizeof p, "%s/tok", d);
    CHECKF(dm_corpus_load(&c, p, err, sizeof err) == 0, "%s", err);
    CHECK(c.tok && c.vocab == 600 && c.width == 2);
    dm_config cfg = tiny(256, 0);
    CHECK(dm_corpus_vocab(&c, &cfg.vocab, 0, err, sizeof err) == 0 && cfg.vocab == 600);
    int v512 = 512;
    CHECK(dm_corpus_vocab(&c, &v512, 1, err, sizeof err) != 0 && strstr(err, "600"));
    long W = 3000;
    CHECKF(dm_corpus_split(&c, W, 32, err, sizeof err) == 0, "%s", err);
    dm_model *m = dm_model_create(&cfg, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    /* the batches are training tokens */
    uint16_t batch[4 * 33];
    dm_corpus_batch(&c, 1, 0, 4, 32, batch);
    const uint16_t *train = (const uint16_t *)c.ts[0].ids;
    int found = 0;
    for (size_t i = 0; i + 33 <= c.ts[0].n && !found; i++)
        found = !memcmp(train + i, batch, sizeof(uint16_t) * 33);
    CHECK(found);
    /* the brute force on windows of eval_windows=3 and on the last window */
    const uint16_t *val = (const uint16_t *)c.ts[1].ids;
    size_t n = c.ts[1].n;
    uint64_t *start = malloc((n + 1) * sizeof *start);
    start[0] = 0;
    for (size_t i = 0; i < n; i++)
        start[i + 1] = start[i] + (uint64_t)c.tok->len[val[i]];
    CHECK(start[n] == c.val_n);
    size_t offs[3];
    CHECK(dm_corpus_eval_offsets(c.val_n, (size_t)W, 3, DM_EVAL_WINDOW_SEED, offs) == 0);
    double nats = 0, bytes = 0, last_nats = 0, last_bytes = 0;
    for (int k = 0; k <= 3; k++) {
        size_t a = k < 3 ? offs[k] : c.val_n - (size_t)W, b = a + (size_t)W;
        size_t t0 = 0, t1 = 0;
        while (start[t0 + 1] <= a) t0++;  /* the token whose bytes hold a */
        t1 = t0;
        while (t1 < n && start[t1] < b) t1++; /* tokens overlapping [a, b) */
        /* the predictions of tokens t0 .. t1-1 in sequences of seq_len (32), as the
         * evaluation cuts any window */
        int T = (int)(t1 - t0 - 1);
        float *lg = malloc((size_t)32 * 600 * sizeof(float));
        double s = 0;
        for (int j = 0; j < T; j += 32) {
            int len = T - j < 32 ? T - j : 32;
            dm_model_forward(m, val + t0 + j, 1, len, lg);
            for (int t = 0; t < len; t++) {
                const float *x = lg + (size_t)t * 600;
                double mx = -INFINITY, e = 0;
                for (int v = 0; v < 600; v++) mx = fmax(mx, x[v]);
                for (int v = 0; v < 600; v++) e += exp((double)x[v] - mx);
                s += mx + log(e) - x[val[t0 + j + 1 + t]];
            }
        }
        free(lg);
        double scored = (double)(start[t1] - start[t0 + 1]);
        if (k < 3) nats += s, bytes += scored;
        else last_nats = s, last_bytes = scored;
    }
    size_t sc;
    double bpb3 = dm_eval_val(m, &c, W, 3, 4, 32, NULL, NULL, &sc);
    double bpb1 = dm_eval_val(m, &c, W, 1, 4, 32, NULL, NULL, &sc);
    double want3 = nats / bytes / log(2.0), want1 = last_nats / last_bytes / log(2.0);
    printf("  eval_windows=3: %.7f bpb, brute force %.7f; last window: %.7f, brute %.7f\n",
           bpb3, want3, bpb1, want1);
    CHECKF(fabs(bpb3 - want3) <= 1e-5 * want3, "%.8f vs %.8f", bpb3, want3);
    CHECKF(fabs(bpb1 - want1) <= 1e-5 * want1, "%.8f vs %.8f", bpb1, want1);
    free(start);
    dm_model_free(m);
    dm_corpus_free(&c);
    t_rmtree(d);
}

/* A run of tokens end to end: its checkpoint carries the tokenizer; a resume or eval on data
 * of another tokenizer is refused naming both checksums; a damaged checkpoint tokenizer is
 * refused; sample encodes the prompt, decodes the tokens and stops on bytes; eval on a text
 * file encodes it with the run's tokenizer. */
TEST(vocab_run_carries_its_tokenizer) {
    if (dm_tokenizer_missing()) {
        t_skip("%s", dm_tokenizer_missing());
        return;
    }
    char d[256], cmd[4096], out[16384], err[4096], log[300];
    t_tmpdir(d, sizeof d);
    snprintf(log, sizeof log, "%s/out.log", d);
    snprintf(cmd, sizeof cmd, "cd %s && gzip -dc " T_CORPUS " | head -c 200000 > a.txt && "
             "gzip -dc " T_CORPUS " | tail -c 200000 | tr 'a-m' 'n-z' > b.txt && "
             DM_CLI " prepare a.txt --out ta --vocab 400 --val-bytes 8000 && "
             DM_CLI " prepare b.txt --out tb --vocab 400 --val-bytes 8000 && "
             DM_CLI " prepare a.txt --out tu --vocab 400 --val-bytes 8000 --tokenizer-type "
             "unigram", d);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "prepare: %s", err);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data ta --out run " T_TINY
             " --set steps=3 --set eval_window=2048", d);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "train: %s", err);
    snprintf(cmd, sizeof cmd, "cmp %s/ta/tokenizer.model %s/run/ckpt-00000003/tokenizer.model",
             d, d);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "the checkpoint's tokenizer: %s", err);
    snprintf(cmd, sizeof cmd, "grep -q '\"vocab\":[[:space:]]*400' %s/run/config.json", d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    /* the other tokenizer: its checksum and the checkpoint's, exit 2 */
    char sa[DM_TOK_CHECKSUM_LEN + 8], sb[DM_TOK_CHECKSUM_LEN + 8], p[512];
    for (int i = 0; i < 2; i++) {
        size_t n;
        snprintf(p, sizeof p, "%s/%s/tokenizer.model", d, i ? "tb" : "ta");
        FILE *f = fopen(p, "rb");
        static char buf[1 << 20];
        n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        dm_tokenizer_checksum(buf, n, i ? sb : sa);
    }
    CHECK(strcmp(sa, sb) != 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " eval run --data tb", d);
    t_expect(cmd, 2, "is not the checkpoint's", NULL, 0);
    CHECK(t_run_out(cmd, log, out, sizeof out) == 2 && strstr(out, sa) && strstr(out, sb));
    /* a resume on the same text under another tokenizer (unigram): refused the same way */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --resume run --data tu --set steps=5",
             d);
    CHECKF(t_run_out(cmd, log, out, sizeof out) == 2 && strstr(out, sa) &&
           strstr(out, "not the checkpoint's"), "%s", out);
    /* eval on the text itself (--val: all of it the validation text, encoded with the
     * run's tokenizer as prepare encoded it): the same tokens, the same number */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " eval run --set eval_window=2048 && "
             DM_CLI " eval run --val ta/val.bin --set eval_window=2048", d);
    CHECKF(t_run_out(cmd, log, out, sizeof out) == 0, "%s", out);
    char *x = strstr(out, "val_bpb "), *y = x ? strstr(x + 1, "val_bpb ") : NULL;
    CHECKF(x && y && atof(x + 8) > 0 && atof(x + 8) == atof(y + 8), "%s", out);
    /* sample: the prompt's tokens in, bytes out; a stop string of bytes ends it */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " sample run --prompt 'And God' --len 200 "
             "--stop 'e'", d);
    CHECKF(t_run_out(cmd, log, out, sizeof out) == 0, "%s", out);
    size_t len = strlen(out);
    CHECKF(!strncmp(out, "And God", 7) && len >= 9 && out[len - 2] == 'e', "%s", out);
    CHECKF(strchr(out + 7, 'e') == out + len - 2, "stopped at the first generated 'e': %s", out);
    /* bench on the token data: the data's vocabulary, tokens/s and the bytes they stand for */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " bench --data ta " T_TINY " --set "
             "eval_window=2048 --reps 1", d);
    CHECKF(t_run_out(cmd, log, out, sizeof out) == 0 && strstr(out, "step tokens/s") &&
           strstr(out, "# tokens of vocab 400,") && strstr(out, "step bytes/s"), "%s", out);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " bench --data ta " T_TINY " --set vocab=512 "
             "--reps 1", d);
    t_expect(cmd, 2, "vocab=512, but the data's tokenizer", NULL, 0);
    /* a damaged tokenizer in the checkpoint: refused, naming it */
    snprintf(cmd, sizeof cmd, "cd %s && printf x >> run/ckpt-00000003/tokenizer.model && "
             DM_CLI " sample run --prompt a", d);
    t_expect(cmd, 2, "tokenizer.model is damaged", NULL, 0);
    t_rmtree(d);
}

/* plan times a model of tokens on ids below its vocabulary, and counts its logits */
TEST(vocab_plan_counts_the_vocabulary) {
    char out[16384], log[300], d[256], cmd[1024];
    t_tmpdir(d, sizeof d);
    snprintf(log, sizeof log, "%s/out.log", d);
    double total[2];
    const int V[2] = {256, 5000};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, DM_CLI " plan " T_TINY " --set vocab=%d --reps 1", V[i]);
        CHECKF(t_run_out(cmd, log, out, sizeof out) == 0, "%s", out);
        const char *t = strstr(out, "  total");
        total[i] = t ? atof(t + 7) : 0;
        CHECKF(t && strstr(out, "tokens/s"), "%s", out);
    }
    printf("  plan total: %.1f MiB at vocab 256, %.1f MiB at 5000\n", total[0], total[1]);
    CHECK(total[1] > total[0]);
    t_rmtree(d);
}

/* Under mpirun the ranks train a model of tokens as one process does: the same weights */
TEST(vocab_tokens_under_mpirun_same_weights) {
    if (!DM_MPIEXEC[0]) {
        t_skip("this build has no MPI (CMake found none; Debian: libopenmpi-dev openmpi-bin)");
        return;
    }
    if (dm_tokenizer_missing()) {
        t_skip("%s", dm_tokenizer_missing());
        return;
    }
    char d[256], cmd[8192], out[16384], log[300];
    t_tmpdir(d, sizeof d);
    snprintf(log, sizeof log, "%s/out.log", d);
    snprintf(cmd, sizeof cmd, "cd %s && gzip -dc " T_CORPUS " | head -c 150000 > a.txt && "
             DM_CLI " prepare a.txt --out t --vocab 400 --val-bytes 8000 && "
             DM_CLI " train --data t --out one " T_TINY " --set steps=3 --set grad_accum=2 "
             "--set eval_window=2048 && " T_MPIRUN " -np 2 " DM_CLI " train --data t --out two "
             T_TINY " --set steps=3 --set grad_accum=2 --set eval_window=2048 && "
             "cmp one/ckpt-00000003/model.safetensors two/ckpt-00000003/model.safetensors && "
             "cmp one/ckpt-00000003/tokenizer.model two/ckpt-00000003/tokenizer.model", d);
    int rc = t_run_out(cmd, log, out, sizeof out);
    CHECKF(rc == 0, "%s", out);
    t_rmtree(d);
}

#define AB_TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
                "--set gate_rank=8 --set batch_size=2 --set seq_len=32 --set threads=1"

/* ab compares vocabularies: a variant's own data directory (data=DIR) trains with that
 * data's vocabulary, scored on the same validation bytes as the control; a variant whose
 * validation text differs is refused before anything trains (exit 2) */
TEST(vocab_ab_arms_of_two_vocabularies) {
    if (dm_tokenizer_missing()) {
        t_skip("%s", dm_tokenizer_missing());
        return;
    }
    char d[256], cmd[4096], out[16384], err[4096], log[300];
    t_tmpdir(d, sizeof d);
    snprintf(log, sizeof log, "%s/out.log", d);
    snprintf(cmd, sizeof cmd, "cd %s && gzip -dc " T_CORPUS " | head -c 200000 > a.txt && "
             DM_CLI " prepare a.txt --out b --vocab 256 --val-bytes 8000 --val-split tail && "
             DM_CLI " prepare a.txt --out t --vocab 400 --val-bytes 8000 --val-split tail && "
             DM_CLI " prepare a.txt --out o --vocab 400 --val-bytes 9000 --val-split tail", d);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "prepare: %s", err);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " ab --dir ab --data b " AB_TINY " --set "
             "eval_window=2048 --steps 2 --seeds 1 --variant 'tok: data=t'", d);
    CHECKF(t_run_out(cmd, log, out, sizeof out) == 0 && strstr(out, "tok: data=t"), "%s", out);
    snprintf(cmd, sizeof cmd, "cd %s && grep -q '\"vocab\":[[:space:]]*400' ab/tok/seed1/"
             "config.json && grep -q '\"vocab\":[[:space:]]*256' ab/control/seed1/config.json"
             " && grep -q '\"data\":[[:space:]]*\"%s/t\"' ab/ab.json", d, d);
    CHECKF(t_run(cmd, err, sizeof err) == 0, "each arm its data's vocabulary: %s", err);
    /* run again: both cells are done, on their own data */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " ab --dir ab --data b " AB_TINY " --set "
             "eval_window=2048 --steps 2 --seeds 1 --variant 'tok: data=t'", d);
    CHECKF(t_run_out(cmd, log, out, sizeof out) == 0 && strstr(out, "control seed 1: cached") &&
           strstr(out, "tok seed 1: cached"), "%s", out);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " ab --dir ab2 --data b " AB_TINY " --set "
             "eval_window=2048 --steps 2 --seeds 1 --variant 'other: data=o'", d);
    t_expect(cmd, 2, "variant other: its validation text", NULL, 0);
    snprintf(cmd, sizeof cmd, "test ! -e %s/ab2/other", d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    t_rmtree(d);
}
