/* test_tokens.c — token data (docs/tokens.md): `prepare --vocab N` round-trips every byte
 * and its parallel encoding is the text's encoding; text that is not valid UTF-8, or that
 * the tokenizer cannot round-trip, is refused naming the file and the offset; the byte
 * vocabulary is the byte format, byte for byte; a damaged or missing tokenizer.model is
 * refused with exit 2; the tokens covering a byte window agree with a brute force, and for
 * the byte vocabulary they are the byte window; the Python SentencePiece reads the same. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/rng.h"
#include "check.h"
#include "io/tokens.h"

/* a test that needs SentencePiece in this build */
static int need_spm(void) {
    if (!dm_tokenizer_missing()) return 1;
    t_skip("%s", dm_tokenizer_missing());
    return 0;
}

static void sh_in(const char *d, const char *script) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && %s", d, script);
    CHECKF(t_run(cmd, NULL, 0) == 0, "failed: %s", script);
}

static int cli(const char *d, const char *args, char *out, size_t n) {
    char cmd[8192], log[300];
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " %s", d, args);
    snprintf(log, sizeof log, "%s/cli.log", d);
    int rc = t_run_out(cmd, log, out, n);
    printf("  [%d] dormouse %s\n%s", rc, args, out);
    return rc;
}

static cJSON *meta(const char *d, const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s/meta.json", d, dir);
    char *t = t_read_text(p);
    cJSON *o = t ? cJSON_Parse(t) : NULL;
    free(t);
    CHECKF(o != NULL, "%s: no meta.json", dir);
    return o;
}

/* A text with what a lossless tokenizer must keep: runs of spaces, tabs, CRLF, blank
 * lines, characters of 2, 3 and 4 bytes, a NUL, a line of 70,000 bytes (cut into
 * segments), and no newline at its end. */
static void write_text(const char *d) {
    sh_in(d, "zcat " T_CORPUS " | head -c 400000 > t.txt"
             " && printf '  two  spaces\\t\\ttabs \\r\\n\\n\\nh\\303\\251llo w\\303\\266rld "
             "\\342\\230\\203 \\346\\227\\245\\346\\234\\254 \\360\\237\\220\\255 "
             "nul:\\000:\\n' >> t.txt"
             " && (for i in $(seq 7000); do printf 'abcdefgh\\342\\202\\254'; done) >> t.txt"
             " && printf '\\n' >> t.txt"
             " && zcat " T_CORPUS " | head -c 120000 | tail -c 60000 >> t.txt"
             " && printf '  the end, no newline ' >> t.txt");
}

/* The ids of part of a token data directory (malloc'd, *n of them). */
static uint32_t *read_tok(const char *d, const char *dir, int part, int width, size_t *n) {
    char p[1200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s/%s", d, dir, DM_TOK_PART_NAME(part));
    uint8_t *b = (uint8_t *)t_slurp(p, &len);
    CHECKF(b && len % (size_t)width == 0, "%s: %zu bytes", p, len);
    *n = b ? len / (size_t)width : 0;
    uint32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) {
        ids[i] = 0;
        for (int k = 0; k < width; k++) ids[i] |= (uint32_t)b[i * width + k] << 8 * k;
    }
    free(b);
    return ids;
}

/* Every .tok of dir decodes to its .bin; the tokens are the text's encoding in one piece;
 * meta.json's numbers are the files'. */
