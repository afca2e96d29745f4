/* linelog.c — see linelog.h. */
#include "io/linelog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dm_linelog_open(dm_linelog *l, const char *path, char *err, size_t errlen) {
    *l = (dm_linelog){.fd = -1};
    l->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (l->fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* One try at writing what is pending; 0 when nothing is left. */
static int write_pending(dm_linelog *l) {
    size_t done = 0;
    while (done < l->n) {
        ssize_t w = write(l->fd, l->pend + done, l->n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            l->err = w < 0 ? errno : ENOSPC;
            break;
        }
        done += (size_t)w;
    }
    for (size_t i = 0; i < done; i++) l->lines -= l->pend[i] == '\n';
    memmove(l->pend, l->pend + done, l->n - done);
    l->n -= done;
    if (!l->n) l->err = 0;
    return l->n != 0;
}

int dm_linelog_add(dm_linelog *l, const char *line) {
    size_t len = strlen(line);
    if (l->n + len > l->cap) {
        size_t cap = 2 * (l->n + len) + 4096;
        char *p = realloc(l->pend, cap);
        if (!p) return -1;
        l->pend = p;
        l->cap = cap;
    }
    memcpy(l->pend + l->n, line, len);
    l->n += len;
    for (size_t i = 0; i < len; i++) l->lines += line[i] == '\n';
    return write_pending(l);
}

int dm_linelog_flush(dm_linelog *l, int tries, int wait_ms) {
    for (int i = 0; l->n && i < tries; i++) {
        if (i) {
            struct timespec ts = {wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        write_pending(l);
    }
    return l->n != 0;
}

int dm_linelog_close(dm_linelog *l) {
    int left = l->fd >= 0 && dm_linelog_flush(l, 1, 0);
    if (l->fd >= 0 && close(l->fd) != 0 && !left) left = 1;
    free(l->pend);
    *l = (dm_linelog){.fd = -1};
    return left;
}
