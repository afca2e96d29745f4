/* data.c — corpus loading (in memory or mapped), split and batches. */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED): posix_madvise's DONTNEED does nothing */
#include "io/data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/text.h"
#include "io/files.h"
#include "io/source.h"
#include "dormouse.h"
#include "io/tokens.h"

/* ---- in memory ---------------------------------------------------------------------- */

typedef struct {
    dm_corpus *c;
    size_t cap;
} mem_sink;

/* append p[0, n) to the corpus bytes (1: out of memory) */
static int mem_append(void *ctx, const uint8_t *p, size_t n) {
    mem_sink *s = ctx;
    dm_corpus *c = s->c;
    if (s->cap - c->n < n) {
        size_t ncap = s->cap ? s->cap : (8u << 20);
        while (ncap - c->n < n) ncap *= 2;
        uint8_t *nb = realloc(c->bytes, ncap);
        if (!nb) return 2;
        c->bytes = nb;
        s->cap = ncap;
    }
    memcpy(c->bytes + c->n, p, n);
    c->n += n;
    return 0;
}

/* Append the file at path (io/source.h: plain or gzip, read to its end); a binary one is
 * kept, with a note. */
static int append_file(mem_sink *s, const char *path, char *err, size_t errlen) {
    size_t before = s->c->n;
    int rc = dm_source_read(path, mem_append, s, NULL, err, errlen);
    if (rc == 2) snprintf(err, errlen, "out of memory reading %s", path);
    if (rc) return 1;
    if (dm_is_binary(s->c->bytes + before, s->c->n - before))
        dm_text_append(&s->c->notes, "note: %s looks binary (a NUL byte in its first %d bytes); "
                       "--data trains on it as it is, while `dormouse prepare` leaves such files "
                       "out (name the text files, or prepare the directory)", path,
                       DM_BINARY_PROBE);
    s->c->n_files++;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* a directory's regular files, sorted by name, concatenated (not recursive) */
static int load_dir(mem_sink *s, const char *path, char *err, size_t errlen) {
    DIR *d = opendir(path);
    if (!d) {
        snprintf(err, errlen, "cannot open corpus directory %s: %s", path, strerror(errno));
        return 1;
    }
    char **names = NULL;
    size_t nn = 0, ncap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *full = malloc(len);
        if (!full) break;
        snprintf(full, len, "%s/%s", path, e->d_name);
        struct stat fs;
        if (stat(full, &fs) != 0 || !S_ISREG(fs.st_mode)) {
            dm_text_append(&s->c->notes, "note: %s skipped: %s", full, stat(full, &fs) != 0 ?
                           "cannot stat it" : S_ISDIR(fs.st_mode) ? "a directory (a corpus "
                           "directory is not read recursively; `dormouse prepare` is)"
                           : "not a regular file");
            free(full);
            continue;
        }
        if (nn == ncap) {
            ncap = ncap ? 2 * ncap : 64;
            char **nb = realloc(names, ncap * sizeof *names);
            if (!nb) { free(full); break; }
            names = nb;
        }
        names[nn++] = full;
    }
    closedir(d);
    if (nn > 1) qsort(names, nn, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < nn; i++) {
        if (!rc) rc = append_file(s, names[i], err, errlen);
        free(names[i]);
    }
    free(names);
    if (!rc && nn == 0) {
        snprintf(err, errlen, "corpus directory %s has no regular files", path);
        rc = 1;
    }
    return rc;
}

/* ---- mapped ------------------------------------------------------------------------- */

/* Map DATA_DIR's .bin files; one whose mtime is not the recorded one has its CRC-32
 * checked now. */
static int load_mapped(dm_corpus *c, const char *dir, char *err, size_t errlen) {
    c->mapped = 1;
    for (int i = 0; i < 2; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, DM_PART_NAME(i));
        int fd = dm_open_regular(p, "data file", err, errlen);
        if (fd < 0) return 1;
        struct stat st;
        size_t n = (size_t)c->ds.part[i].bytes;
        int ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size == c->ds.part[i].bytes;
        void *m = ok && n ? mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0) : NULL;
        close(fd);
        if (!ok || m == MAP_FAILED) {
            snprintf(err, errlen, "cannot map %s: %s", p, ok ? strerror(errno) : "its size "
                     "changed while it was opened");
            return 1;
        }
        c->map[i] = m;
        c->map_n[i] = n;
        long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        if (mt != c->ds.part[i].mtime_ns) {
            uint32_t crc = dm_crc32(0, m, n);
            if (crc != c->ds.part[i].crc) {
                snprintf(err, errlen, "%s is damaged: its CRC-32 is %08x, meta.json records "
                         "%08x (changed after prepare); prepare the data again", p,
                         (unsigned)crc, (unsigned)c->ds.part[i].crc);
                return 1;
            }
            dm_text_append(&c->notes, "note: %s is not the file prepare wrote (its mtime "
                           "differs: a copy?); its CRC-32 was checked: it matches meta.json",
                           p);
        }
    }
    c->train = c->map[0];
    c->train_n = c->map_n[0];
    c->val = c->map[1];
    c->val_n = c->map_n[1];
    c->n = c->train_n + c->val_n;
    c->n_files = 2;
    return 0;
}

