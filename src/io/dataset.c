/* dataset.c — see dataset.h. */
#include "io/dataset.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/files.h"

uint32_t dm_crc32(uint32_t crc, const void *p, size_t n) {
    const Bytef *b = p;
    uLong c = crc;
    while (n > 0) {
        uInt len = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, len);
        b += len;
        n -= len;
    }
    return (uint32_t)c;
}

uint32_t dm_crc32_combine(uint32_t a, uint32_t b, uint64_t bn) {
    return (uint32_t)crc32_combine(a, b, (z_off_t)bn); /* z_off_t: 64 bits on LP64 */
}

uint64_t dm_dataset_bytes(const dm_dataset *d) {
    return d->part[0].bytes + d->part[1].bytes;
}

uint32_t dm_dataset_crc32(const dm_dataset *d) {
    return dm_crc32_combine(d->part[0].crc, d->part[1].crc, d->part[1].bytes);
}

static int exists_in(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* meta.json's record of one .bin: {"bytes": N, "crc32": "xxxxxxxx", "mtime_ns": N} */
static int read_part(cJSON *o, const char *key, dm_dataset_part *p) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(o, key);
    cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes"),
          *c = cJSON_GetObjectItemCaseSensitive(e, "crc32"),
          *m = cJSON_GetObjectItemCaseSensitive(e, "mtime_ns");
    if (!cJSON_IsNumber(b) || b->valuedouble < 0 || !cJSON_IsString(c) ||
        strlen(c->valuestring) != 8 || !cJSON_IsString(m))
        return 1;
    char *end;
    unsigned long crc = strtoul(c->valuestring, &end, 16);
    if (*end) return 1;
    p->bytes = (uint64_t)b->valuedouble;
    p->crc = (uint32_t)crc;
    p->mtime_ns = strtoll(m->valuestring, &end, 10);
    return *end != 0;
}

/* 1 when dir is named NAME.partial-DIGITS: a prepare's working directory, never renamed
 * to NAME (it may be complete, killed between its last write and the rename). */
static int unrenamed(const char *dir) {
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/') l--;
    size_t d = l;
    while (d > 0 && dir[d - 1] >= '0' && dir[d - 1] <= '9') d--;
    const char *tag = ".partial-";
    size_t tl = strlen(tag);
    return d < l && d >= tl + 1 && !strncmp(dir + d - tl, tag, tl) && dir[d - tl - 1] != '/';
}

int dm_dataset_open(const char *dir, dm_dataset *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    int has_meta = exists_in(dir, "meta.json"), has_bin = exists_in(dir, "train.bin") ||
                                                          exists_in(dir, "val.bin");
    if ((has_meta || has_bin) && unrenamed(dir)) {
        snprintf(err, errlen, "%s is an unfinished `dormouse prepare` (its working directory, "
                 "never renamed to the name without .partial-PID, which a finished one gets): "
                 "prepare the data again", dir);
        return DM_DS_BAD;
    }
    if (exists_in(dir, DM_DATASET_MARK) || (has_bin && !has_meta)) {
        snprintf(err, errlen, "%s is an unfinished `dormouse prepare` (stopped or failed before "
                 "it wrote meta.json): prepare the data again", dir);
        return DM_DS_BAD;
    }
    if (!has_meta) return DM_DS_NONE;
    char p[4200], e2[512];
    snprintf(p, sizeof p, "%s/meta.json", dir);
    char *text = dm_read_file(p, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "%s", e2);
        return DM_DS_BAD;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format"),
          *ver = cJSON_GetObjectItemCaseSensitive(o, "format_version");
    int ours = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, DM_DATASET_FORMAT);
    if (!ours && !has_bin) { /* a corpus directory that holds a meta.json of its own */
        cJSON_Delete(o);
        return DM_DS_NONE;
    }
    int rc = DM_DS_BAD;
    if (!ours || !cJSON_IsNumber(ver))
        snprintf(err, errlen, "%s is damaged: it is not a dormouse data directory's meta.json", p);
    else if (ver->valueint != DM_DATASET_VERSION && ver->valueint != DM_TOKENS_FORMAT_VERSION)
        snprintf(err, errlen, "%s has format version %d; this dormouse reads versions %d "
                 "(bytes) and %d (tokens)", p, ver->valueint, DM_DATASET_VERSION,
                 DM_TOKENS_FORMAT_VERSION);
    else if (read_part(o, "train", &d->part[0]) || read_part(o, "val", &d->part[1]))
        snprintf(err, errlen, "%s is damaged: its train/val records (bytes, crc32, mtime_ns) "
                 "are missing or malformed", p);
    else
        rc = DM_DS_OK;
    d->tokens = rc == DM_DS_OK && ver->valueint == DM_TOKENS_FORMAT_VERSION;
    cJSON_Delete(o);
    for (int i = 0; i < 2 && rc == DM_DS_OK; i++) {
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, DM_PART_NAME(i));
        if (stat(p, &st) != 0) {
            snprintf(err, errlen, "%s is damaged: %s is missing (%s)", dir, DM_PART_NAME(i),
                     strerror(errno));
            rc = DM_DS_BAD;
        } else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != d->part[i].bytes) {
            snprintf(err, errlen, "%s is damaged: %s has %lld bytes, meta.json records %llu "
                     "(truncated or changed after prepare)", dir, DM_PART_NAME(i),
                     (long long)st.st_size, (unsigned long long)d->part[i].bytes);
            rc = DM_DS_BAD;
        }
    }
    return rc;
}
