/* prepare.c — `dormouse prepare`: the sources streamed into DATA_DIR.partial-PID, split,
 * synced, described in meta.json, then renamed to DATA_DIR (see prepare.h). */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED): posix_madvise's DONTNEED does nothing */
#include "jobs/prepare.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/rng.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/source.h"
#include "io/tokens.h"
#include "ops/atlas.h" /* dm_now */

#ifndef DM_VERSION
#define DM_VERSION "unknown"
#endif

enum { WBUF = 8 << 20 };                            /* the write piece */
enum { SINK_BINARY = 3, SINK_IOERR = 4, SINK_STOP = 5 }; /* dm_source_read's sink codes */

/* (bytes, CRC-32) of a .bin's prefix, kept at every write: the CRC of train.bin cut at
 * any point is then a read of at most one piece away */
typedef struct {
    uint64_t off;
    uint32_t crc;
} crc_mark;

/* A .bin being written: its bytes so far and their CRC-32, combined from the finished
 * sources' (base) and the current one's, so every byte is summed once. */
typedef struct {
    int fd;
    char path[4300];
    uint8_t *buf;
    size_t used;
    uint64_t bytes, base_bytes, src_bytes;
    uint32_t base_crc, src_crc;
    crc_mark *marks;
    size_t n_marks, cap_marks;
} writer;

static uint32_t w_crc(const writer *w) {
    return dm_crc32_combine(w->base_crc, w->src_crc, w->src_bytes);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, long long off) {
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 1;
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

static int w_mark(writer *w) {
    if (w->n_marks == w->cap_marks) {
        w->cap_marks = w->cap_marks ? 2 * w->cap_marks : 1024;
        crc_mark *nm = realloc(w->marks, w->cap_marks * sizeof *nm);
        if (!nm) return 1;
        w->marks = nm;
    }
    w->marks[w->n_marks++] = (crc_mark){w->bytes, w_crc(w)};
    return 0;
}

static int w_flush(writer *w) {
    if (w->used && write_all(w->fd, w->buf, w->used)) return 1;
    w->used = 0;
    return w_mark(w);
}

static int w_put(writer *w, const uint8_t *p, size_t n) {
    w->src_crc = dm_crc32(w->src_crc, p, n);
    w->src_bytes += n;
    w->bytes += n;
    if (w->used + n > WBUF && w_flush(w)) return 1;
    if (n >= WBUF) return write_all(w->fd, p, n) || w_mark(w);
    memcpy(w->buf + w->used, p, n);
    w->used += n;
    return 0;
}

/* the current source is done: its CRC joins the base */
static void w_source_end(writer *w) {
    w->base_crc = w_crc(w);
    w->base_bytes += w->src_bytes;
    w->src_crc = 0;
    w->src_bytes = 0;
}

static int w_open(writer *w, const char *dir, const char *name) {
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s/%s", dir, name);
    w->fd = open(w->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    w->buf = malloc(WBUF);
    return w->fd < 0 || !w->buf || w_mark(w);
}

static void w_close(writer *w) {
    if (w->fd >= 0) close(w->fd);
    free(w->buf);
    free(w->marks);
    w->fd = -1;
    w->buf = NULL;
    w->marks = NULL;
}

/* ---- the job ------------------------------------------------------------------------ */

typedef struct {
    const char *path;
    int part;               /* DM_PART_* it was streamed into */
    uint64_t file_bytes, bytes, offset;
    uint32_t crc;
    int gz;
} source;

/* A stretch of the concatenated sources that went to val.bin. */
typedef struct {
    uint64_t off, len;
} piece;

typedef struct {
    const dm_prepare_args *a;
    const dm_job_io *io;
    dm_status *st;
    char out[4096];         /* --out without trailing slashes */
    char tmp[4200];
    int made_tmp;
    char **train_paths, **val_paths;
    size_t n_train, n_val;
    source *src;            /* the sources read, in order */
    size_t n_src;
    cJSON *skipped;         /* [{path, why}] */
    int n_skipped;
    piece *pieces;          /* where val.bin came from in the sources (malloc'd) */
    size_t n_pieces;
    int spread;             /* the split was spread (else the tail) */
    uint64_t total_in, done_in; /* the sources' bytes on disk; read by finished sources */
    double t0, last_tick;
    writer w[2];
    /* with a vocabulary: the tokenizer, the .tok files, what meta.json says of them */
    dm_tokenizer *tok;
    uint8_t *model;
    size_t model_n;
    writer tw[2];
    uint64_t tokens[2];
    cJSON *tok_meta;        /* the tokenizer's record: where it came from */
    char err[4600];
} prep_ctx;

typedef struct {
    prep_ctx *P;
    writer *w;
    const dm_source_info *info;
    uint8_t probe[DM_BINARY_PROBE];
    size_t np;
    int decided;
} src_sink;

static void progress(prep_ctx *P, uint64_t in_now, int last) {
    double now = dm_now(), el = now - P->t0;
    if (!last && now - P->last_tick < 1.0) return;
    P->last_tick = now;
    double rate = el > 0 ? (double)in_now / el : 0;
    char eta[32], line[256];
    dm_fmt_duration(eta, sizeof eta, rate > 0 ? (double)(P->total_in - in_now) / rate : -1);
    int len = snprintf(line, sizeof line, "prepare: %.2f of %.2f GiB read (%.0f%%) | %.1f MB/s "
                       "| %s %s", in_now / 1073741824.0, P->total_in / 1073741824.0,
                       P->total_in ? 100.0 * (double)in_now / (double)P->total_in : 100.0,
                       rate / 1e6, last ? "done in" : "ETA", last ? "" : eta);
    if (last) {
        char d[32];
        dm_fmt_duration(d, sizeof d, el);
        len = snprintf(line, sizeof line, "prepare: %.2f GiB read in %s | %.1f MB/s",
                       in_now / 1073741824.0, d, rate / 1e6);
    }
    dm_event ev = {.kind = DM_EV_PROGRESS, .text = line, .len = (size_t)len};
    dm_job_emit(P->io, &ev);
}

/* the probe's bytes decide whether the file is binary; then they are written */
static int decide(src_sink *s) {
    s->decided = 1;
    if (!s->P->a->binary_ok && dm_is_binary(s->probe, s->np)) return SINK_BINARY;
    return s->np && w_put(s->w, s->probe, s->np) ? SINK_IOERR : 0;
}

static int sink(void *ctx, const uint8_t *p, size_t n) {
    src_sink *s = ctx;
    if (dm_job_stopped(s->P->io)) return SINK_STOP;
    progress(s->P, s->P->done_in + s->info->read_bytes, 0);
    if (!s->decided) {
        size_t take = n < sizeof s->probe - s->np ? n : sizeof s->probe - s->np;
        memcpy(s->probe + s->np, p, take);
        s->np += take;
        p += take;
        n -= take;
        if (s->np < sizeof s->probe) return 0;
        int rc = decide(s);
        if (rc) return rc;
    }
    return n && w_put(s->w, p, n) ? SINK_IOERR : 0;
}

static void skip(prep_ctx *P, const char *path, const char *why) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "why", why);
    cJSON_AddItemToArray(P->skipped, o);
    P->n_skipped++;
}