static void check_round_trip(const char *d, const char *dir, int vocab) {
    char p[1200], err[1024];
    snprintf(p, sizeof p, "%s/%s", d, dir);
    dm_tokdata td;
    CHECKF(dm_tokdata_open(p, &td, err, sizeof err) == DM_DS_OK, "%s: %s", dir, err);
    if (!td.tok) return;
    CHECK(td.vocab == vocab && dm_tokenizer_vocab(td.tok) == vocab && td.width == 2);
    char sum[DM_TOK_CHECKSUM_LEN];
    dm_tokenizer_checksum(td.model, td.model_n, sum);
    CHECK(!strcmp(sum, td.checksum));
    cJSON *o = meta(d, dir);
    cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    CHECK(cJSON_GetObjectItemCaseSensitive(o, "format_version")->valueint == 2);
    for (int part = 0; part < 2; part++) {
        size_t n, tn;
        snprintf(p, sizeof p, "%s/%s/%s", d, dir, DM_PART_NAME(part));
        uint8_t *text = (uint8_t *)t_slurp(p, &tn);
        uint32_t *ids = read_tok(d, dir, part, td.width, &n);
        dm_bytes back = {0};
        dm_ids again = {0};
        CHECK(dm_tokenizer_decode(td.tok, ids, n, &back, err, sizeof err) == 0);
        CHECKF(back.n == tn && !memcmp(back.p, text, tn), "%s/%s: decode(encode(x)) != x",
               dir, DM_PART_NAME(part));
        /* each token's own bytes, one after another, are the text too */
        size_t at = 0;
        int same = 1;
        for (size_t i = 0; i < n && same; i++) {
            const uint8_t *pb;
            int len = dm_tokenizer_piece(td.tok, ids[i], &pb);
            same = len >= 0 && len == dm_tokenizer_piece_bytes(td.tok, ids[i]) &&
                   at + (size_t)len <= tn && !memcmp(pb, text + at, (size_t)len);
            at += len > 0 ? (size_t)len : 0;
        }
        CHECKF(same && at == tn, "%s/%s: the tokens' bytes differ from the text at byte %zu",
               dir, DM_PART_NAME(part), at);
        /* the parallel pieces of prepare encode as the whole text does */
        CHECK(dm_tokenizer_encode(td.tok, text, tn, &again, err, sizeof err) == 0);
        CHECKF(again.n == n && !memcmp(again.p, ids, n * sizeof *ids),
               "%s/%s: %zu tokens, the text encodes to %zu", dir, DM_PART_NAME(part), n,
               again.n);
        CHECK(td.part[part].tokens == n && td.part[part].text_bytes == tn);
        CHECK(n > 0 && (double)tn / (double)n > 1.5); /* the tokens do take several bytes */
        cJSON *e = cJSON_GetObjectItemCaseSensitive(tk, part ? "val" : "train");
        double bpt = cJSON_GetObjectItemCaseSensitive(e, "bytes_per_token")->valuedouble;
        CHECKF(bpt == (double)tn / (double)n, "%s: bytes_per_token %g", dir, bpt);
        free(text);
        free(ids);
        free(back.p);
        free(again.p);
    }
    cJSON_Delete(o);
    dm_tokdata_free(&td);
}

TEST(tokens_prepare_round_trips) {
    if (!need_spm()) return;
    char d[256], out[16384];
    t_tmpdir(d, sizeof d);
    write_text(d);
    CHECK(cli(d, "prepare t.txt --out b --vocab 600 --val-bytes 70000", out, sizeof out) == 0);
    CHECK(strstr(out, "training the tokenizer (bpe, vocab 600)") && strstr(out, "bytes per token"));
    check_round_trip(d, "b", 600);
    CHECK(strstr(out, "next:") && strstr(out, "train --data")); /* the model takes it */
    CHECK(cli(d, "prepare --help", out, sizeof out) == 0 && strstr(out, "--vocab N") &&
          strstr(out, "--tokenizer FILE.model") && strstr(out, "--tokenizer-type") &&
          strstr(out, "--tokenizer-sample") && strstr(out, "docs/tokens.md"));
    /* a unigram tokenizer trained on a sample of 1 MiB pieces; the same tokenizer reused
     * gives the same tokens */
    sh_in(d, "for i in 1 2 3 4 5; do cat t.txt; done > t3.txt");
    CHECK(cli(d, "prepare t3.txt --out u --vocab 700 --tokenizer-type unigram "
              "--tokenizer-sample 2097152", out, sizeof out) == 0);
    CHECK(strstr(out, "2 pieces of 1048576 bytes spread evenly") != NULL);
    check_round_trip(d, "u", 700);
    /* the same text, the same tokenizer and tokens, byte for byte, on one thread */
    CHECK(cli(d, "prepare t3.txt --out u1 --vocab 700 --tokenizer-type unigram "
              "--tokenizer-sample 2097152", out, sizeof out) == 0);
    sh_in(d, "OMP_NUM_THREADS=1 " DM_CLI " prepare t3.txt --out u2 --vocab 700 "
             "--tokenizer-type unigram --tokenizer-sample 2097152 > /dev/null 2>&1 && "
             "cmp u/tokenizer.model u1/tokenizer.model && cmp u/tokenizer.model "
             "u2/tokenizer.model && cmp u/train.tok u2/train.tok && cmp u/val.tok u2/val.tok");
    CHECK(cli(d, "prepare t3.txt --out r --tokenizer u/tokenizer.model", out, sizeof out) == 0);
    sh_in(d, "cmp u/tokenizer.model r/tokenizer.model && cmp u/train.tok r/train.tok && "
             "cmp u/val.tok r/val.tok");
    cJSON *o = meta(d, "u");
    cJSON *tz = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "tokens"),
                                                 "tokenizer");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(tz, "type")->valuestring, "unigram"));
    CHECK(cJSON_GetObjectItemCaseSensitive(tz, "trained_on_bytes")->valuedouble <= 2097152);
    cJSON_Delete(o);
    /* --vocab that is not the reused tokenizer's, and a vocabulary SentencePiece cannot
     * build from this text: one line, exit 2, nothing left */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare t.txt --out e1 --tokenizer "
             "u/tokenizer.model --vocab 900", d);
    t_expect(cmd, 2, "has 700 pieces", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare t.txt --out e2 --vocab 200000", d);
    t_expect(cmd, 2, "SentencePiece cannot train", NULL, 0);
    sh_in(d, "test ! -e e1 && test ! -e e2 && ! ls -d e2.partial-* 2>/dev/null");
    t_rmtree(d);
}

