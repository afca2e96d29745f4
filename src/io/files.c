/* files.c — see files.h. */
#include "io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dm_mkdir_p(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return 1;
            *s = '/';
        }
    return mkdir(p, 0755) != 0 && errno != EEXIST;
}

int dm_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return 1;
    int rc = fsync(fd);
    close(fd);
    return rc != 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

int dm_rmtree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : 1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0;
}

char *dm_read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        snprintf(err, errlen, "out of memory reading %s", path);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

int dm_write_file_atomic(const char *path, const char *text, char *err, size_t errlen) {
    char tmp[4200], dir[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f) ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    snprintf(dir, sizeof dir, "%s", path);
    dm_fsync_dir(dirname(dir));
    return 0;
}

int dm_read_line(const char *path, char *buf, size_t n) {
    char err[64];
    char *t = dm_read_file(path, err, sizeof err);
    if (!t) return 1;
    t[strcspn(t, "\n")] = 0;
    int rc = !t[0] || strlen(t) >= n;
    if (!rc) snprintf(buf, n, "%s", t);
    free(t);
    return rc;
}