/* Stream one file into w (a binary one skipped with a note, unless binary_ok). */
static int stream_file(prep_ctx *P, const char *path, int part) {
    writer *w = &P->w[part];
    dm_source_info info = {0};
    src_sink s = {.P = P, .w = w, .info = &info};
    uint64_t start = w->bytes;
    int rc = dm_source_read(path, sink, &s, &info, P->err, sizeof P->err);
    if (rc == 0 && !s.decided) rc = decide(&s);
    P->done_in += info.file_bytes;
    if (rc == SINK_BINARY) { /* nothing of it was written */
        dm_job_note(P->io, "note: %s skipped: binary (a NUL byte in its first %d bytes; "
                    "--binary ok keeps such files)\n", path, DM_BINARY_PROBE);
        skip(P, path, "binary");
        return 0;
    }
    if (rc == SINK_STOP)
        return dm_fail(P->st, DM_JOB_INTERRUPTED, "interrupted: %s was not created",
                       P->a->out);
    if (rc == SINK_IOERR)
        return dm_fail(P->st, DM_JOB_FAILED, "cannot write %s: %s", w->path, strerror(errno));
    if (rc) return dm_fail(P->st, DM_JOB_BAD_INPUT, "%s", P->err);
    source *ns = realloc(P->src, (P->n_src + 1) * sizeof *ns);
    if (!ns) return dm_fail(P->st, DM_JOB_FAILED, "out of memory");
    P->src = ns;
    P->src[P->n_src++] = (source){path, part, info.file_bytes, w->bytes - start, start,
                                  w->src_crc, info.gz};
    w_source_end(w);
    return 0;
}

/* The files of the sources (a directory: its tree, filtered by the globs), in order. */
static int list_sources(prep_ctx *P, const char *const *srcs, int n, char ***out,
                        size_t *nout) {
    const dm_prepare_args *a = P->a;
    *out = NULL;
    *nout = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        char **paths = NULL, *skipped = NULL;
        size_t np = 0;
        if (stat(srcs[i], &st) != 0)
            return dm_fail(P->st, DM_JOB_BAD_INPUT, "source not found: %s (%s)", srcs[i],
                           strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            if (dm_list_tree(srcs[i], a->incl, a->n_incl, a->excl, a->n_excl, &paths, &np,
                             &skipped, P->err, sizeof P->err))
                return dm_fail(P->st, DM_JOB_BAD_INPUT, "%s", P->err);
            for (char *l = skipped; l && *l;) { /* lines "PATH: why" */
                char *nl = strchr(l, '\n');
                *nl = 0;
                *strrchr(l, ':') = 0;
                dm_job_note(P->io, "note: %s skipped: not a regular file\n", l);
                skip(P, l, "not a regular file");
                l = nl + 1;
            }
            free(skipped);
        } else if (S_ISREG(st.st_mode)) {
            paths = malloc(sizeof *paths);
            if (paths) paths[np++] = strdup(srcs[i]);
        } else {
            return dm_fail(P->st, DM_JOB_BAD_INPUT, "source %s is neither a regular file nor "
                           "a directory", srcs[i]);
        }
        char **nb = realloc(*out, (*nout + np + 1) * sizeof *nb);
        if (!nb || !paths) {
            dm_free_paths(paths, np);
            return dm_fail(P->st, DM_JOB_FAILED, "out of memory");
        }
        *out = nb;
        memcpy(*out + *nout, paths, np * sizeof *paths);
        *nout += np;
        free(paths);
    }
    for (size_t i = 0; i < *nout; i++) {
        struct stat st;
        if (stat((*out)[i], &st) == 0) P->total_in += (uint64_t)st.st_size;
    }
    return 0;
}

/* The validation bytes of the split: val_bytes, or round(val_fraction x T); 0 with a
 * bad-input status when train.bin or val.bin would hold fewer than 2 bytes. */
static uint64_t val_size(prep_ctx *P, uint64_t T) {
    const dm_prepare_args *a = P->a;
    uint64_t V = a->val_fraction > 0 ? (uint64_t)llround(a->val_fraction * (double)T)
                                     : (uint64_t)a->val_bytes;
    if (V < 2 || V + 2 > T) {
        dm_fail(P->st, DM_JOB_BAD_INPUT, "the split leaves %llu validation and %llu "
                "training bytes of %llu; each needs at least 2%s (--val-bytes, "
                "--val-fraction)", (unsigned long long)V,
                (unsigned long long)(T > V ? T - V : 0), (unsigned long long)T,
                V + 2 > T && T >= 20 ? ": the validation part takes --val-bytes of the text "
                "(81920 by default), more than there is; take a smaller part, e.g. "
                "--val-fraction 0.1, or give more text" : "");
        return 0;
    }
    return V;
}