int dm_corpus_verify(const dm_corpus *c, char *err, size_t errlen) {
    for (int i = 0; c->mapped && i < 2; i++) {
        uint32_t crc = dm_crc32(0, c->map[i], c->map_n[i]);
        dm_corpus_release(c, c->map[i], c->map_n[i]);
        if (crc != c->ds.part[i].crc) {
            snprintf(err, errlen, "--verify-data: %s is damaged: its CRC-32 is %08x, meta.json "
                     "records %08x; prepare the data again", DM_PART_NAME(i), (unsigned)crc,
                     (unsigned)c->ds.part[i].crc);
            return 1;
        }
    }
    return 0;
}

/* ---- loading ------------------------------------------------------------------------ */

/* the tokenizer and both token streams of a token data directory */
static int load_tokens(dm_corpus *c, const char *dir, char *err, size_t errlen) {
    c->tok = calloc(1, sizeof *c->tok);
    if (!c->tok) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    if (dm_tokdata_open(dir, c->tok, err, errlen) != DM_DS_OK) {
        free(c->tok);
        c->tok = NULL;
        return 1;
    }
    for (int i = 0; i < 2; i++)
        if (dm_tokdata_stream(c->tok, i, &c->ts[i], err, errlen)) {
            if (i) dm_tokstream_free(&c->ts[0]);
            dm_tokdata_free(c->tok);
            free(c->tok);
            c->tok = NULL;
            return 1;
        }
    c->vocab = c->tok->vocab;
    c->width = c->tok->width;
    return 0;
}

int dm_corpus_vocab(const dm_corpus *c, int *vocab, int explicit_, char *err, size_t errlen) {
    int want = c->tok ? c->vocab : DM_VOCAB;
    if (*vocab == want) return 0;
    if (c->tok && !explicit_ && *vocab == DM_VOCAB) {
        *vocab = want;
        return 0;
    }
    if (c->tok)
        snprintf(err, errlen, "vocab=%d, but the data's tokenizer (%s) has %d pieces (a new "
                 "run without vocab takes the data's)", *vocab, c->tok->checksum, want);
    else
        snprintf(err, errlen, "vocab=%d, but the data are bytes (vocab 256): `dormouse "
                 "prepare --vocab %d` makes token data", *vocab, *vocab);
    return 1;
}

int dm_corpus_use_tokenizer(dm_corpus *c, const void *model, size_t n, const char *checksum,
                            int vocab, char *err, size_t errlen) {
    if (c->tok) {
        if (!strcmp(c->tok->checksum, checksum)) return 0;
        snprintf(err, errlen, "the data's tokenizer (%s) is not the checkpoint's (%s): a model "
                 "of tokens reads only the tokens it was trained on", c->tok->checksum,
                 checksum);
        return 1;
    }
    dm_tokdata *t = calloc(1, sizeof *t);
    if (!t) return snprintf(err, errlen, "out of memory"), 1;
    c->tok = t;
    if (!(t->tok = dm_tokenizer_load(model, n, err, errlen))) return 1;
    t->vocab = dm_tokenizer_vocab(t->tok);
    if (t->vocab != vocab)
        return snprintf(err, errlen, "the checkpoint's tokenizer has %d pieces, its model %d",
                        t->vocab, vocab), 1;
    t->width = dm_id_width(vocab);
    snprintf(t->checksum, sizeof t->checksum, "%s", checksum);
    if (!(t->len = malloc((size_t)vocab * sizeof *t->len)))
        return snprintf(err, errlen, "out of memory"), 1;
    for (int v = 0; v < vocab; v++) t->len[v] = dm_tokenizer_piece_bytes(t->tok, (uint32_t)v);
    c->vocab = vocab;
    c->width = t->width;
    dm_ids ids = {0};
    if (dm_tokenizer_encode(t->tok, c->val, c->val_n, &ids, err, errlen)) {
        free(ids.p);
        return 1;
    }
    c->enc = malloc(ids.n ? ids.n * (size_t)t->width : 1);
    for (size_t i = 0; c->enc && i < ids.n; i++) {
        if (t->width == 2) ((uint16_t *)c->enc)[i] = (uint16_t)ids.p[i];
        else ((uint32_t *)c->enc)[i] = ids.p[i];
    }
    size_t nt = ids.n;
    free(ids.p);
    if (!c->enc) return snprintf(err, errlen, "out of memory"), 1;
    if (dm_tokstream_init(&c->ts[1], c->enc, t->width, nt, t->len, vocab, err, errlen))
        return 1;
    if (c->ts[1].bytes != c->val_n) {
        snprintf(err, errlen, "the validation text cannot be round-tripped by the run's "
                 "tokenizer (its tokens cover %llu bytes of %zu: not UTF-8 it keeps)",
                 (unsigned long long)c->ts[1].bytes, c->val_n);
        return 1;
    }
    return 0;
}