TEST(tokens_refuse_what_cannot_round_trip) {
    if (!need_spm()) return;
    char d[256], out[16384], cmd[4096], err[1024];
    t_tmpdir(d, sizeof d);
    /* b.txt's byte 5000 is 0xff: the offset named is in b.txt, the second source */
    sh_in(d, "zcat " T_CORPUS " | head -c 200000 > a.txt && mkdir src && "
             "zcat " T_CORPUS " | head -c 5000 > src/b.txt && printf '\\377' >> src/b.txt && "
             "zcat " T_CORPUS " | head -c 100000 >> src/b.txt");
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare a.txt src --out x --vocab 512", d);
    t_expect(cmd, 2, "src/b.txt: byte 5000 (train.bin byte 205000) is not valid UTF-8", err,
             sizeof err);
    CHECK(strstr(err, "--vocab 256") != NULL);
    /* tokens validate on the tail: a spread split asked for is refused, not ignored */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare a.txt --out y --val-split spread", d);
    t_expect(cmd, 2, "token data validates on the tail", NULL, 0);
    /* in the part that becomes val.bin: its offset in val.bin too */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare a.txt src --out x --vocab 512 "
             "--val-bytes 100001", d);
    t_expect(cmd, 2, "src/b.txt: byte 5000 (val.bin byte 0) is not valid UTF-8", NULL, 0);
    /* a cut sequence: the first byte of a 3-byte character at the end of a file */
    sh_in(d, "head -c 3000 a.txt > c.txt && printf 'ab\\342\\202' >> c.txt");
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare a.txt c.txt --out x --vocab 512 "
             "--val-bytes 1002", d);
    t_expect(cmd, 2, "c.txt: byte 3002 (val.bin byte 1000) is not valid UTF-8", NULL, 0);
    /* valid UTF-8 the tokenizer cannot give back: U+2581, which SentencePiece uses for the
     * space, decodes to a space */
    sh_in(d, "head -c 100000 a.txt > l.txt && printf 'x \\342\\226\\201 y\\n' >> l.txt && "
             "head -c 5000 a.txt >> l.txt");
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare l.txt --out x --vocab 512 "
             "--val-bytes 1000", d);
    t_expect(cmd, 2, "l.txt: byte 100002 (train.bin byte 100002) cannot be round-tripped", NULL, 0);
    sh_in(d, "test ! -e x && ! ls -d x.partial-* 2>/dev/null");
    /* the bytes take any of it */
    CHECK(cli(d, "prepare a.txt src --out y --vocab 256", out, sizeof out) == 0);
    /* the UTF-8 rule itself: a few cases of each kind of error */
    static const struct {
        const char *s;
        size_t len, bad;
    } u[] = {{"abc", 3, 3}, {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x90\xad", 9, 9},
             {"a\xc0\xaf", 3, 1},         /* overlong 2-byte */
             {"a\xe0\x80\xaf", 4, 1},     /* overlong 3-byte */
             {"ab\xed\xa0\x80", 5, 2},    /* a surrogate */
             {"\xf4\x90\x80\x80", 4, 0},  /* above U+10FFFF */
             {"x\x80", 2, 1},             /* a lone continuation */
             {"\xe2\x82", 2, 0},          /* cut by the end */
             {"\xe2\x28\xa1", 3, 0},      /* a bad continuation */
             {"ok\xf5\x80\x80\x80", 6, 2}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        CHECKF(dm_utf8_invalid((const uint8_t *)u[i].s, u[i].len) == u[i].bad,
               "case %zu: %zu, expected %zu", i,
               dm_utf8_invalid((const uint8_t *)u[i].s, u[i].len), u[i].bad);
    t_rmtree(d);
}

TEST(tokens_byte_vocab_is_the_byte_format) {
    char d[256], out[16384];
    t_tmpdir(d, sizeof d);
    sh_in(d, "zcat " T_CORPUS " | head -c 300000 > x.txt && printf 'raw \\377 bytes' >> x.txt");
    CHECK(cli(d, "prepare --vocab 256 x.txt --out a --val-bytes 5000 --val-split tail", out,
              sizeof out) == 0);
    /* without --vocab, text is made tokens: these bytes are refused, naming --vocab 256 */
    if (!dm_tokenizer_missing()) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare x.txt --out c --val-bytes 5000", d);
        char err[4096];
        t_expect(cmd, 2, "is not valid UTF-8", err, sizeof err);
        CHECKF(strstr(err, "--vocab 256 trains on the bytes") != NULL, "%s", err);
    }
    CHECK(cli(d, "prepare x.txt --out b --val-bytes 5000 --vocab 256 --val-split tail", out,
              sizeof out) == 0);
    sh_in(d, "cmp a/train.bin b/train.bin && cmp a/val.bin b/val.bin && "
             "cat a/train.bin a/val.bin | cmp - x.txt && "
             "test \"$(ls a | tr '\\n' ' ')\" = 'meta.json train.bin val.bin ' && "
             "test \"$(ls b | tr '\\n' ' ')\" = 'meta.json train.bin val.bin '");
    /* meta.json: the same, but for when each was made; version 1, the byte format's fields */
    cJSON *ma = meta(d, "a"), *mb = meta(d, "b");
    static const char *const fields[] = {"format", "format_version", "dormouse_version",
                                         "created", "train", "val", "total_bytes", "split",
                                         "shuffle_files_seed", "binary", "include", "exclude",
                                         "sources", "skipped"};
    int nf = 0;
    for (cJSON *e = ma ? ma->child : NULL; e; e = e->next, nf++) {
        int known = 0;
        for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
            known |= !strcmp(e->string, fields[i]);
        CHECKF(known, "meta.json has a field of its own: %s", e->string);
    }
    CHECK(nf == (int)(sizeof fields / sizeof *fields));
    CHECK(cJSON_GetObjectItemCaseSensitive(ma, "format_version")->valueint == 1);
    char p[1200], err[512];
    dm_tokdata td;
    snprintf(p, sizeof p, "%s/b", d);
    CHECK(dm_tokdata_open(p, &td, err, sizeof err) == DM_DS_NONE); /* no tokens in it */
    const char *vol[] = {"created"};
    for (int i = 0; i < 1 && ma && mb; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(ma, vol[i]);
        cJSON_DeleteItemFromObjectCaseSensitive(mb, vol[i]);
    }
    for (int k = 0; k < 2 && ma && mb; k++) {
        const char *part = k ? "val" : "train";
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(ma, part),
                                                "mtime_ns");
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(mb, part),
                                                "mtime_ns");
    }
    CHECK(cJSON_Compare(ma, mb, 1));
    cJSON_Delete(ma);
    cJSON_Delete(mb);
    /* and it trains, as before */
    CHECK(cli(d, "train --data b --out run " T_TINY " --set steps=1", out, sizeof out) == 0);
    t_rmtree(d);
}

