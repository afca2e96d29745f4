/* tokens.c — see tokens.h. */
#include "io/tokens.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/dataset.h"
#include "io/files.h"

/* meta.json's record of one .tok: {"tokens": N, "text_bytes": N, "crc32": "xxxxxxxx"} */
static int read_tokpart(cJSON *o, const char *key, dm_tokpart *p) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(o, key);
    cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "tokens"),
          *b = cJSON_GetObjectItemCaseSensitive(e, "text_bytes"),
          *c = cJSON_GetObjectItemCaseSensitive(e, "crc32");
    if (!cJSON_IsNumber(n) || n->valuedouble < 0 || !cJSON_IsNumber(b) || b->valuedouble < 0 ||
        !cJSON_IsString(c) || strlen(c->valuestring) != 8)
        return 1;
    char *end;
    p->crc = (uint32_t)strtoul(c->valuestring, &end, 16);
    p->tokens = (uint64_t)n->valuedouble;
    p->text_bytes = (uint64_t)b->valuedouble;
    return *end != 0;
}

/* meta.json: 0 bytes (format_version 1), 1 tokens read into t, -1 damaged (err) */
static int read_meta(const char *dir, dm_tokdata *t, char *err, size_t errlen) {
    char p[4200], e2[512];
    snprintf(p, sizeof p, "%s/meta.json", dir);
    char *text = dm_read_file(p, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "%s", e2);
        return -1;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "format_version");
    if (!cJSON_IsNumber(ver) || ver->valueint != DM_TOKENS_FORMAT_VERSION) {
        int bytes = cJSON_IsNumber(ver) && ver->valueint == DM_DATASET_VERSION;
        cJSON_Delete(o);
        return bytes ? 0 : -1;
    }
    cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    cJSON *v = cJSON_GetObjectItemCaseSensitive(tk, "vocab"),
          *w = cJSON_GetObjectItemCaseSensitive(tk, "token_bytes"),
          *tz = cJSON_GetObjectItemCaseSensitive(tk, "tokenizer");
    cJSON *ty = cJSON_GetObjectItemCaseSensitive(tz, "type"),
          *cs = cJSON_GetObjectItemCaseSensitive(tz, "checksum");
    int rc = 1;
    if (!cJSON_IsNumber(v) || v->valuedouble < 257 || v->valuedouble > 1e9 ||
        !cJSON_IsNumber(w) || (w->valueint != 2 && w->valueint != 4) ||
        !cJSON_IsString(ty) || !cJSON_IsString(cs) ||
        strlen(cs->valuestring) != DM_TOK_CHECKSUM_LEN - 1 ||
        read_tokpart(tk, "train", &t->part[0]) || read_tokpart(tk, "val", &t->part[1])) {
        snprintf(err, errlen, "%s is damaged: its \"tokens\" record (vocab, token_bytes, "
                 "tokenizer, train, val) is missing or malformed", p);
        rc = -1;
    } else {
        t->vocab = v->valueint;
        t->width = w->valueint;
        snprintf(t->type, sizeof t->type, "%s", ty->valuestring);
        snprintf(t->checksum, sizeof t->checksum, "%s", cs->valuestring);
    }
    cJSON_Delete(o);
    return rc;
}

