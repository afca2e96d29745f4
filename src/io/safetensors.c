/* safetensors.c — see safetensors.h. JSON through cJSON. */
#include "io/safetensors.h"

#include "io/files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (64u << 20)

static void put_u64le(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int dm_st_write(const char *path, const dm_st_tensor *ts, int n, const char *const *meta,
                char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; meta && meta[i] && meta[i + 1]; i += 2) cJSON_AddStringToObject(md, meta[i], meta[i + 1]);
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

struct dm_st_file {
    cJSON *header;
    float *data; /* the data section, 64-byte aligned */
    size_t data_bytes;
};

void dm_st_close(dm_st_file *f) {
    if (!f) return;
    cJSON_Delete(f->header);
    free(f->data);
    free(f);
}

dm_st_file *dm_st_open(const char *path, char *err, size_t errlen) {
    dm_st_file *sf = calloc(1, sizeof *sf);
    char *hbuf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f || !sf) {
        snprintf(err, errlen, "cannot open checkpoint %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "checkpoint %s is not a regular file", path);
        goto fail;
    }
    size_t fsize = (size_t)st.st_size;
    unsigned char len8[8];
    if (fsize < 8 || fread(len8, 1, 8, f) != 8) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (too short: %zu bytes)", path, fsize);
        goto fail;
    }
    uint64_t hl = get_u64le(len8);
    if (hl < 2 || hl > MAX_HEADER || hl > fsize - 8) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (header length %llu, file %zu bytes)",
                 path, (unsigned long long)hl, fsize);
        goto fail;
    }
    hbuf = malloc(hl + 1);
    if (!hbuf || fread(hbuf, 1, hl, f) != hl) {
        snprintf(err, errlen, "cannot read the header of %s", path);
        goto fail;
    }
    hbuf[hl] = 0;
    sf->header = cJSON_ParseWithLength(hbuf, hl);
    if (!sf->header || !cJSON_IsObject(sf->header)) {
        snprintf(err, errlen, "%s is not a safetensors checkpoint (header is not a JSON object)", path);
        goto fail;
    }
    sf->data_bytes = fsize - 8 - hl;
    /* validate every entry before reading data */
    uint64_t covered = 0;
    for (cJSON *e = sf->header->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) goto bad_entry;
            for (cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m)) goto bad_entry;
            continue;
        }
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0 || !cJSON_IsArray(sh) ||
            cJSON_GetArraySize(sh) > 4 || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
            goto bad_entry;
        double numel = 1;
        for (cJSON *d = sh->child; d; d = d->next) {
            if (!cJSON_IsNumber(d) || d->valuedouble < 0) goto bad_entry;
            numel *= d->valuedouble;
        }
        double b = cJSON_GetArrayItem(of, 0)->valuedouble, en = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (!cJSON_IsNumber(of->child) || !cJSON_IsNumber(of->child->next) || b < 0 || en < b ||
            en - b != 4 * numel || (uint64_t)b % 4 != 0)
            goto bad_entry;
        if (en > (double)sf->data_bytes) {
            snprintf(err, errlen, "%s is truncated: tensor '%s' ends at data byte %.0f, the file holds %zu",
                     path, e->string, en, sf->data_bytes);
            goto fail;
        }
        covered += (uint64_t)(en - b);
        continue;
    bad_entry:
        snprintf(err, errlen, "%s: bad header entry '%s'", path, e->string);
        goto fail;
    }
    if (covered > sf->data_bytes) {
        snprintf(err, errlen, "%s: tensors overlap or exceed the data section", path);
        goto fail;
    }
    sf->data = aligned_alloc(64, (sf->data_bytes + 63) & ~(size_t)63);
    if (!sf->data && sf->data_bytes) {
        snprintf(err, errlen, "out of memory reading %s", path);
        goto fail;
    }
    if (sf->data_bytes && fread(sf->data, 1, sf->data_bytes, f) != sf->data_bytes) {
        snprintf(err, errlen, "%s is truncated", path);
        goto fail;
    }
    fclose(f);
    free(hbuf);
    return sf;
fail:
    if (f) fclose(f);
    free(hbuf);
    dm_st_close(sf);
    return NULL;
}

const float *dm_st_get(const dm_st_file *f, const char *name, int *ndim, int64_t shape[4]) {
    if (strcmp(name, "__metadata__") == 0) return NULL;
    cJSON *e = cJSON_GetObjectItemCaseSensitive(f->header, name);
    if (!e) return NULL;
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    int nd = 0;
    for (cJSON *d = sh->child; d; d = d->next, nd++)
        if (shape) shape[nd] = (int64_t)d->valuedouble;
    if (ndim) *ndim = nd;
    double b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), 0)->valuedouble;
    return (const float *)((const char *)f->data + (size_t)b);
}

int dm_st_count(const dm_st_file *f) {
    int n = 0;
    for (cJSON *e = f->header->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
    return n;
}

const char *dm_st_meta(const dm_st_file *f, const char *key) {
    cJSON *md = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    cJSON *v = md ? cJSON_GetObjectItemCaseSensitive(md, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