TEST(tokens_damaged_tokenizer_refused) {
    if (!need_spm()) return;
    char d[256], out[16384], cmd[4096], err[1024];
    t_tmpdir(d, sizeof d);
    sh_in(d, "zcat " T_CORPUS " | head -c 200000 > x.txt");
    CHECK(cli(d, "prepare x.txt --out good --vocab 400 --val-bytes 5000", out, sizeof out) == 0);
    struct {
        const char *name, *damage, *needle;
    } cases[] = {
        {"gone", "rm gone/tokenizer.model", "tokenizer.model is missing or unreadable"},
        {"flip", "printf X | dd of=flip/tokenizer.model bs=1 seek=300 conv=notrunc status=none",
         "tokenizer.model is damaged: its checksum is xxh64:"},
        {"short", "truncate -s -10 short/tokenizer.model", "is damaged: its checksum is"},
        {"tok", "truncate -s -2 tok/val.tok", "val.tok has"},
        {"rec", "sed -i 's/\"token_bytes\"/\"token_width\"/' rec/meta.json",
         "\"tokens\" record"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char s[2048];
        snprintf(s, sizeof s, "cp -a good %s && %s", cases[i].name, cases[i].damage);
        sh_in(d, s);
        snprintf(s, sizeof s, "%s/%s", d, cases[i].name);
        dm_tokdata td;
        CHECKF(dm_tokdata_open(s, &td, err, sizeof err) == DM_DS_BAD &&
               strstr(err, cases[i].needle), "%s: %s", cases[i].name, err);
        /* the command: one line, exit 2 */
        snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data %s --out run_%s " T_TINY,
                 d, cases[i].name, cases[i].name);
        t_expect(cmd, 2, cases[i].needle, NULL, 0);
    }
    /* bytes that are not a SentencePiece model, under their own checksum */
    char p[1200], sum[DM_TOK_CHECKSUM_LEN];
    dm_tokenizer_checksum("not a model", 11, sum);
    snprintf(p, sizeof p, "cp -a good junk && printf 'not a model' > junk/tokenizer.model && "
             "sed -i \"s/xxh64:[0-9a-f]*/%s/\" junk/meta.json", sum);
    sh_in(d, p);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data junk --out run_junk " T_TINY, d);
    t_expect(cmd, 2, "junk/tokenizer.model cannot be loaded: not a SentencePiece model", NULL, 0);
    /* a sound token directory sets the model's vocabulary; another one asked for is refused */
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data good --out run_bad " T_TINY
             " --set vocab=512", d);
    t_expect(cmd, 2, "vocab=512, but the data's tokenizer", NULL, 0);
    snprintf(p, sizeof p, "%s/good", d);
    dm_tokdata td;
    dm_tokstream s;
    CHECK(dm_tokdata_open(p, &td, err, sizeof err) == DM_DS_OK && td.vocab == 400);
    CHECK(dm_tokdata_verify(&td, err, sizeof err) == 0);
    CHECK(dm_tokdata_stream(&td, 1, &s, err, sizeof err) == 0 && s.bytes == 5000);
    dm_tokstream_free(&s);
    dm_tokdata_free(&td);
    /* a .tok of the right size whose ids changed: --verify-data's CRC finds it; the first
     * token made <unk> (no bytes) no longer covers val.bin */
    sh_in(d, "cp -a good ids && printf '\\000\\000' | dd of=ids/val.tok bs=1 conv=notrunc "
             "status=none");
    snprintf(p, sizeof p, "%s/ids", d);
    CHECK(dm_tokdata_open(p, &td, err, sizeof err) == DM_DS_OK);
    CHECKF(dm_tokdata_verify(&td, err, sizeof err) == 1 &&
           strstr(err, "--verify-data: val.tok is damaged: its CRC-32 is"), "%s", err);
    CHECKF(dm_tokdata_stream(&td, 1, &s, err, sizeof err) == 1 &&
           strstr(err, "val.tok is damaged: its tokens cover"), "%s", err);
    CHECK(dm_tokdata_stream(&td, 0, &s, err, sizeof err) == 0 && s.bytes == 195000);
    dm_tokstream_free(&s);
    dm_tokdata_free(&td);
    /* the PyTorch twin takes it as a data directory (its tokens: python_twin_reads_token_runs) */
    if (t_run("/usr/bin/python3 -c 'import torch, numpy'", NULL, 0) == 0) {
        snprintf(cmd, sizeof cmd, "cd %s && /usr/bin/python3 -c \"import sys; sys.path.insert("
                 "0, '" DM_SOURCE_DIR "/python'); import dormouse; "
                 "sys.exit(0 if dormouse.is_data_dir('good') else 3)\"", d);
        CHECK(t_run(cmd, NULL, 0) == 0);
    } else {
        printf("  (the twin not checked: /usr/bin/python3 has no torch)\n");
    }
    t_rmtree(d);
}

