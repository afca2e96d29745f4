/* source.c — see source.h. */
#include "io/source.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/files.h"

enum { IN = 4 << 20, OUT = 4 << 20 }; /* the read and inflate pieces */

int dm_source_read(const char *path, dm_sink_fn sink, void *ctx, dm_source_info *info,
                   char *err, size_t errlen) {
    dm_source_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    int fd = dm_open_regular(path, "corpus file", err, errlen);
    if (fd < 0) return 1;
    struct stat st;
    if (fstat(fd, &st) == 0) info->file_bytes = (uint64_t)st.st_size;
    unsigned char *in = malloc(IN), *out = NULL;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int rc = 1, gz = -1, zinit = 0, member_done = 0;
    size_t have = 0; /* unread bytes at in[0..have) */
    if (!in) goto oom;
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
            info->read_bytes += (uint64_t)got;
            if (!eof && have < 2) continue;
        }
        if (gz < 0) info->gz = gz = have >= 2 && in[0] == 0x1f && in[1] == 0x8b;
        if (!gz) { /* plain: as it is */
            if (have && (rc = sink(ctx, in, have)) != 0) goto out;
            rc = 1;
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
            if (!(out = malloc(OUT)) || inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) goto oom;
            zinit = 1;
        }
        zs.next_in = in;
        zs.avail_in = (uInt)have;
        int zr;
        do {
            zs.next_out = out;
            zs.avail_out = OUT;
            zr = inflate(&zs, Z_NO_FLUSH);
            size_t made = OUT - zs.avail_out;
            if (made && (rc = sink(ctx, out, made)) != 0) goto out;
            rc = 1;
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
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "out of memory reading %s", path);
    rc = 1;
out:
    if (zinit) inflateEnd(&zs);
    free(in);
    free(out);
    close(fd);
    return rc;
}

int dm_is_binary(const uint8_t *p, size_t n) {
    return n && memchr(p, 0, n < DM_BINARY_PROBE ? n : DM_BINARY_PROBE) != NULL;
}

void dm_text_append(char **buf, const char *fmt, ...) {
    char line[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t have = *buf ? strlen(*buf) : 0, add = strlen(line);
    char *nb = realloc(*buf, have + add + 2);
    if (!nb) return;
    memcpy(nb + have, line, add);
    nb[have + add] = '\n';
    nb[have + add + 1] = 0;
    *buf = nb;
}

/* ---- the files of a tree ------------------------------------------------------------ */

typedef struct {
    const char *const *incl, *const *excl;
    int n_incl, n_excl;
    char **paths;
    size_t n, cap;
    char **skipped;
    size_t rootlen;
} tree;

static int matches(const char *const *globs, int n, const char *rel) {
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    for (int i = 0; i < n; i++)
        if (fnmatch(globs[i], strchr(globs[i], '/') ? rel : base, 0) == 0) return 1;
    return 0;
}

static int walk(tree *t, const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot open directory %s: %s", dir, strerror(errno));
        return 1;
    }
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *full = malloc(len);
        if (!full) { rc = 1; break; }
        snprintf(full, len, "%s/%s", dir, e->d_name);
        struct stat fs;
        if (stat(full, &fs) == 0 && S_ISDIR(fs.st_mode)) {
            rc = walk(t, full, err, errlen);
            free(full);
            continue;
        }
        const char *rel = full + t->rootlen + 1;
        if (stat(full, &fs) != 0 || !S_ISREG(fs.st_mode)) {
            dm_text_append(t->skipped, "%s: not a regular file", full);
            free(full);
            continue;
        }
        if ((t->n_incl && !matches(t->incl, t->n_incl, rel)) ||
            matches(t->excl, t->n_excl, rel)) {
            free(full);
            continue;
        }
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 64;
            char **nb = realloc(t->paths, t->cap * sizeof *nb);
            if (!nb) { free(full); rc = 1; break; }
            t->paths = nb;
        }
        t->paths[t->n++] = full;
    }
    closedir(d);
    if (rc && !err[0]) snprintf(err, errlen, "out of memory listing %s", dir);
    return rc;
}

/* every path starts with the same "dir/": ordering them orders the relative paths */
static int cmp_path(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dm_list_tree(const char *dir, const char *const *incl, int n_incl, const char *const *excl,
                 int n_excl, char ***paths, size_t *n, char **skipped, char *err,
                 size_t errlen) {
    tree t = {incl, excl, n_incl, n_excl, NULL, 0, 0, skipped, strlen(dir)};
    *skipped = NULL;
    err[0] = 0;
    if (walk(&t, dir, err, errlen)) {
        dm_free_paths(t.paths, t.n);
        return 1;
    }
    if (t.n > 1) qsort(t.paths, t.n, sizeof *t.paths, cmp_path);
    *paths = t.paths;
    *n = t.n;
    return 0;
}

void dm_free_paths(char **paths, size_t n) {
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}