int dm_tokdata_open(const char *dir, dm_tokdata *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    if (errlen) err[0] = 0;
    int m = read_meta(dir, t, err, errlen);
    if (m <= 0) {
        if (m < 0 && !*err)
            snprintf(err, errlen, "%s/meta.json is damaged: its format_version is neither %d "
                     "(bytes) nor %d (tokens)", dir, DM_DATASET_VERSION,
                     DM_TOKENS_FORMAT_VERSION);
        return m < 0 ? DM_DS_BAD : DM_DS_NONE;
    }
    char p[4200], e2[4400], have[DM_TOK_CHECKSUM_LEN];
    snprintf(p, sizeof p, "%s/%s", dir, DM_TOKENIZER_FILE);
    t->model = (uint8_t *)dm_read_file_n(p, &t->model_n, e2, sizeof e2);
    if (!t->model) {
        snprintf(err, errlen, "%s is damaged: %s is missing or unreadable (%s); prepare the "
                 "data again", dir, DM_TOKENIZER_FILE, e2);
        goto bad;
    }
    dm_tokenizer_checksum(t->model, t->model_n, have);
    if (strcmp(have, t->checksum)) {
        snprintf(err, errlen, "%s is damaged: its checksum is %s, meta.json records %s; "
                 "prepare the data again", p, have, t->checksum);
        goto bad;
    }
    t->tok = dm_tokenizer_load(t->model, t->model_n, e2, sizeof e2);
    if (!t->tok) {
        snprintf(err, errlen, "%s cannot be loaded: %s", p, e2);
        goto bad;
    }
    if (dm_tokenizer_vocab(t->tok) != t->vocab) {
        snprintf(err, errlen, "%s is damaged: its vocabulary is %d, meta.json records %d", p,
                 dm_tokenizer_vocab(t->tok), t->vocab);
        goto bad;
    }
    t->len = malloc((size_t)t->vocab * sizeof *t->len);
    if (!t->len) {
        snprintf(err, errlen, "out of memory");
        goto bad;
    }
    for (int v = 0; v < t->vocab; v++) t->len[v] = dm_tokenizer_piece_bytes(t->tok, (uint32_t)v);
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    for (int i = 0; i < 2; i++) {
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, DM_TOK_PART_NAME(i));
        uint64_t want = t->part[i].tokens * (uint64_t)t->width;
        if (stat(p, &st) != 0) {
            snprintf(err, errlen, "%s is damaged: %s is missing (%s)", dir, DM_TOK_PART_NAME(i),
                     strerror(errno));
            goto bad;
        }
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != want) {
            snprintf(err, errlen, "%s is damaged: %s has %lld bytes, meta.json records %llu "
                     "tokens of %d bytes", dir, DM_TOK_PART_NAME(i), (long long)st.st_size,
                     (unsigned long long)t->part[i].tokens, t->width);
            goto bad;
        }
    }
    return DM_DS_OK;
bad:
    dm_tokdata_free(t);
    return DM_DS_BAD;
}

void dm_tokdata_free(dm_tokdata *t) {
    if (t->tok) dm_tokenizer_free(t->tok);
    free(t->model);
    free(t->len);
    for (int i = 0; i < 2; i++)
        if (t->map[i]) munmap(t->map[i], t->map_n[i]);
    memset(t->map, 0, sizeof t->map);
    t->tok = NULL;
    t->model = NULL;
    t->len = NULL;
}

