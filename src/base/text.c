/* text.c — see text.h. */
#include "base/text.h"

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
