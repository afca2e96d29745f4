/* safetensors.c — see safetensors.h. JSON through cJSON; every number of the header is
 * checked as a double (finite, integral, in range) before it becomes an integer. */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/text.h"
#include "io/files.h"

#define MAX_DIM 9007199254740992.0 /* 2^53: larger dimensions are not exact doubles */

static void put_u64le(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* index of the first non-finite value of x[0..n), or n */
static size_t first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* ---- checksums ---------------------------------------------------------------------- */

#define SUM_PREFIX "xxh64:"
#define SUM_META SUM_PREFIX "__metadata__"

static int is_sum_key(const char *k) { return !strncmp(k, SUM_PREFIX, strlen(SUM_PREFIX)); }

static void sum_text(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* XXH64 of the metadata entries other than checksums: key NUL value NUL, by key. kv holds
 * n (key, value) pairs; sorted here (its pairs move together). 1 when out of memory. */
static int meta_sum(const char **kv, int n, uint64_t *out) {
    XXH64_state_t *s = XXH64_createState();
    if (!s) return 1;
    qsort(kv, (size_t)n, 2 * sizeof *kv, cmp_str);
    XXH64_reset(s, 0);
    for (int i = 0; i < n; i++) {
        XXH64_update(s, kv[2 * i], strlen(kv[2 * i]) + 1);
        XXH64_update(s, kv[2 * i + 1], strlen(kv[2 * i + 1]) + 1);
    }
    *out = XXH64_digest(s);
    XXH64_freeState(s);
    return 0;
}

int dm_st_write(const char *path, const dm_st_tensor *ts, int n, const char *const *meta,
                char *err, size_t errlen) {
    for (int i = 0; i < n; i++) { /* never store what no reader accepts */
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        size_t bad = first_nonfinite(ts[i].data, numel);
        if (bad < numel) {
            snprintf(err, errlen, "cannot save %s: tensor '%s' holds %g at index %zu", path,
                     ts[i].name, (double)ts[i].data[bad], bad);
            return 1;
        }
    }
    int nm = 0;
    while (meta && meta[2 * nm] && meta[2 * nm + 1]) nm++;
    const char **kv = malloc((size_t)(2 * nm + 2) * sizeof *kv);
    uint64_t msum;
    if (!kv || (memcpy(kv, meta, (size_t)(2 * nm) * sizeof *kv), meta_sum(kv, nm, &msum))) {
        free(kv);
        snprintf(err, errlen, "out of memory writing %s", path);
        return 1;
    }
    free(kv);
    cJSON *root = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
    char hex[17], key[512];
    for (int i = 0; i < nm; i++) cJSON_AddStringToObject(md, meta[2 * i], meta[2 * i + 1]);
    /* the checksums: of the metadata above, and of each tensor's bytes by its name (so two
     * tensors' data_offsets swapped do not match) */
    sum_text(msum, hex);
    cJSON_AddStringToObject(md, SUM_META, hex);
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        sum_text(XXH64(ts[i].data, numel * sizeof(float), 0), hex);
        snprintf(key, sizeof key, SUM_PREFIX "%s", ts[i].name);
        cJSON_AddStringToObject(md, key, hex);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        cJSON *t = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < ts[i].ndim; d++) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].shape[d]));
            numel *= (uint64_t)ts[i].shape[d];
        }
        cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += 4 * numel;
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    }
    char *js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!js) {
        snprintf(err, errlen, "out of memory writing %s", path);
        return 1;
    }
    size_t jl = strlen(js), hl = (jl + 7) & ~(size_t)7; /* data starts 8-byte aligned */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        free(js);
        return 1;
    }
    unsigned char len8[8];
    put_u64le(len8, hl);
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(js, 1, jl, f) == jl;
    for (size_t i = jl; ok && i < hl; i++) ok = fputc(' ', f) != EOF;
    free(js);
    for (int i = 0; ok && i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        ok = fwrite(ts[i].data, sizeof(float), numel, f) == numel;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    dm_fsync_dir(dirname(dir));
    return 0;
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    uint64_t begin, end;
} st_entry;