/* Map part's .tok: *m (NULL for no tokens). 0 ok, else err. */
static int map_file(const dm_tokdata *t, int part, void **m, size_t *mn, char *err,
                    size_t errlen) {
    *m = NULL;
    *mn = (size_t)(t->part[part].tokens * (uint64_t)t->width);
    if (!*mn) return 0;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", t->dir, DM_TOK_PART_NAME(part));
    int fd = dm_open_regular(p, "token file", err, errlen);
    if (fd < 0) return 1;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size == *mn;
    void *r = ok ? mmap(NULL, *mn, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (r == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", p, ok ? strerror(errno) : "its size changed");
        return 1;
    }
    *m = r;
    return 0;
}

int dm_tokdata_verify(const dm_tokdata *t, char *err, size_t errlen) {
    for (int i = 0; i < 2; i++) {
        void *m;
        size_t n;
        if (map_file(t, i, &m, &n, err, errlen)) return 1;
        uint32_t crc = dm_crc32(0, m, n);
        if (m) munmap(m, n);
        if (crc != t->part[i].crc) {
            snprintf(err, errlen, "--verify-data: %s is damaged: its CRC-32 is %08x, meta.json "
                     "records %08x; prepare the data again", DM_TOK_PART_NAME(i),
                     (unsigned)crc, (unsigned)t->part[i].crc);
            return 1;
        }
    }
    return 0;
}

int dm_tokdata_stream(dm_tokdata *t, int part, dm_tokstream *s, char *err, size_t errlen) {
    if (!t->map[part] && map_file(t, part, &t->map[part], &t->map_n[part], err, errlen))
        return 1;
    char e2[256];
    if (dm_tokstream_init(s, t->map[part], t->width, (size_t)t->part[part].tokens, t->len,
                          t->vocab, e2, sizeof e2)) {
        snprintf(err, errlen, "%s/%s is damaged: %s", t->dir, DM_TOK_PART_NAME(part), e2);
        return 1;
    }
    if (s->bytes != t->part[part].text_bytes) {
        snprintf(err, errlen, "%s/%s is damaged: its tokens cover %llu bytes, %s has %llu",
                 t->dir, DM_TOK_PART_NAME(part), (unsigned long long)s->bytes,
                 DM_PART_NAME(part), (unsigned long long)t->part[part].text_bytes);
        dm_tokstream_free(s);
        return 1;
    }
    return 0;
}

/* ---- the bytes each token covers ---------------------------------------------------- */

uint32_t dm_tokstream_id(const dm_tokstream *s, size_t i) {
    const uint8_t *p = s->ids + i * (size_t)s->width;
    switch (s->width) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default: return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                    (uint32_t)p[3] << 24;
    }
}

int dm_tokstream_init(dm_tokstream *s, const void *ids, int width, size_t n,
                      const int32_t *len, int vocab, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    *s = (dm_tokstream){.ids = ids, .width = width, .n = n, .len = len, .vocab = vocab};
    s->n_mark = n / DM_TOK_MARK + 1;
    s->mark = malloc(s->n_mark * sizeof *s->mark);
    if (!s->mark) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % DM_TOK_MARK == 0) s->mark[i / DM_TOK_MARK] = off;
        uint32_t id = dm_tokstream_id(s, i);
        if (id >= (uint32_t)vocab) {
            snprintf(err, errlen, "token %zu is %u, out of the vocabulary (%d)", i,
                     (unsigned)id, vocab);
            dm_tokstream_free(s);
            return 1;
        }
        off += (uint64_t)len[id];
    }
    if (n % DM_TOK_MARK == 0) s->mark[n / DM_TOK_MARK] = off;
    s->bytes = off;
    return 0;
}

void dm_tokstream_free(dm_tokstream *s) {
    free(s->mark);
    s->mark = NULL;
}

/* The first token i whose bytes end after x (ends_after) or begin at or after x (not):
 * the index of the mark before x, then a walk of at most DM_TOK_MARK tokens; *at is the
 * byte offset where token i begins. */
static size_t find(const dm_tokstream *s, uint64_t x, int ends_after, uint64_t *at) {
    size_t lo = 0, hi = s->n_mark; /* the last mark at or before x (strictly before: !ends) */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (ends_after ? s->mark[mid] <= x : s->mark[mid] < x) lo = mid;
        else hi = mid;
    }
    size_t i = lo * DM_TOK_MARK;
    uint64_t off = s->mark[lo];
    for (; i < s->n; i++) {
        uint64_t end = off + (uint64_t)s->len[dm_tokstream_id(s, i)];
        if (ends_after ? end > x : off >= x) break;
        off = end;
    }
    *at = off;
    return i;
}

int dm_tokstream_cover(const dm_tokstream *s, uint64_t a, uint64_t b, dm_cover *c) {
    if (!(a < b && b <= s->bytes)) return 1;
    c->t0 = find(s, a, 1, &c->b0);
    c->t1 = find(s, b, 0, &c->b1);
    if (c->t1 == s->n) c->b1 = s->bytes;
    c->scored_bytes = c->b1 - c->b0 - (uint64_t)s->len[dm_tokstream_id(s, c->t0)];
    return 0;
}