/* The CRC-32 of train.bin's first `upto` bytes: from the last mark at or before it, and
 * the bytes after that mark read back (buf: WBUF bytes). 1 on a read error. */
static int crc_upto(writer *t, uint64_t upto, uint8_t *buf, uint32_t *crc) {
    size_t m = t->n_marks;
    while (m > 1 && t->marks[m - 1].off > upto) m--;
    *crc = t->marks[m - 1].crc;
    for (uint64_t off = t->marks[m - 1].off; off < upto;) {
        size_t n = upto - off < WBUF ? (size_t)(upto - off) : WBUF;
        if (dm_pread_all(t->fd, buf, n, (long long)off)) return 1;
        *crc = dm_crc32(*crc, buf, n);
        off += n;
    }
    return 0;
}

/* The last V bytes of train.bin into val.bin; train.bin cut there, its CRC-32 from the
 * mark before the cut and the bytes after it. */
static int split_tail(prep_ctx *P, uint64_t V) {
    writer *t = &P->w[DM_PART_TRAIN], *v = &P->w[DM_PART_VAL];
    uint64_t T = t->bytes, S = T - V;
    uint8_t *buf = malloc(WBUF);
    if (!buf) return dm_fail(P->st, DM_JOB_FAILED, "out of memory");
    int rc = 0;
    for (uint64_t off = S; off < T && !rc;) {
        size_t n = T - off < WBUF ? (size_t)(T - off) : WBUF;
        rc = dm_pread_all(t->fd, buf, n, (long long)off) || w_put(v, buf, n);
        off += n;
    }
    w_source_end(v);
    rc = rc || w_flush(v);
    uint32_t crc = 0;
    rc = rc || crc_upto(t, S, buf, &crc);
    free(buf);
    if (rc || ftruncate(t->fd, (off_t)S) != 0)
        return dm_fail(P->st, DM_JOB_FAILED, "cannot split %s: %s", t->path, strerror(errno));
    t->bytes = S;
    t->base_crc = crc;
    t->base_bytes = S;
    if ((P->pieces = malloc(sizeof *P->pieces))) {
        P->n_pieces = 1;
        P->pieces[0] = (piece){S, V};
    }
    return 0;
}

/* The pieces of a spread split (see prepare.h): K = ceil(V / DM_PREPARE_PIECE) pieces,
 * the last one shorter, piece i at a seeded offset inside stratum i of K equal strata of
 * the T bytes. 0 when every stratum holds its piece. */
static int place_pieces(prep_ctx *P, uint64_t T, uint64_t V) {
    uint64_t K = (V + DM_PREPARE_PIECE - 1) / DM_PREPARE_PIECE;
    if (K > DM_PREPARE_MAX_PIECES || !(P->pieces = malloc(K * sizeof *P->pieces))) return 1;
    dm_rng r;
    dm_rng_seed(&r, P->a->val_seed, 0x73707264); /* "sprd" */
    for (uint64_t i = 0; i < K; i++) {
        uint64_t lo = T * i / K, hi = T * (i + 1) / K;
        uint64_t len = i + 1 < K ? DM_PREPARE_PIECE : V - (K - 1) * DM_PREPARE_PIECE;
        if (hi - lo < len) {
            free(P->pieces);
            P->pieces = NULL;
            return 1;
        }
        P->pieces[i] = (piece){lo + dm_rng_below(&r, hi - lo - len + 1), len};
    }
    P->n_pieces = (size_t)K;
    return 0;
}

/* The spread split: the pieces into val.bin, in order; train.bin keeps the rest, moved
 * down over the gaps in one pass (its CRC-32 summed as it is written), then cut. */
static int split_spread(prep_ctx *P, uint64_t V) {
    writer *t = &P->w[DM_PART_TRAIN], *v = &P->w[DM_PART_VAL];
    uint64_t T = t->bytes;
    uint8_t *buf = malloc(WBUF);
    if (!buf) return dm_fail(P->st, DM_JOB_FAILED, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < P->n_pieces && !rc; i++)
        for (uint64_t off = P->pieces[i].off, end = off + P->pieces[i].len; off < end && !rc;) {
            size_t n = end - off < WBUF ? (size_t)(end - off) : WBUF;
            rc = dm_pread_all(t->fd, buf, n, (long long)off) || w_put(v, buf, n);
            off += n;
        }
    w_source_end(v);
    rc = rc || w_flush(v);
    uint64_t w = P->pieces[0].off; /* the bytes before the first piece stay in place */
    uint32_t crc = 0;
    rc = rc || crc_upto(t, w, buf, &crc);
    for (size_t i = 0; i < P->n_pieces && !rc; i++) {
        uint64_t from = P->pieces[i].off + P->pieces[i].len;
        uint64_t to = i + 1 < P->n_pieces ? P->pieces[i + 1].off : T;
        for (uint64_t off = from; off < to && !rc;) { /* w <= off: read before written */
            size_t n = to - off < WBUF ? (size_t)(to - off) : WBUF;
            rc = dm_pread_all(t->fd, buf, n, (long long)off) ||
                 pwrite_all(t->fd, buf, n, (long long)w);
            crc = dm_crc32(crc, buf, n);
            off += n;
            w += n;
        }
    }
    free(buf);
    if (rc || ftruncate(t->fd, (off_t)(T - V)) != 0)
        return dm_fail(P->st, DM_JOB_FAILED, "cannot split %s: %s", t->path, strerror(errno));
    t->bytes = T - V;
    t->base_crc = crc;
    t->base_bytes = T - V;
    return 0;
}

/* The split of the sources into train.bin and val.bin (no --val): spread over them, or
 * their tail (--val-split tail; token data, whose text a piece's edge could cut inside a
 * UTF-8 character; or a split whose strata cannot hold their pieces). */
static int split(prep_ctx *P) {
    uint64_t T = P->w[DM_PART_TRAIN].bytes, V = val_size(P, T);
    if (!V) return P->st->code;
    int tokens = P->a->vocab > 256 || P->a->tokenizer;
    P->spread = !P->a->val_tail && !tokens && !place_pieces(P, T, V);
    return P->spread ? split_spread(P, V) : split_tail(P, V);
}