struct dm_st_file {
    cJSON *header;
    const cJSON *meta; /* the __metadata__ object, or NULL */
    float *data;       /* the data section, 64-byte aligned */
    size_t data_bytes;
    int n;             /* tensors, in header order */
    st_entry *e;
    int summed;        /* every tensor and the metadata carry a checksum, all verified */
};

void dm_st_close(dm_st_file *f) {
    if (!f) return;
    cJSON_Delete(f->header);
    free(f->data);
    free(f->e);
    free(f);
}

/* 1 when s[0..n) is valid UTF-8 without NUL bytes */
static int utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == 0) return 0;
        if (c < 0x80) { i++; continue; }
        int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
        if (!len || c > 0xF4 || i + (size_t)len > n) return 0;
        unsigned cp = c & (0x7Fu >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3Fu);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first name given twice among the children of o, or NULL (sorted copy). */
static const char *duplicate_name(const cJSON *o, int n, int *oom) {
    const cJSON **v = malloc((size_t)(n ? n : 1) * sizeof *v);
    *oom = !v;
    if (!v) return NULL;
    int k = 0;
    for (const cJSON *c = o->child; c; c = c->next) v[k++] = c;
    qsort(v, (size_t)k, sizeof *v, cmp_name);
    const char *dup = NULL;
    for (int i = 1; i < k && !dup; i++)
        if (!strcmp(v[i - 1]->string, v[i]->string)) dup = v[i]->string;
    free(v);
    return dup;
}

/* a JSON number that is an integer in [0, hi] (as a double, before any cast) */
static int int_in(const cJSON *x, double hi) {
    if (!cJSON_IsNumber(x)) return 0;
    double v = x->valuedouble;
    return isfinite(v) && v >= 0 && v <= hi && v == floor(v);
}

static int cmp_offset(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* One tensor entry of the header into e. 0 ok, else err. */
static int parse_entry(const cJSON *t, st_entry *e, size_t data_bytes, const char *path,
                       char *err, size_t errlen) {
    char nm[96], f1[32];
    e->name = t->string;
    dm_printable(t->string, nm, sizeof nm); /* names quoted in errors stay on one line */
    if (!cJSON_IsObject(t)) {
        snprintf(err, errlen, "%s: header entry '%s' is not an object", path, nm);
        return 1;
    }
    const cJSON *dt = NULL, *sh = NULL, *of = NULL;
    for (const cJSON *c = t->child; c; c = c->next) {
        const cJSON **slot = !strcmp(c->string, "dtype") ? &dt
                           : !strcmp(c->string, "shape") ? &sh
                           : !strcmp(c->string, "data_offsets") ? &of : NULL;
        if (!slot || *slot) {
            snprintf(err, errlen, "%s: tensor '%s': %s field '%s' in its header entry", path, nm,
                     slot ? "a repeated" : "an unknown", dm_printable(c->string, f1, sizeof f1));
            return 1;
        }
        *slot = c;
    }
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of)) {
        snprintf(err, errlen, "%s: tensor '%s': its header entry needs dtype (a string), shape "
                 "and data_offsets (arrays)", path, nm);
        return 1;
    }
    if (strcmp(dt->valuestring, "F32") != 0) {
        snprintf(err, errlen, "%s: tensor '%s' has dtype '%s'; dormouse reads F32 only", path,
                 nm, dm_printable(dt->valuestring, f1, sizeof f1));
        return 1;
    }
    int nd = cJSON_GetArraySize(sh);
    if (nd > 4) {
        snprintf(err, errlen, "%s: tensor '%s' has %d dimensions; dormouse reads at most 4", path,
                 nm, nd);
        return 1;
    }
    uint64_t numel = 1;
    int overflow = 0;
    e->ndim = 0;
    for (const cJSON *d = sh->child; d; d = d->next) {
        if (!int_in(d, MAX_DIM)) {
            snprintf(err, errlen, "%s: tensor '%s': shape holds a value that is not an integer "
                     "in [0, 2^53]", path, nm);
            return 1;
        }
        uint64_t v = (uint64_t)d->valuedouble;
        e->shape[e->ndim++] = (int64_t)v;
        overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t nbytes;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)4, &nbytes);
    if (overflow) {
        snprintf(err, errlen, "%s: tensor '%s': its shape's element count overflows", path, nm);
        return 1;
    }
    if (cJSON_GetArraySize(of) != 2 || !int_in(of->child, 1e300) ||
        !int_in(of->child->next, 1e300)) {
        snprintf(err, errlen, "%s: tensor '%s': data_offsets must be two non-negative integers",
                 path, nm);
        return 1;
    }
    double b = of->child->valuedouble, en = of->child->next->valuedouble;
    if (en > (double)data_bytes || b > en) {
        if (b <= en)
            snprintf(err, errlen, "%s is truncated: tensor '%s' ends at data byte %.0f, the file "
                     "holds %zu", path, nm, en, data_bytes);
        else
            snprintf(err, errlen, "%s: tensor '%s': data_offsets [%.0f, %.0f] run backwards",
                     path, nm, b, en);
        return 1;
    }
    e->begin = (uint64_t)b; /* integers within [0, data_bytes]: exact */
    e->end = (uint64_t)en;
    if (e->end - e->begin != nbytes) {
        snprintf(err, errlen, "%s: tensor '%s': data_offsets [%.0f, %.0f] hold %.0f bytes, its "
                 "shape needs %llu", path, nm, b, en, en - b, (unsigned long long)nbytes);
        return 1;
    }
    return 0;
}

