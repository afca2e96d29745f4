/* text.c — see text.h. */
#include "base/text.h"

#include <stdio.h>
#include <string.h>

const char *dm_printable(const char *s, char *buf, size_t n) {
    if (n == 0) return buf;
    size_t len = strlen(s), k = 0;
    int cut = len > n - 1;
    size_t keep = cut ? (n > 4 ? n - 4 : 0) : len;
    for (; k < keep; k++) {
        unsigned char c = (unsigned char)s[k];
        buf[k] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    if (cut)
        for (size_t i = 0; i < 3 && k < n - 1; i++) buf[k++] = '.';
    buf[k] = 0;
    return buf;
}

/* the optimal-string-alignment distance of a and b (both shorter than 64 bytes) */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    int d[64][64];
    if (la >= 64 || lb >= 64) return 1 << 20;
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int v = sub < del ? sub : del;
            v = v < ins ? v : ins;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *dm_nearest(const char *s, const char *const *names, int n) {
    const char *best = NULL;
    int bd = 1 << 20;
    for (int i = 0; i < n && names[i]; i++) {
        int ls = (int)strlen(s), ln = (int)strlen(names[i]);
        int d = edit_distance(s, names[i]), lim = (ls > ln ? ls : ln) / 3;
        if (d <= (lim > 0 ? lim : 1) && d < bd) bd = d, best = names[i];
    }
    return best;
}

const char *dm_shell_quote(const char *s, char *buf, size_t n) {
    if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                        "_-./:=,+@%") == strlen(s)) {
        snprintf(buf, n, "%s", s);
        return buf;
    }
    size_t k = 0;
    if (k + 1 < n) buf[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') { /* close, an escaped quote, reopen */
            memcpy(buf + k, "'\\''", 4);
            k += 4;
        } else buf[k++] = *s;
    }
    if (k + 1 < n) buf[k++] = '\'';
    buf[k < n ? k : n - 1] = 0;
    return buf;
}
