/* data.c — corpus loading, split and batches. */
#include "io/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/rng.h"
#include "io/files.h"

/* Room for at least `more` bytes after c->n in c->bytes. 0 ok. */
static int reserve(dm_corpus *c, size_t *cap, size_t more) {
    if (*cap - c->n >= more) return 0;
    size_t ncap = *cap ? *cap : (8u << 20);
    while (ncap - c->n < more) ncap *= 2;
    uint8_t *nb = realloc(c->bytes, ncap);
    if (!nb) return 1;
    c->bytes = nb;
    *cap = ncap;
    return 0;
}

/* Append the file at path to c->bytes: plain bytes, or, when it starts with the gzip
 * magic (1f 8b), every gzip member decompressed, each one's trailer checked by zlib (the
 * CRC-32 and the length of its data); a stream that ends early, a bad trailer and bytes
 * after the last member that are not another member are errors. */
static int append_file(dm_corpus *c, size_t *cap, const char *path, char *err, size_t errlen) {
    int fd = dm_open_regular(path, "corpus file", err, errlen);
    if (fd < 0) return 1;
    enum { IN = 1 << 20 };
    unsigned char *in = malloc(IN);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int rc = 1, gz = -1, zinit = 0, member_done = 0;
    size_t have = 0; /* unread bytes at in[0..have) */
    if (!in) {
        snprintf(err, errlen, "out of memory reading %s", path);
        goto out;
    }
    for (int eof = 0;;) {
        if (!eof && have < IN) { /* top up the input */
            ssize_t got = read(fd, in + have, IN - have);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) {
                snprintf(err, errlen, "cannot read corpus file %s: %s", path, strerror(errno));
                goto out;
            }
            eof = got == 0;
            have += (size_t)got;
            if (!eof && have < 2) continue;
        }
        if (gz < 0) gz = have >= 2 && in[0] == 0x1f && in[1] == 0x8b;
        if (!gz) { /* plain: copy */
            if (reserve(c, cap, have ? have : 1)) goto oom;
            memcpy(c->bytes + c->n, in, have);
            c->n += have;
            have = 0;
            if (eof) break;
            continue;
        }
        if (member_done) { /* after a member: the end of the file, or another member */
            if (have == 0 && eof) break;
            if (have < 2 && !eof) continue;
            if (have < 2 || in[0] != 0x1f || in[1] != 0x8b) {
                snprintf(err, errlen, "corpus file %s is damaged: bytes after the end of its "
                         "gzip data", path);
                goto out;
            }
            inflateReset(&zs);
            member_done = 0;
        }
        if (!zinit) {
            if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) goto oom;
            zinit = 1;
        }
        zs.next_in = in;
        zs.avail_in = (uInt)have;
        int zr;
        do {
            if (reserve(c, cap, 1u << 20)) goto oom;
            size_t room = *cap - c->n;
            zs.next_out = c->bytes + c->n;
            zs.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
            uInt before = zs.avail_out;
            zr = inflate(&zs, Z_NO_FLUSH);
            c->n += before - zs.avail_out;
        } while (zr == Z_OK && zs.avail_out == 0);
        if (zr == Z_MEM_ERROR) goto oom;
        if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && zs.avail_in == 0)) {
            snprintf(err, errlen, "corpus file %s is damaged: gzip data error (%s)", path,
                     zs.msg ? zs.msg : "corrupt stream");
            goto out;
        }
        memmove(in, zs.next_in, zs.avail_in); /* keep what inflate has not used */
        have = zs.avail_in;
        if (zr == Z_STREAM_END) {
            member_done = 1;
            continue;
        }
        if (eof && (have == 0 || zr == Z_BUF_ERROR)) {
            snprintf(err, errlen, "corpus file %s is truncated: its gzip data ends early (no "
                     "end of stream, CRC or length)", path);
            goto out;
        }
    }
    c->n_files++;
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "out of memory reading %s", path);
out:
    if (zinit) inflateEnd(&zs);
    free(in);
    close(fd);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dm_corpus_load(dm_corpus *c, const char *path, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    size_t cap = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "corpus not found: %s (%s)", path, strerror(errno));
        return 1;
    }
    if (S_ISREG(st.st_mode)) {
        if (append_file(c, &cap, path, err, errlen)) goto fail;
    } else if (S_ISDIR(st.st_mode)) {
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
            if (stat(full, &fs) != 0 || !S_ISREG(fs.st_mode)) { free(full); continue; }
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
            if (!rc) rc = append_file(c, &cap, names[i], err, errlen);
            free(names[i]);
        }
        free(names);
        if (rc) goto fail;
        if (nn == 0) {
            snprintf(err, errlen, "corpus directory %s has no regular files", path);
            goto fail;
        }
    } else {
        snprintf(err, errlen, "corpus %s is neither a regular file nor a directory", path);
        return 1;
    }
    if (c->n == 0) {
        snprintf(err, errlen, "corpus %s is empty", path);
        goto fail;
    }
    c->train_n = c->n;
    return 0;
fail:
    dm_corpus_free(c);
    return 1;
}

uint32_t dm_corpus_crc32(const dm_corpus *c) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < c->n;) {
        size_t len = c->n - off > (1u << 30) ? (1u << 30) : c->n - off;
        crc = crc32(crc, c->bytes + off, (uInt)len);
        off += len;
    }
    return (uint32_t)crc;
}

void dm_corpus_free(dm_corpus *c) {
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

int dm_corpus_split(dm_corpus *c, long eval_window, int seq_len, char *err, size_t errlen) {
    size_t need = (size_t)eval_window + (size_t)seq_len + 1;
    if (eval_window < 2 || c->n < need) {
        snprintf(err, errlen,
                 "corpus too small: %zu bytes, but the validation window (eval_window=%ld) plus "
                 "one training sequence (seq_len+1=%d) need %zu",
                 c->n, eval_window, seq_len + 1, need);
        return 1;
    }
    c->train_n = c->n - (size_t)eval_window;
    return 0;
}

int dm_corpus_split_val(dm_corpus *c, const dm_corpus *val, long eval_window, int seq_len,
                        char *err, size_t errlen) {
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
    uint8_t *b = realloc(c->bytes, c->n + (size_t)eval_window);
    if (!b) {
        snprintf(err, errlen, "out of memory: the validation window needs %ld bytes", eval_window);
        return 1;
    }
    memcpy(b + c->n, val->bytes + (val->n - (size_t)eval_window), (size_t)eval_window);
    c->bytes = b;
    c->train_n = c->n;
    c->n += (size_t)eval_window;
    return 0;
}

void dm_corpus_batch(const dm_corpus *c, uint64_t seed, long step, int B, int T, uint8_t *out) {
    dm_rng r;
    dm_rng_seed(&r, seed, 0xBA7C400000000000ull ^ (uint64_t)step);
    uint64_t span = (uint64_t)(c->train_n - (size_t)T - 1) + 1; /* offsets 0..train_n-T-1 */
    for (int b = 0; b < B; b++) {
        size_t off = (size_t)dm_rng_below(&r, span);
        memcpy(out + (size_t)b * (T + 1), c->bytes + off, (size_t)T + 1);
    }
}
