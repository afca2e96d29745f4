/* tokenizer.c — the C side of io/tokenizer.h: segments, UTF-8, checksums, arrays. */
#include "io/tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return 1;
    *p = np;
    *cap = nc;
    return 0;
}

int dm_ids_push(dm_ids *a, const uint32_t *ids, size_t n) {
    if (grow((void **)&a->p, &a->cap, a->n + n, sizeof *a->p)) return 1;
    if (n) memcpy(a->p + a->n, ids, n * sizeof *ids);
    a->n += n;
    return 0;
}

int dm_bytes_push(dm_bytes *a, const uint8_t *p, size_t n) {
    if (grow((void **)&a->p, &a->cap, a->n + n, 1)) return 1;
    if (n) memcpy(a->p + a->n, p, n);
    a->n += n;
    return 0;
}

size_t dm_tok_segment(const uint8_t *p, size_t n) {
    size_t lim = n < DM_TOK_SEGMENT ? n : DM_TOK_SEGMENT;
    const uint8_t *nl = memchr(p, '\n', lim);
    if (nl) return (size_t)(nl - p) + 1;
    if (lim == n) return n;
    size_t k = lim; /* cut before a character's first byte (not a continuation byte) */
    while (k > lim - 3 && (p[k] & 0xC0) == 0x80) k--;
    return (p[k] & 0xC0) == 0x80 ? lim : k;
}

int dm_tokenizer_encode(const dm_tokenizer *t, const uint8_t *p, size_t n, dm_ids *out,
                        char *err, size_t errlen) {
    for (size_t off = 0; off < n;) {
        size_t len = dm_tok_segment(p + off, n - off);
        if (dm_tokenizer_encode_segment(t, p + off, len, out, err, errlen)) return 1;
        off += len;
    }
    return 0;
}

size_t dm_utf8_invalid(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;      /* overlong */
            else if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;      /* overlong */
            else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else return i;
        if (i + (size_t)len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
        for (int k = 2; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80) return i;
        i += (size_t)len;
    }
    return n;
}

void dm_tokenizer_checksum(const void *model, size_t n, char *buf) {
    snprintf(buf, DM_TOK_CHECKSUM_LEN, "xxh64:%016" PRIx64, (uint64_t)XXH64(model, n, 0));
}