static const char *hex(uint32_t crc, char *buf) {
    snprintf(buf, 9, "%08x", (unsigned)crc);
    return buf;
}

/* ---- tokens (docs/tokens.md) -------------------------------------------------------- */

enum { TOK_BLOCK = 8 << 20, TOK_SLOTS = 32, TOK_PIECE = 1 << 20 };

/* The source that byte off of part's .bin came from, and the offset in its content. */
static const char *where(const prep_ctx *P, int part, uint64_t off, uint64_t *in_src) {
    uint64_t x = off;
    int stream = part;
    if (part == DM_PART_VAL && !P->a->val) { /* val.bin is the tail of the concatenation */
        x += P->w[DM_PART_TRAIN].bytes;
        stream = DM_PART_TRAIN;
    }
    for (size_t i = 0; i < P->n_src; i++) {
        const source *s = &P->src[i];
        if (s->part == stream && x >= s->offset && x < s->offset + s->bytes) {
            *in_src = x - s->offset;
            return s->path;
        }
    }
    *in_src = off;
    return DM_PART_NAME(part);
}

/* The pages of text[from, to) are no longer needed by this process (they stay in the page
 * cache): memory does not grow with the corpus. */
static void release(const uint8_t *text, size_t from, size_t to) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t a = from / (size_t)pg * (size_t)pg;
    if (text && to > a) madvise((void *)(text + a), to - a, MADV_DONTNEED);
}

/* Map a finished .bin (NULL for an empty one). */
static const uint8_t *map_bin(writer *w) {
    if (!w->bytes) return NULL;
    void *m = mmap(NULL, (size_t)w->bytes, PROT_READ, MAP_SHARED, w->fd, 0);
    return m == MAP_FAILED ? NULL : m;
}

/* The training sample of the tokenizer: all of train.bin up to cap bytes, else pieces of
 * TOK_PIECE bytes spread evenly over it, each cut to whole lines (a piece within one line:
 * to whole characters) (malloc'd, *n bytes). */
static uint8_t *tok_sample(const uint8_t *t, size_t n, size_t cap, size_t *out,
                           int *pieces) { /* *pieces: 0 for all of it */
    if (n <= cap) {
        uint8_t *b = malloc(n ? n : 1);
        if (b) memcpy(b, t, n);
        *out = n;
        *pieces = 0;
        return b;
    }
    size_t k = cap / TOK_PIECE ? cap / TOK_PIECE : 1, got = 0;
    uint8_t *b = malloc(k * TOK_PIECE);
    for (size_t j = 0; b && j < k; j++) {
        size_t s = k > 1 ? (size_t)((double)j * (double)(n - TOK_PIECE) / (double)(k - 1)) : 0,
               e = s + TOK_PIECE, e0 = e;
        const uint8_t *nl = s ? memchr(t + s, '\n', TOK_PIECE) : NULL;
        if (nl && nl + 1 < t + e) s = (size_t)(nl + 1 - t);
        while (e > s && t[e - 1] != '\n' && e < n) e--;
        if (e == s) { /* within one line: cut at characters */
            e = e0;
            while (s < e && (t[s] & 0xC0) == 0x80) s++;
            while (e > s && e < n && (t[e] & 0xC0) == 0x80) e--;
        }
        memcpy(b + got, t + s, e - s);
        got += e - s;
    }
    *out = got;
    *pieces = (int)k;
    return b;
}

static void tok_progress(prep_ctx *P, int part, uint64_t done, uint64_t total, double t0) {
    double el = dm_now() - t0, rate = el > 0 ? (double)done / el : 0;
    char eta[32], line[256];
    dm_fmt_duration(eta, sizeof eta, rate > 0 ? (double)(total - done) / rate : -1);
    int len = snprintf(line, sizeof line, "prepare: encoding %s: %.1f of %.1f MB (%.0f%%) | "
                       "%.1f MB/s | ETA %s", DM_PART_NAME(part), done / 1e6, total / 1e6,
                       total ? 100.0 * (double)done / (double)total : 100.0, rate / 1e6, eta);
    dm_event ev = {.kind = DM_EV_PROGRESS, .text = line, .len = (size_t)len};
    dm_job_emit(P->io, &ev);
}

/* One slot of a block: text [s, e) of the .bin encoded, decoded back and compared. */
typedef struct {
    size_t s, e;
    dm_ids ids;
    dm_bytes back;
    int rc;          /* 0 ok, 1 the tokenizer failed (err), 2 no round trip at bad */
    uint64_t bad;
    char err[512];
} tok_slot;

static void encode_slot(const dm_tokenizer *tok, const uint8_t *text, tok_slot *sl) {
    const uint8_t *p = text + sl->s;
    size_t n = sl->e - sl->s;
    sl->ids.n = sl->back.n = 0;
    sl->rc = dm_tokenizer_encode(tok, p, n, &sl->ids, sl->err, sizeof sl->err) ||
             dm_tokenizer_decode(tok, sl->ids.p, sl->ids.n, &sl->back, sl->err, sizeof sl->err);
    if (sl->rc) return;
    size_t k = 0, m = sl->back.n < n ? sl->back.n : n;
    while (k < m && sl->back.p[k] == p[k]) k++;
    uint64_t sum = 0; /* the cover rule counts on the pieces' bytes adding up to the text */
    for (size_t i = 0; i < sl->ids.n; i++)
        sum += (uint64_t)dm_tokenizer_piece_bytes(tok, sl->ids.p[i]);
    if (k < n || sl->back.n != n || sum != n) {
        sl->rc = 2;
        sl->bad = sl->s + k;
    }
}

