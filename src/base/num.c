/* num.c — see num.h. The grammar is checked here; strtoll / strtoull / strtod then
 * convert a string already known to be of that form (they alone would take leading
 * spaces, '+', hex and inf). */
#include "base/num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* s + the length of the digit run at s */
static const char *digits(const char *s) {
    while (is_digit(*s)) s++;
    return s;
}

int dm_parse_int(const char *s, long long lo, long long hi, long long *out) {
    const char *p = s + (*s == '-');
    if (!is_digit(*p) || *digits(p)) return 1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

int dm_parse_u64(const char *s, uint64_t *out) {
    if (!is_digit(*s) || *digits(s)) return 1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT64_MAX) return 1;
    *out = (uint64_t)v;
    return 0;
}

int dm_parse_duration(const char *s, long long hi, long long *out) {
    static const char units[] = "hms";
    static const long long scale[] = {3600, 60, 1};
    long long total = 0;
    if (!is_digit(*s)) return 1;
    if (!*digits(s)) return dm_parse_int(s, 0, hi, out); /* plain seconds */
    int u = 0; /* the next unit allowed: h, then m, then s */
    while (*s) {
        const char *e = digits(s);
        if (e == s || e - s > 9) return 1;
        while (u < 3 && *e != units[u]) u++;
        if (u == 3) return 1;
        total += strtoll(s, NULL, 10) * scale[u++];
        s = e + 1;
    }
    if (total > hi) return 1;
    *out = total;
    return 0;
}

int dm_parse_real(const char *s, double *out) {
    const char *p = s + (*s == '-');
    const char *q = digits(p);
    int whole = q > p, frac = 0;
    if (*q == '.') {
        const char *r = digits(q + 1);
        frac = r > q + 1;
        q = r;
    }
    if (!whole && !frac) return 1;
    if (*q == 'e' || *q == 'E') {
        const char *e = q + 1 + (q[1] == '+' || q[1] == '-');
        if (!is_digit(*e)) return 1;
        q = digits(e);
    }
    if (*q) return 1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* ERANGE on underflow gives a tiny or zero value, which is fine; overflow is inf */
    if (*end || !isfinite(v)) return 1;
    *out = v;
    return 0;
}