/* ---- the tokens covering a byte window ---------------------------------------------- */

/* brute force: every token's offset, then the definition itself */
static void brute_cover(const uint64_t *off, size_t n, uint64_t a, uint64_t b, dm_cover *c) {
    size_t t0 = 0, t1 = 0;
    while (t0 < n && off[t0 + 1] <= a) t0++;          /* the first token ending after a */
    for (size_t i = 0; i < n; i++) if (off[i] < b) t1 = i + 1; /* the last starting before b */
    c->t0 = t0;
    c->t1 = t1;
    c->b0 = off[t0];
    c->b1 = off[t1];
    c->scored_bytes = off[t1] - off[t0 + 1];
}

TEST(tokens_cover_matches_brute_force) {
    dm_rng r;
    dm_rng_seed(&r, 33, 0);
    for (int width = 1; width <= 4; width *= 2) {
        enum { V = 300, N = 5000 };
        int32_t len[V];
        int vocab = width == 1 ? 256 : V;
        for (int v = 0; v < vocab; v++) /* a few pieces of no bytes (control pieces) */
            len[v] = width == 1 ? 1 : v % 37 == 0 ? 0 : 1 + (int32_t)dm_rng_below(&r, 9);
        uint8_t ids[N * 4];
        uint64_t off[N + 1];
        off[0] = 0;
        for (size_t i = 0; i < N; i++) {
            uint32_t id = (uint32_t)dm_rng_below(&r, (uint64_t)vocab);
            if (i == 0 && len[id] == 0) id = 1;
            for (int k = 0; k < width; k++) ids[i * width + k] = (uint8_t)(id >> 8 * k);
            off[i + 1] = off[i] + (uint64_t)len[id];
        }
        dm_tokstream s;
        char err[256];
        CHECK(dm_tokstream_init(&s, ids, width, N, len, vocab, err, sizeof err) == 0);
        CHECK(s.bytes == off[N]);
        for (int k = 0; k < 3000; k++) {
            uint64_t a = dm_rng_below(&r, off[N]), b = a + 1 + dm_rng_below(&r, k % 2 ? 40 : 3000);
            if (k == 0) a = 0, b = off[N]; /* all of it */
            if (b > off[N]) b = off[N];
            dm_cover c, w;
            CHECK(dm_tokstream_cover(&s, a, b, &c) == 0);
            brute_cover(off, N, a, b, &w);
            CHECKF(c.t0 == w.t0 && c.t1 == w.t1 && c.b0 == w.b0 && c.b1 == w.b1 &&
                   c.scored_bytes == w.scored_bytes,
                   "width %d [%llu, %llu): [%zu, %zu) %llu..%llu %llu, brute [%zu, %zu) "
                   "%llu..%llu %llu", width, (unsigned long long)a, (unsigned long long)b,
                   c.t0, c.t1, (unsigned long long)c.b0, (unsigned long long)c.b1,
                   (unsigned long long)c.scored_bytes, w.t0, w.t1, (unsigned long long)w.b0,
                   (unsigned long long)w.b1, (unsigned long long)w.scored_bytes);
            CHECK(c.b0 <= a && b <= c.b1);
            if (width == 1) /* the bytes: the byte window, its first byte the context */
                CHECK(c.t0 == a && c.t1 == b && c.scored_bytes == b - a - 1);
        }
        /* eval_windows=all: windows each starting at the last byte of the one before score
         * every token but the first exactly once */
        uint64_t W = 777, scored = 0, a = 0;
        size_t next = 1;
        for (;;) {
            uint64_t b = a + W < off[N] ? a + W : off[N];
            dm_cover c;
            CHECK(dm_tokstream_cover(&s, a, b, &c) == 0);
            CHECKF(c.t0 + 1 == next || c.t1 <= next, "window [%llu, %llu) scores from token "
                   "%zu, expected %zu", (unsigned long long)a, (unsigned long long)b,
                   c.t0 + 1, next);
            if (c.t1 > next) next = c.t1, scored += c.scored_bytes;
            if (b == off[N]) break;
            a = b - 1;
        }
        CHECK(next == N && scored == off[N] - off[1]);
        /* windows out of the text */
        dm_cover c;
        CHECK(dm_tokstream_cover(&s, 5, 5, &c) == 1 &&
              dm_tokstream_cover(&s, 0, off[N] + 1, &c) == 1);
        dm_tokstream_free(&s);
        /* an id out of the vocabulary */
        uint8_t badid[4] = {0xff, 0xff, 0xff, 0x7f};
        CHECK(dm_tokstream_init(&s, badid, width, 1, len, vocab, err, sizeof err) ==
              (width == 1 ? 0 : 1));
        dm_tokstream_free(&s);
    }
}