/* Encode part's .bin (text, n bytes) into its .tok, checking the round trip as it goes. */
static int encode_part(prep_ctx *P, int part, const uint8_t *text, size_t n, int width) {
    tok_slot *sl = calloc(TOK_SLOTS, sizeof *sl);
    uint8_t *out = malloc(WBUF);
    if (!sl || !out) {
        free(sl);
        free(out);
        return dm_fail(P->st, DM_JOB_FAILED, "out of memory");
    }
    double t0 = dm_now(), tick = t0;
    int rc = 0;
    size_t pos = 0, last = 0;
    while (pos < n && !rc) {
        release(text, last, pos); /* the block done */
        last = pos;
        int ns = 0; /* the block: slots of about TOK_BLOCK / TOK_SLOTS bytes, cut at segments */
        for (; ns < TOK_SLOTS && pos < n; ns++) {
            sl[ns].s = pos;
            while (pos < n && pos - sl[ns].s < TOK_BLOCK / TOK_SLOTS)
                pos += dm_tok_segment(text + pos, n - pos);
            sl[ns].e = pos;
        }
        #pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < ns; i++) encode_slot(P->tok, text, &sl[i]);
        for (int i = 0; i < ns && !rc; i++) {
            if (sl[i].rc == 1) {
                rc = dm_fail(P->st, DM_JOB_BAD_INPUT, "%s: %s", DM_PART_NAME(part), sl[i].err);
            } else if (sl[i].rc == 2) {
                uint64_t in;
                const char *src = where(P, part, sl[i].bad, &in);
                rc = dm_fail(P->st, DM_JOB_BAD_INPUT, "%s: byte %llu (%s byte %llu) cannot be "
                             "round-tripped by the tokenizer (decode(encode(text)) differs "
                             "there); --vocab 256 trains on the bytes as they are", src,
                             (unsigned long long)in, DM_PART_NAME(part),
                             (unsigned long long)sl[i].bad);
            }
            for (size_t j = 0; j < sl[i].ids.n && !rc; j += WBUF / 4) {
                size_t m = sl[i].ids.n - j < WBUF / 4 ? sl[i].ids.n - j : WBUF / 4;
                for (size_t q = 0; q < m; q++) {
                    uint32_t id = sl[i].ids.p[j + q];
                    for (int b = 0; b < width; b++) out[q * width + b] = (uint8_t)(id >> 8 * b);
                }
                if (w_put(&P->tw[part], out, m * (size_t)width))
                    rc = dm_fail(P->st, DM_JOB_FAILED, "cannot write %s: %s", P->tw[part].path,
                                 strerror(errno));
            }
            P->tokens[part] += sl[i].ids.n;
        }
        if (!rc && dm_job_stopped(P->io))
            rc = dm_fail(P->st, DM_JOB_INTERRUPTED, "interrupted: %s was not created",
                         P->a->out);
        if (!rc && (dm_now() - tick >= 1.0 || pos == n)) {
            tick = dm_now();
            tok_progress(P, part, pos, n, t0);
        }
    }
    release(text, last, pos);
    for (int i = 0; i < TOK_SLOTS; i++) {
        free(sl[i].ids.p);
        free(sl[i].back.p);
    }
    free(sl);
    free(out);
    if (rc) return rc;
    w_source_end(&P->tw[part]);
    if (w_flush(&P->tw[part]))
        return dm_fail(P->st, DM_JOB_FAILED, "cannot write %s: %s", P->tw[part].path,
                       strerror(errno));
    return 0;
}

/* The tokenizer: reused (--tokenizer) or trained on a sample of train.bin. */
static int get_tokenizer(prep_ctx *P, const uint8_t *train, size_t n) {
    const dm_prepare_args *a = P->a;
    char e2[4400];
    P->tok_meta = cJSON_CreateObject();
    if (a->tokenizer) {
        P->model = (uint8_t *)dm_read_file_n(a->tokenizer, &P->model_n, e2, sizeof e2);
        if (!P->model) return dm_fail(P->st, DM_JOB_BAD_INPUT, "--tokenizer: %s", e2);
        char *abs = realpath(a->tokenizer, NULL);
        cJSON_AddStringToObject(P->tok_meta, "source", "reused");
        cJSON_AddStringToObject(P->tok_meta, "path", abs ? abs : a->tokenizer);
        free(abs);
    } else {
        size_t cap = (size_t)(a->tok_sample > 0 ? a->tok_sample : DM_PREPARE_TOK_SAMPLE), sn;
        int pieces;
        const char *type = a->tok_type ? a->tok_type : "bpe";
        uint8_t *sample = tok_sample(train, n, cap, &sn, &pieces);
        if (!sample) return dm_fail(P->st, DM_JOB_FAILED, "out of memory");
        char about[256];
        if (!pieces) snprintf(about, sizeof about, "all of train.bin");
        else snprintf(about, sizeof about, "%d pieces of %d bytes spread evenly over "
                      "train.bin, each cut to whole lines", pieces, TOK_PIECE);
        dm_job_note(P->io, "prepare: training the tokenizer (%s, vocab %d) on %.1f MB: %s\n",
                    type, a->vocab, sn / 1e6, about);
        double t0 = dm_now();
        int rc = dm_tokenizer_train(sample, sn, a->vocab, type, &P->model, &P->model_n, e2,
                                    sizeof e2);
        free(sample);
        if (rc)
            return dm_fail(P->st, DM_JOB_BAD_INPUT, "%s (--vocab N sets the vocabulary; "
                           "--vocab 256 prepares the bytes)", e2);
        char d[32];
        dm_fmt_duration(d, sizeof d, dm_now() - t0);
        dm_job_note(P->io, "prepare: tokenizer trained in %s\n", d);
        cJSON_AddStringToObject(P->tok_meta, "source", "trained");
        cJSON_AddNumberToObject(P->tok_meta, "trained_on_bytes", (double)sn);
        cJSON_AddNumberToObject(P->tok_meta, "train_bytes", (double)n);
        cJSON_AddStringToObject(P->tok_meta, "sample", about);
    }
    P->tok = dm_tokenizer_load(P->model, P->model_n, e2, sizeof e2);
    if (!P->tok)
        return dm_fail(P->st, DM_JOB_BAD_INPUT, "%s: %s", a->tokenizer ? a->tokenizer
                       : "the trained tokenizer", e2);
    int V = dm_tokenizer_vocab(P->tok);
    if (a->tokenizer && a->vocab && a->vocab != V)
        return dm_fail(P->st, DM_JOB_BAD_INPUT, "--vocab %d, but the tokenizer %s has %d "
                       "pieces (leave --vocab out to take its own)", a->vocab, a->tokenizer, V);
    if (V <= 256)
        return dm_fail(P->st, DM_JOB_BAD_INPUT, "the tokenizer has %d pieces; a token "
                       "vocabulary needs more than 256 (256 is the bytes: --vocab 256)", V);
    return 0;
}