static const st_entry *find(const dm_st_file *f, const char *name);

/* The checksums, when the metadata hold any: then the metadata's and every tensor's must be
 * there (no other), 16 hex digits each, and match (f->summed). 0 ok, else err. */
static int check_sums(dm_st_file *f, const char *path, char *err, size_t errlen) {
    int nsum = 0, nkv = 0;
    for (const cJSON *m = f->meta ? f->meta->child : NULL; m; m = m->next) {
        if (is_sum_key(m->string)) nsum++;
        else nkv++;
    }
    if (!nsum) return 0;
    char p1[96], hex[17];
    const char **kv = malloc((size_t)(2 * nkv + 2) * sizeof *kv);
    uint64_t h;
    int k = 0;
    for (const cJSON *m = kv ? f->meta->child : NULL; m; m = m->next)
        if (!is_sum_key(m->string)) {
            kv[k++] = m->string;
            kv[k++] = m->valuestring;
        }
    if (!kv || meta_sum(kv, nkv, &h)) {
        free(kv);
        snprintf(err, errlen, "out of memory reading %s", path);
        return 1;
    }
    free(kv);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(f->meta, SUM_META);
    sum_text(h, hex);
    if (!ms || strcmp(ms->valuestring, hex) != 0) {
        snprintf(err, errlen, "%s: the metadata %s (a damaged checkpoint)", path,
                 ms ? "do not match their checksum" : "have no checksum of their own");
        return 1;
    }
    if (nsum != f->n + 1) { /* one per tensor and the metadata's: name the odd one */
        for (const cJSON *m = f->meta->child; m; m = m->next)
            if (is_sum_key(m->string) && strcmp(m->string, SUM_META) &&
                !find(f, m->string + strlen(SUM_PREFIX))) {
                snprintf(err, errlen, "%s: a checksum for tensor '%s', which the file does not "
                         "hold (a damaged checkpoint)", path,
                         dm_printable(m->string + strlen(SUM_PREFIX), p1, sizeof p1));
                return 1;
            }
    }
    char key[512];
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->e[i];
        snprintf(key, sizeof key, SUM_PREFIX "%s", e->name);
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(f->meta, key);
        sum_text(XXH64((const char *)f->data + e->begin, e->end - e->begin, 0), hex);
        if (!ts || strcmp(ts->valuestring, hex) != 0) {
            snprintf(err, errlen, "%s: tensor '%s' %s (a damaged checkpoint)", path,
                     dm_printable(e->name, p1, sizeof p1),
                     ts ? "does not match its checksum" : "has no checksum");
            return 1;
        }
    }
    f->summed = 1;
    return 0;
}

/* Check the header (hdr[0..hl), NUL-terminated at hl) against a data section of
 * data_bytes, then the data (owned by the result from here on). */