TEST(tokens_cover_real_text) {
    if (!need_spm()) return;
    char d[256], out[16384], err[1024], p[1200];
    t_tmpdir(d, sizeof d);
    write_text(d);
    CHECK(cli(d, "prepare t.txt --out b --vocab 500 --val-bytes 100000", out, sizeof out) == 0);
    snprintf(p, sizeof p, "%s/b", d);
    dm_tokdata td;
    CHECKF(dm_tokdata_open(p, &td, err, sizeof err) == DM_DS_OK, "%s", err);
    if (!td.tok) return;
    size_t n, tn;
    uint32_t *ids = read_tok(d, "b", 1, td.width, &n);
    snprintf(p, sizeof p, "%s/b/val.bin", d);
    uint8_t *text = (uint8_t *)t_slurp(p, &tn);
    dm_tokstream s;
    CHECKF(dm_tokdata_stream(&td, 1, &s, err, sizeof err) == 0, "%s", err);
    CHECK(s.bytes == tn && s.n == n);
    /* the covering tokens decode to the bytes they cover, which hold the window */
    dm_rng r;
    dm_rng_seed(&r, 7, 0);
    for (int k = 0; k < 200; k++) {
        uint64_t a = dm_rng_below(&r, tn - 1), b = a + 1 + dm_rng_below(&r, 5000);
        if (b > tn) b = tn;
        dm_cover c;
        dm_bytes back = {0};
        CHECK(dm_tokstream_cover(&s, a, b, &c) == 0);
        CHECK(dm_tokenizer_decode(td.tok, ids + c.t0, c.t1 - c.t0, &back, err, sizeof err) == 0);
        CHECKF(back.n == c.b1 - c.b0 && !memcmp(back.p, text + c.b0, back.n),
               "[%llu, %llu): tokens [%zu, %zu) decode to %zu bytes, cover %llu",
               (unsigned long long)a, (unsigned long long)b, c.t0, c.t1, back.n,
               (unsigned long long)(c.b1 - c.b0));
        CHECK(c.b0 <= a && b <= c.b1);
        free(back.p);
    }
    dm_tokstream_free(&s);
    free(ids);
    free(text);
    dm_tokdata_free(&td);
    t_rmtree(d);
}