/* The tokens of train.bin and val.bin, their tokenizer written as tokenizer.model. */
static int make_tokens(prep_ctx *P) {
    const uint8_t *text[2];
    for (int i = 0; i < 2; i++) {
        text[i] = map_bin(&P->w[i]);
        if (!text[i] && P->w[i].bytes)
            return dm_fail(P->st, DM_JOB_FAILED, "cannot map %s: %s", P->w[i].path,
                           strerror(errno));
    }
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) { /* refused before any training, at its first byte */
        size_t bad = dm_utf8_invalid(text[i], (size_t)P->w[i].bytes);
        release(text[i], 0, (size_t)P->w[i].bytes);
        if (bad < P->w[i].bytes) {
            uint64_t in;
            const char *src = where(P, i, bad, &in);
            rc = dm_fail(P->st, DM_JOB_BAD_INPUT, "%s: byte %llu (%s byte %llu) is not valid "
                         "UTF-8, which a tokenizer cannot round-trip; --vocab 256 trains on "
                         "the bytes as they are", src, (unsigned long long)in, DM_PART_NAME(i),
                         (unsigned long long)bad);
        }
    }
    rc = rc || get_tokenizer(P, text[0], (size_t)P->w[0].bytes);
    int width = !rc && dm_tokenizer_vocab(P->tok) <= 65536 ? 2 : 4;
    writer mw = {.fd = -1};
    if (!rc && (w_open(&P->tw[0], P->tmp, DM_TOK_PART_NAME(0)) ||
                w_open(&P->tw[1], P->tmp, DM_TOK_PART_NAME(1)) ||
                w_open(&mw, P->tmp, DM_TOKENIZER_FILE) || w_put(&mw, P->model, P->model_n) ||
                w_flush(&mw) || fsync(mw.fd) != 0))
        rc = dm_fail(P->st, DM_JOB_FAILED, "cannot write in %s: %s", P->tmp, strerror(errno));
    w_close(&mw);
    for (int i = 0; i < 2 && !rc; i++)
        rc = encode_part(P, i, text[i], (size_t)P->w[i].bytes, width);
    for (int i = 0; i < 2 && !rc; i++)
        if (fsync(P->tw[i].fd) != 0)
            rc = dm_fail(P->st, DM_JOB_FAILED, "cannot sync %s: %s", P->tw[i].path,
                         strerror(errno));
    for (int i = 0; i < 2; i++)
        if (text[i]) munmap((void *)text[i], (size_t)P->w[i].bytes);
    return rc;
}

/* meta.json's "tokens" record (the .tok files synced first) */
static cJSON *tokens_meta(prep_ctx *P) {
    cJSON *o = cJSON_CreateObject(), *tz = P->tok_meta;
    char h[16], sum[DM_TOK_CHECKSUM_LEN];
    int V = dm_tokenizer_vocab(P->tok);
    cJSON_AddNumberToObject(o, "vocab", V);
    dm_tokenizer_checksum(P->model, P->model_n, sum);
    cJSON_AddStringToObject(tz, "file", DM_TOKENIZER_FILE);
    cJSON_AddNumberToObject(tz, "bytes", (double)P->model_n);
    cJSON_AddStringToObject(tz, "checksum", sum);
    cJSON_AddStringToObject(tz, "type", dm_tokenizer_type(P->tok));
    cJSON_AddItemToObject(o, "tokenizer", tz);
    P->tok_meta = NULL;
    cJSON_AddNumberToObject(o, "token_bytes", V <= 65536 ? 2 : 4);
    cJSON_AddStringToObject(o, "encoding", "little-endian ids, one after another; the text "
                            "encoded a segment at a time (a line with its newline, long "
                            "lines cut every 65536 bytes at a character boundary)");
    for (int i = 0; i < 2; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "file", DM_TOK_PART_NAME(i));
        cJSON_AddNumberToObject(e, "tokens", (double)P->tokens[i]);
        cJSON_AddStringToObject(e, "crc32", hex(P->tw[i].base_crc, h));
        cJSON_AddNumberToObject(e, "text_bytes", (double)P->w[i].bytes);
        cJSON_AddNumberToObject(e, "bytes_per_token", P->tokens[i] ? (double)P->w[i].bytes /
                                (double)P->tokens[i] : 0.0);
        cJSON_AddItemToObject(o, i ? "val" : "train", e);
    }
    return o;
}

