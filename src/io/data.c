/* data.c — corpus loading, split and batches. */
#include "io/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/rng.h"

/* Append the (possibly gzip-compressed) file at path to c->bytes. */
static int append_file(dm_corpus *c, size_t *cap, const char *path, char *err, size_t errlen) {
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open corpus file %s: %s", path, strerror(errno));
        return 1;
    }
    for (;;) {
        if (*cap - c->n < (1u << 20)) {
            size_t ncap = *cap ? *cap * 2 : (8u << 20);
            uint8_t *nb = realloc(c->bytes, ncap);
            if (!nb) {
                gzclose(f);
                snprintf(err, errlen, "out of memory reading %s", path);
                return 1;
            }
            c->bytes = nb;
            *cap = ncap;
        }
        size_t want = *cap - c->n;
        if (want > (1u << 30)) want = 1u << 30;
        int got = gzread(f, c->bytes + c->n, (unsigned)want);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            snprintf(err, errlen, "cannot read corpus file %s: %s", path, msg);
            gzclose(f);
            return 1;
        }
        if (got == 0) break;
        c->n += (size_t)got;
    }
    gzclose(f);
    c->n_files++;
    return 0;
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