/* The PyTorch twin's side reads the same: Python's SentencePiece (python3-sentencepiece)
 * loads tokenizer.model, encodes val.bin a segment at a time to val.tok's ids and decodes
 * them to val.bin. */
TEST(tokens_python_sentencepiece_agrees) {
    if (!need_spm()) return;
    if (t_run("/usr/bin/python3 -c 'import sentencepiece'", NULL, 0) != 0) {
        t_skip("/usr/bin/python3 has no sentencepiece "
               "(Debian: python3-sentencepiece)");
        return;
    }
    char d[256], out[16384];
    t_tmpdir(d, sizeof d);
    write_text(d);
    CHECK(cli(d, "prepare t.txt --out b --vocab 500 --val-bytes 100000", out, sizeof out) == 0);
    sh_in(d, "cat > check.py <<'EOF'\n"
             "import array, sentencepiece as spm\n"
             "sp = spm.SentencePieceProcessor(model_file='b/tokenizer.model')\n"
             "text = open('b/val.bin', 'rb').read()\n"
             "ids, pos = [], 0\n"
             "while pos < len(text):  # a segment: a line with its newline, cut at 65536 bytes\n"
             "    end = text.find(b'\\n', pos, pos + 65536)\n"
             "    end = end + 1 if end >= 0 else min(len(text), pos + 65536)\n"
             "    while end < len(text) and end > pos and (text[end] & 0xC0) == 0x80: end -= 1\n"
             "    ids += sp.encode(text[pos:end].decode('utf-8'))\n"
             "    pos = end\n"
             "tok = array.array('H', open('b/val.tok', 'rb').read())\n"
             "assert list(tok) == ids, (len(tok), len(ids))\n"
             "assert sp.decode(ids).encode('utf-8') == text\n"
             "print('python agrees:', len(ids), 'tokens')\n"
             "EOF\n"
             "/usr/bin/python3 check.py");
    t_rmtree(d);
}