/* meta.json of the finished .bin files (synced, their mtimes taken after the last write) */
static int write_meta(prep_ctx *P) {
    const dm_prepare_args *a = P->a;
    cJSON *o = cJSON_CreateObject(), *srcs = cJSON_CreateArray(), *split = cJSON_CreateObject();
    char h[16], num[32], tbuf[32];
    cJSON_AddStringToObject(o, "format", DM_DATASET_FORMAT);
    cJSON_AddNumberToObject(o, "format_version",
                            P->tok ? DM_TOKENS_FORMAT_VERSION : DM_DATASET_VERSION);
    cJSON_AddStringToObject(o, "dormouse_version", DM_VERSION);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(o, "created", tbuf);
    for (int i = 0; i < 2; i++) {
        writer *w = &P->w[i];
        struct stat st;
        if (fsync(w->fd) != 0 || fstat(w->fd, &st) != 0) {
            cJSON_Delete(o);
            cJSON_Delete(srcs);
            cJSON_Delete(split);
            return dm_fail(P->st, DM_JOB_FAILED, "cannot sync %s: %s", w->path, strerror(errno));
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "file", DM_PART_NAME(i));
        cJSON_AddNumberToObject(e, "bytes", (double)w->bytes);
        cJSON_AddStringToObject(e, "crc32", hex(w->base_crc, h));
        snprintf(num, sizeof num, "%lld",
                 (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
        cJSON_AddStringToObject(e, "mtime_ns", num);
        cJSON_AddItemToObject(o, i ? "val" : "train", e);
    }
    cJSON_AddNumberToObject(o, "total_bytes", (double)(P->w[0].bytes + P->w[1].bytes));
    if (P->tok) cJSON_AddItemToObject(o, "tokens", tokens_meta(P));
    if (a->val) {
        cJSON_AddStringToObject(split, "rule", "val-path");
        cJSON_AddStringToObject(split, "val", a->val);
    } else if (a->val_fraction > 0) {
        cJSON_AddStringToObject(split, "rule", "val-fraction");
        cJSON_AddNumberToObject(split, "val_fraction", a->val_fraction);
    } else {
        cJSON_AddStringToObject(split, "rule", "val-bytes");
        cJSON_AddNumberToObject(split, "val_bytes", (double)a->val_bytes);
    }
    if (!a->val) {
        cJSON_AddStringToObject(split, "method", P->spread ? "spread" : "tail");
        if (P->spread) {
            cJSON_AddNumberToObject(split, "seed", (double)a->val_seed);
            cJSON_AddNumberToObject(split, "piece_bytes", DM_PREPARE_PIECE);
        }
        cJSON *pcs = cJSON_CreateArray(); /* [offset, bytes] in the concatenated sources */
        for (size_t i = 0; i < P->n_pieces; i++) {
            cJSON *pc = cJSON_CreateArray();
            cJSON_AddItemToArray(pc, cJSON_CreateNumber((double)P->pieces[i].off));
            cJSON_AddItemToArray(pc, cJSON_CreateNumber((double)P->pieces[i].len));
            cJSON_AddItemToArray(pcs, pc);
        }
        cJSON_AddItemToObject(split, "pieces", pcs);
    }
    cJSON_AddStringToObject(split, "about", a->val ? "train.bin: the sources; val.bin: the "
                            "files of val" : P->spread ? "the sources concatenated in order; "
                            "val.bin is the pieces (one in each of as many equal strata, at "
                            "seeded offsets), in order; train.bin the rest" : "the sources "
                            "concatenated in order; val.bin is their last bytes, train.bin "
                            "the rest");
    cJSON_AddItemToObject(o, "split", split);
    if (a->shuffle) cJSON_AddNumberToObject(o, "shuffle_files_seed", (double)a->shuffle_seed);
    else cJSON_AddNullToObject(o, "shuffle_files_seed");
    cJSON_AddStringToObject(o, "binary", a->binary_ok ? "ok" : "skip");
    cJSON *inc = cJSON_CreateArray(), *exc = cJSON_CreateArray();
    for (int i = 0; i < a->n_incl; i++) cJSON_AddItemToArray(inc, cJSON_CreateString(a->incl[i]));
    for (int i = 0; i < a->n_excl; i++) cJSON_AddItemToArray(exc, cJSON_CreateString(a->excl[i]));
    cJSON_AddItemToObject(o, "include", inc);
    cJSON_AddItemToObject(o, "exclude", exc);
    for (size_t i = 0; i < P->n_src; i++) {
        const source *s = &P->src[i];
        cJSON *e = cJSON_CreateObject();
        char *abs = realpath(s->path, NULL);
        cJSON_AddStringToObject(e, "path", abs ? abs : s->path);
        free(abs);
        uint64_t in_val = 0; /* of its bytes, those in the pieces */
        for (size_t k = 0; k < P->n_pieces && !a->val && !s->part; k++) {
            uint64_t lo = P->pieces[k].off, hi = lo + P->pieces[k].len;
            uint64_t a0 = s->offset > lo ? s->offset : lo;
            uint64_t b0 = s->offset + s->bytes < hi ? s->offset + s->bytes : hi;
            if (b0 > a0) in_val += b0 - a0;
        }
        const char *part = s->part ? "val" : !in_val ? "train"
                         : in_val == s->bytes ? "val" : "train+val";
        cJSON_AddStringToObject(e, "part", part);
        cJSON_AddNumberToObject(e, "offset", (double)s->offset);
        cJSON_AddNumberToObject(e, "bytes", (double)s->bytes);
        cJSON_AddStringToObject(e, "crc32", hex(s->crc, h));
        cJSON_AddNumberToObject(e, "file_bytes", (double)s->file_bytes);
        cJSON_AddBoolToObject(e, "gzip", s->gz);
        cJSON_AddItemToArray(srcs, e);
    }
    cJSON_AddItemToObject(o, "sources", srcs);
    cJSON_AddItemToObject(o, "skipped", P->skipped);
    P->skipped = NULL;
    char *text = cJSON_Print(o), path[4300];
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/meta.json", P->tmp);
    size_t len = text ? strlen(text) : 0;
    char *nl = text ? malloc(len + 2) : NULL;
    if (nl) {
        memcpy(nl, text, len);
        memcpy(nl + len, "\n", 2);
    }
    int rc = !nl || dm_write_file_atomic(path, nl, P->err, sizeof P->err);
    free(nl);
    free(text);
    return rc ? dm_fail(P->st, DM_JOB_FAILED, "%s", nl ? P->err : "out of memory") : 0;
}

/* The shuffle of --shuffle-files: Fisher-Yates with the seeded generator. */
static void shuffle(char **p, size_t n, uint64_t seed) {
    dm_rng r;
    dm_rng_seed(&r, seed, 0x5F1E5000000000ull);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)dm_rng_below(&r, i);
        char *t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
}

static int run(prep_ctx *P) {
    const dm_prepare_args *a = P->a;
    struct stat st;
    if (a->n_srcs < 1) return dm_fail(P->st, DM_JOB_BAD_INPUT, "prepare: no sources given");
    if ((a->vocab > 256 || a->tokenizer) && dm_tokenizer_missing())
        return dm_fail(P->st, DM_JOB_BAD_INPUT, "%s", dm_tokenizer_missing());
    snprintf(P->out, sizeof P->out, "%s", a->out);
    for (size_t l = strlen(P->out); l > 1 && P->out[l - 1] == '/';) P->out[--l] = 0;
    if (stat(P->out, &st) == 0)
        return dm_fail(P->st, DM_JOB_BAD_INPUT, "%s exists; remove it or choose another --out",
                       P->out);
    if (list_sources(P, a->srcs, a->n_srcs, &P->train_paths, &P->n_train) ||
        (a->val && list_sources(P, &a->val, 1, &P->val_paths, &P->n_val)))
        return P->st->code;
    if (a->shuffle) shuffle(P->train_paths, P->n_train, a->shuffle_seed);
    snprintf(P->tmp, sizeof P->tmp, "%s.partial-%ld", P->out, (long)getpid());
    char made[4200], mark[4300];
    if (dm_mkdir_made(P->tmp, made, sizeof made) != 0)
        return dm_fail(P->st, DM_JOB_FAILED, "cannot create %s: %s", P->tmp, strerror(errno));
    P->made_tmp = 1;
    snprintf(mark, sizeof mark, "%s/%s", P->tmp, DM_DATASET_MARK);
    if (dm_write_file_atomic(mark, "a dormouse prepare is writing this directory\n", P->err,
                             sizeof P->err) ||
        w_open(&P->w[0], P->tmp, "train.bin") || w_open(&P->w[1], P->tmp, "val.bin"))
        return dm_fail(P->st, DM_JOB_FAILED, "cannot write in %s: %s", P->tmp, strerror(errno));
    for (size_t i = 0; i < P->n_train; i++)
        if (stream_file(P, P->train_paths[i], DM_PART_TRAIN)) return P->st->code;
    for (size_t i = 0; i < P->n_val; i++)
        if (stream_file(P, P->val_paths[i], DM_PART_VAL)) return P->st->code;
    for (int i = 0; i < 2; i++)
        if (w_flush(&P->w[i]))
            return dm_fail(P->st, DM_JOB_FAILED, "cannot write %s: %s", P->w[i].path,
                           strerror(errno));
    if (!a->val && split(P)) return P->st->code;
    if (a->val && (P->w[0].bytes < 2 || P->w[1].bytes < 2))
        return dm_fail(P->st, DM_JOB_BAD_INPUT, "train.bin would have %llu bytes and val.bin "
                       "%llu; each needs at least 2", (unsigned long long)P->w[0].bytes,
                       (unsigned long long)P->w[1].bytes);
    if ((a->vocab > 256 || a->tokenizer) && make_tokens(P)) return P->st->code;
    if (dm_job_stopped(P->io))
        return dm_fail(P->st, DM_JOB_INTERRUPTED, "interrupted: %s was not created", a->out);
    if (write_meta(P)) return P->st->code;
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", P->out);
    /* the mark goes, the directory is synced, then it takes its name */
    if (unlink(mark) != 0 || dm_fsync_dir(P->tmp) || rename(P->tmp, P->out) != 0)
        return dm_fail(P->st, DM_JOB_FAILED, "cannot finish %s: %s", P->out, strerror(errno));
    P->made_tmp = 0;
    dm_fsync_dir(dirname(parent));
    progress(P, P->done_in, 1);
    char q[4300], prog[512];
    dm_shell_quote(a->out, q, sizeof q);
    dm_job_prog(P->io, prog, sizeof prog);
    char next[4900];
    snprintf(next, sizeof next, "; next: %s train --data %s", prog, q);
    dm_job_note(P->io, "prepared %s: train.bin %llu bytes (crc32 %08x), val.bin %llu bytes "
                "(crc32 %08x), from %zu file%s (%d skipped)%s\n",
                a->out, (unsigned long long)P->w[0].bytes, (unsigned)P->w[0].base_crc,
                (unsigned long long)P->w[1].bytes, (unsigned)P->w[1].base_crc, P->n_src,
                P->n_src == 1 ? "" : "s", P->n_skipped, next);
    if (P->tok)
        dm_job_note(P->io, "tokens: vocab %d (%s tokenizer), train.tok %llu tokens (%.3f "
                    "bytes per token), val.tok %llu tokens (%.3f bytes per token)\n",
                    dm_tokenizer_vocab(P->tok), dm_tokenizer_type(P->tok),
                    (unsigned long long)P->tokens[0],
                    P->tokens[0] ? (double)P->w[0].bytes / (double)P->tokens[0] : 0.0,
                    (unsigned long long)P->tokens[1],
                    P->tokens[1] ? (double)P->w[1].bytes / (double)P->tokens[1] : 0.0);
    return 0;
}

dm_status dm_prepare(const dm_prepare_args *a, const dm_job_io *io) {
    dm_status st = {DM_JOB_OK, ""};
    prep_ctx P = {.a = a, .io = io, .st = &st, .skipped = cJSON_CreateArray(),
                  .t0 = dm_now(), .w = {{.fd = -1}, {.fd = -1}},
                  .tw = {{.fd = -1}, {.fd = -1}}};
    P.last_tick = P.t0;
    run(&P);
    for (int i = 0; i < 2; i++) w_close(&P.w[i]);
    for (int i = 0; i < 2; i++) w_close(&P.tw[i]);
    if (P.tok) dm_tokenizer_free(P.tok);
    free(P.model);
    cJSON_Delete(P.tok_meta);
    if (P.made_tmp) dm_rmtree(P.tmp); /* a failed prepare leaves nothing */
    dm_free_paths(P.train_paths, P.n_train);
    dm_free_paths(P.val_paths, P.n_val);
    free(P.src);
    cJSON_Delete(P.skipped);
    free(P.pieces);
    return st;
}