static dm_st_file *validate(char *hdr, size_t hl, float *data, size_t data_bytes,
                            const char *path, char *err, size_t errlen) {
    dm_st_file *f = calloc(1, sizeof *f);
    const st_entry **order = NULL;
    if (!f) {
        free(data);
        snprintf(err, errlen, "out of memory reading %s", path);
        return NULL;
    }
    f->data = data;
    f->data_bytes = data_bytes;
    if (hl < 2 || hdr[0] != '{') {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (the header does not start "
                 "with '{')", path);
        goto fail;
    }
    if (!utf8_ok((const unsigned char *)hdr, hl)) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (the header is not UTF-8 text)",
                 path);
        goto fail;
    }
    const char *end = NULL;
    f->header = cJSON_ParseWithLengthOpts(hdr, hl, &end, 0);
    if (!cJSON_IsObject(f->header)) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (the header is not a JSON "
                 "object)", path);
        goto fail;
    }
    for (const char *p = end; p < hdr + hl; p++)
        if (*p != ' ') {
            snprintf(err, errlen, "%s is not a safetensors checkpoint (the header has text after "
                     "its JSON object, at byte %zu)", path, (size_t)(p - hdr));
            goto fail;
        }
    int n = cJSON_GetArraySize(f->header), oom;
    char p1[96], p2[96];
    const char *dup = duplicate_name(f->header, n, &oom);
    if (oom || dup) {
        if (oom) snprintf(err, errlen, "out of memory reading %s", path);
        else snprintf(err, errlen, "%s: the header names '%s' twice", path,
                      dm_printable(dup, p1, sizeof p1));
        goto fail;
    }
    f->e = malloc((size_t)(n ? n : 1) * sizeof *f->e);
    order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!f->e || !order) {
        snprintf(err, errlen, "out of memory reading %s", path);
        goto fail;
    }
    for (const cJSON *t = f->header->child; t; t = t->next) {
        if (!strcmp(t->string, "__metadata__")) {
            int bad = !cJSON_IsObject(t);
            for (const cJSON *m = bad ? NULL : t->child; m && !bad; m = m->next)
                bad = !cJSON_IsString(m);
            if (bad) {
                snprintf(err, errlen, "%s: __metadata__ must be an object of strings", path);
                goto fail;
            }
            dup = duplicate_name(t, cJSON_GetArraySize(t), &oom);
            if (oom || dup) {
                if (oom) snprintf(err, errlen, "out of memory reading %s", path);
                else snprintf(err, errlen, "%s: __metadata__ names '%s' twice", path,
                              dm_printable(dup, p1, sizeof p1));
                goto fail;
            }
            f->meta = t;
            continue;
        }
        if (parse_entry(t, &f->e[f->n], data_bytes, path, err, errlen)) goto fail;
        f->n++;
    }
    /* sorted by offset, the tensors tile the data section exactly */
    for (int i = 0; i < f->n; i++) order[i] = &f->e[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_offset);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = order[i];
        if (e->begin != pos) {
            if (e->begin < pos)
                snprintf(err, errlen, "%s: tensor '%s' overlaps tensor '%s' (data_offsets "
                         "[%llu, %llu])", path, dm_printable(e->name, p1, sizeof p1),
                         dm_printable(order[i - 1]->name, p2, sizeof p2),
                         (unsigned long long)e->begin, (unsigned long long)e->end);
            else
                snprintf(err, errlen, "%s: a gap of %llu bytes before tensor '%s' (data_offsets "
                         "[%llu, %llu])", path, (unsigned long long)(e->begin - pos),
                         dm_printable(e->name, p1, sizeof p1),
                         (unsigned long long)e->begin, (unsigned long long)e->end);
            goto fail;
        }
        pos = e->end;
    }
    if (pos != data_bytes) {
        snprintf(err, errlen, "%s: %llu bytes after the last tensor (the data section holds %zu, "
                 "the tensors %llu)", path, (unsigned long long)(data_bytes - pos), data_bytes,
                 (unsigned long long)pos);
        goto fail;
    }
    if (check_sums(f, path, err, errlen)) goto fail;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->e[i];
        size_t numel = (size_t)((e->end - e->begin) / 4);
        const float *x = (const float *)((const char *)f->data + e->begin);
        size_t bad = first_nonfinite(x, numel);
        if (bad < numel) {
            char at[96] = "";
            if (e->ndim == 2)
                snprintf(at, sizeof at, " ([%lld, %lld])", (long long)(bad / (size_t)e->shape[1]),
                         (long long)(bad % (size_t)e->shape[1]));
            snprintf(err, errlen, "%s: tensor '%s' holds %g at index %zu%s (a damaged or "
                     "diverged checkpoint)", path, dm_printable(e->name, p1, sizeof p1),
                     (double)x[bad], bad, at);
            goto fail;
        }
    }
    free((void *)order);
    return f;