int dm_corpus_load(dm_corpus *c, const char *path, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->vocab = DM_VOCAB;
    c->width = 1;
    mem_sink s = {c, 0};
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "corpus not found: %s (%s)", path, strerror(errno));
        return 1;
    }
    if (S_ISREG(st.st_mode)) {
        if (append_file(&s, path, err, errlen)) goto fail;
    } else if (S_ISDIR(st.st_mode)) {
        int ds = dm_dataset_open(path, &c->ds, err, errlen);
        if (ds == DM_DS_BAD) goto fail;
        if (ds == DM_DS_OK) {
            if (load_mapped(c, path, err, errlen)) goto fail;
            if (c->ds.tokens && load_tokens(c, path, err, errlen)) goto fail;
            return 0;
        }
        if (load_dir(&s, path, err, errlen)) goto fail;
    } else {
        snprintf(err, errlen, "corpus %s is neither a regular file nor a directory", path);
        return 1;
    }
    if (c->n == 0) {
        snprintf(err, errlen, "corpus %s is empty", path);
        goto fail;
    }
    if (c->n > DM_CORPUS_HINT_BYTES) {
        char q[4200];
        dm_text_append(&c->notes, "note: %s is %.1f GiB, read into memory at every start; "
                       "`dormouse prepare %s --out DATA_DIR` once, then --data DATA_DIR maps "
                       "it (docs/data.md)", path, c->n / 1073741824.0,
                       dm_shell_quote(path, q, sizeof q));
    }
    c->train = c->bytes;
    c->train_n = c->n;
    return 0;
fail:
    dm_corpus_free(c);
    return 1;
}

uint32_t dm_corpus_crc32(const dm_corpus *c) {
    if (c->mapped) return dm_dataset_crc32(&c->ds);
    if (!c->val_bytes) return dm_crc32(0, c->bytes, c->n);
    size_t w = c->n - c->train_n; /* --val: the training bytes, then the window */
    uint32_t a = dm_crc32(0, c->bytes, c->train_n), b = dm_crc32(0, c->val + c->val_n - w, w);
    return dm_crc32_combine(a, b, w);
}

void dm_corpus_free(dm_corpus *c) {
    if (c->tok) {
        for (int i = 0; i < 2; i++) dm_tokstream_free(&c->ts[i]);
        dm_tokdata_free(c->tok);
        free(c->tok);
    }
    for (int i = 0; i < 2; i++)
        if (c->map[i]) munmap(c->map[i], c->map_n[i]);
    free(c->bytes);
    free(c->val_bytes);
    free(c->enc);
    free(c->notes);
    memset(c, 0, sizeof *c);
}

/* ---- the split ---------------------------------------------------------------------- */

int dm_corpus_split(dm_corpus *c, long eval_window, int seq_len, char *err, size_t errlen) {
    if (c->mapped) {
        if (dm_corpus_split_eval(c, eval_window, 0, err, errlen)) return 1;
        if (c->train_n < (size_t)seq_len + 1) {
            snprintf(err, errlen, "train.bin has %zu bytes, fewer than one training sequence "
                     "(seq_len+1=%d)", c->train_n, seq_len + 1);
            return 1;
        }
        if (c->tok && c->ts[0].n < (size_t)seq_len + 1) {
            snprintf(err, errlen, "train.tok has %zu tokens, fewer than one training sequence "
                     "(seq_len+1=%d)", c->ts[0].n, seq_len + 1);
            return 1;
        }
        return 0;
    }
    size_t need = (size_t)eval_window + (size_t)seq_len + 1;
    if (eval_window < 2 || c->n < need) {
        snprintf(err, errlen,
                 "corpus too small: %zu bytes, but the validation window (eval_window=%ld) plus "
                 "one training sequence (seq_len+1=%d) need %zu",
                 c->n, eval_window, seq_len + 1, need);
        return 1;
    }
    c->train_n = c->n - (size_t)eval_window;
    c->val = c->bytes + c->train_n;
    c->val_n = (size_t)eval_window;
    return 0;
}

