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

int dm_open_regular(const char *path, const char *what, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    const char *sp = what ? " " : "";
    if (!what) what = "";
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s%s%s: %s", what, sp, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s%s%s is not a regular file", what, sp, path);
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int dm_pread_all(int fd, void *buf, size_t n, long long off) {
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = 0;
            return 1;
        }
        p += got;
        n -= (size_t)got;
        off += got;
    }
    return 0;
}

int dm_mkdir_made(const char *path, char *made, size_t madelen) {
    char p[4096];
    if (made && madelen) made[0] = 0;
    snprintf(p, sizeof p, "%s", path);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/') p[--len] = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) == 0) {
            if (made && madelen && !made[0]) snprintf(made, madelen, "%s", p);
        } else if (errno != EEXIST) {
            return 1;
        }
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return 1;
    }
    return 0;
}

int dm_mkdir_p(const char *path) { return dm_mkdir_made(path, NULL, 0); }

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
    size_t n;
    return dm_read_file_n(path, &n, err, errlen);
}

char *dm_read_file_n(const char *path, size_t *len, char *err, size_t errlen) {
    int fd = dm_open_regular(path, NULL, err, errlen);
    if (fd < 0) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    close(fd);
    if (!buf) {
        snprintf(err, errlen, "out of memory reading %s", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
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