fail:
    free((void *)order);
    dm_st_close(f);
    return NULL;
}

/* Where the bytes come from: a file descriptor or memory. */
typedef struct {
    int fd;
    const unsigned char *mem;
} st_src;

static int src_read(const st_src *s, void *buf, size_t n, uint64_t off) {
    if (s->mem) {
        memcpy(buf, s->mem + off, n);
        return 0;
    }
    return dm_pread_all(s->fd, buf, n, (long long)off);
}

static dm_st_file *read_st(const st_src *s, uint64_t fsize, const char *path, char *err,
                           size_t errlen) {
    unsigned char len8[8];
    if (fsize < 8 || src_read(s, len8, 8, 0)) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (too short: %llu bytes)", path,
                 (unsigned long long)fsize);
        return NULL;
    }
    uint64_t hl = get_u64le(len8);
    if (hl > DM_ST_MAX_HEADER || hl > fsize - 8) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (header length %llu, file %llu "
                 "bytes%s)", path, (unsigned long long)hl, (unsigned long long)fsize,
                 hl > DM_ST_MAX_HEADER ? "; the format allows at most 100000000" : "");
        return NULL;
    }
    size_t data_bytes = (size_t)(fsize - 8 - hl);
    char *hdr = malloc((size_t)hl + 1);
    size_t cap = (data_bytes + 63) & ~(size_t)63;
    float *data = aligned_alloc(64, cap ? cap : 64);
    if (!hdr || !data) {
        free(hdr);
        free(data);
        snprintf(err, errlen, "out of memory reading %s (%llu bytes)", path,
                 (unsigned long long)fsize);
        return NULL;
    }
    if (src_read(s, hdr, (size_t)hl, 8) || src_read(s, data, data_bytes, 8 + hl)) {
        snprintf(err, errlen, "cannot read %s: %s", path, errno ? strerror(errno) : "it shrank");
        free(hdr);
        free(data);
        return NULL;
    }
    hdr[hl] = 0;
    dm_st_file *f = validate(hdr, (size_t)hl, data, data_bytes, path, err, errlen);
    free(hdr); /* cJSON copied what it keeps */
    return f;
}

dm_st_file *dm_st_open(const char *path, char *err, size_t errlen) {
    int fd = dm_open_regular(path, "checkpoint", err, errlen);
    if (fd < 0) return NULL;
    struct stat st;
    dm_st_file *f = NULL;
    if (fstat(fd, &st) != 0) snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    else f = read_st(&(st_src){fd, NULL}, (uint64_t)st.st_size, path, err, errlen);
    close(fd);
    return f;
}

dm_st_file *dm_st_parse(const void *bytes, size_t n, const char *name, char *err,
                        size_t errlen) {
    static const unsigned char none[1];
    return read_st(&(st_src){-1, bytes ? bytes : none}, n, name, err, errlen);
}

static const st_entry *find(const dm_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i];
    return NULL;
}

const float *dm_st_get(const dm_st_file *f, const char *name, int *ndim, int64_t shape[4]) {
    const st_entry *e = find(f, name);
    if (!e) return NULL;
    if (ndim) *ndim = e->ndim;
    if (shape)
        for (int d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
    return (const float *)((const char *)f->data + e->begin);
}

int dm_st_count(const dm_st_file *f) { return f->n; }

const char *dm_st_name(const dm_st_file *f, int i) {
    return i >= 0 && i < f->n ? f->e[i].name : NULL;
}

int dm_st_checksummed(const dm_st_file *f) { return f->summed; }

const char *dm_st_meta(const dm_st_file *f, const char *key) {
    const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