int dm_corpus_split_eval(dm_corpus *c, long eval_window, int whole, char *err, size_t errlen) {
    size_t w = (size_t)eval_window, have = c->mapped ? c->val_n : c->n;
    if (eval_window < 2 || have < w) {
        snprintf(err, errlen, "%s has %zu bytes, fewer than eval_window=%zu; pass --set "
                 "eval_window=%zu (or less)", c->mapped ? "val.bin" : "the corpus", have, w,
                 have);
        return 1;
    }
    if (!c->mapped) {
        c->val_n = whole ? c->n : w;
        c->val = c->bytes + (c->n - c->val_n);
    }
    return 0;
}

int dm_corpus_split_val(dm_corpus *c, dm_corpus *val, long eval_window, int seq_len,
                        char *err, size_t errlen) {
    if (c->mapped || val->mapped) {
        snprintf(err, errlen, "a prepared data directory has its own val.bin: --val is for a "
                 "corpus file or directory");
        return 1;
    }
    if (eval_window < 2 || val->n < (size_t)eval_window) {
        snprintf(err, errlen, "the validation corpus has %zu bytes, fewer than eval_window=%ld; "
                 "pass --set eval_window=%zu or a larger file", val->n, eval_window, val->n);
        return 1;
    }
    if (c->n < (size_t)seq_len + 1) {
        snprintf(err, errlen, "corpus too small: %zu bytes, but one training sequence "
                 "(seq_len+1=%d) needs %d", c->n, seq_len + 1, seq_len + 1);
        return 1;
    }
    c->val_bytes = val->bytes;
    c->val = val->bytes;
    c->val_n = val->n;
    val->bytes = NULL;
    val->n = 0;
    c->train_n = c->n;
    c->n += (size_t)eval_window;
    return 0;
}

/* ---- batches and windows ------------------------------------------------------------ */

/* The generator of the batch of (seed, step); returns the span of its offsets, 0 ..
 * train_n-T-1. */
static uint64_t batch_rng(const dm_corpus *c, uint64_t seed, long step, int T, dm_rng *r) {
    dm_rng_seed(r, seed, 0xBA7C400000000000ull ^ (uint64_t)step);
    size_t n = c->tok ? c->ts[0].n : c->train_n; /* ids to draw from */
    return (uint64_t)(n - (size_t)T - 1) + 1;
}
/* the training ids, and their width (a corpus made by hand, zeroed, has bytes) */
static const uint8_t *train_ids(const dm_corpus *c) { return c->tok ? c->ts[0].ids : c->train; }
static size_t id_width(const dm_corpus *c) { return c->tok ? (size_t)c->width : 1; }

/* the pages over p[0, n): [*lo, *lo + *len) */
static void page_range(const uint8_t *p, size_t n, void **lo, size_t *len) {
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p / ps * ps;
    uintptr_t b = ((uintptr_t)p + n + ps - 1) / ps * ps;
    *lo = (void *)a;
    *len = (size_t)(b - a);
}

void dm_corpus_batch(const dm_corpus *c, uint64_t seed, long step, int B, int T, void *out) {
    dm_rng r;
    uint64_t span = batch_rng(c, seed, step, T, &r);
    size_t w = id_width(c), row = ((size_t)T + 1) * w;
    const uint8_t *ids = train_ids(c);
    for (int b = 0; b < B; b++) {
        size_t off = (size_t)dm_rng_below(&r, span) * w;
        memcpy((uint8_t *)out + (size_t)b * row, ids + off, row);
        dm_corpus_release(c, ids + off, row);
    }
}

void dm_corpus_prefetch(const dm_corpus *c, uint64_t seed, long step, int B, int T) {
    if (!c->mapped) return;
    dm_rng r;
    uint64_t span = batch_rng(c, seed, step, T, &r);
    for (int b = 0; b < B; b++) {
        void *lo;
        size_t len;
        size_t w = id_width(c);
        page_range(train_ids(c) + (size_t)dm_rng_below(&r, span) * w, ((size_t)T + 1) * w, &lo,
                   &len);
        posix_madvise(lo, len, POSIX_MADV_WILLNEED);
    }
}

void dm_corpus_release(const dm_corpus *c, const uint8_t *p, size_t n) {
    if (!c->mapped || !n) return;
    void *lo;
    size_t len;
    page_range(p, n, &lo, &len);
    madvise(lo, len, MADV_DONTNEED); /* a shared read-only mapping: the page cache keeps them */
}

int dm_corpus_eval_offsets(size_t val_n, size_t w, long N, uint64_t seed, size_t *off) {
    if (N < 1 || val_n / (size_t)N < w) return 1;
    dm_rng r;
    dm_rng_seed(&r, seed, 0xE7A1000000000000ull);
    for (long k = 0; k < N; k++) {
        size_t lo = (size_t)k * (val_n / (size_t)N), room = val_n / (size_t)N - w;
        off[k] = lo + (size_t)dm_rng_below(&r, (uint64_t)room + 1);
    }
    return 0;
}
