/* stfile.c — see stfile.h. */
#include "stfile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "check.h"

int t_st_read(const char *path, t_stf *f) {
    size_t n;
    char *b = t_slurp(path, &n);
    if (!b || n < 8) return free(b), 1;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(unsigned char)b[i] << (8 * i);
    f->hdr = cJSON_ParseWithLength(b + 8, (size_t)hl);
    f->dn = n - 8 - (size_t)hl;
    f->data = malloc(f->dn + 64);
    memcpy(f->data, b + 8 + hl, f->dn);
    free(b);
    return f->hdr == NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The checksums of f made anew (io/safetensors.h): each tensor's bytes where its t_st_offsets
 * lie within the data, and the other metadata entries, by key. */
void t_st_resign(t_stf *f) {
    cJSON *m = cJSON_GetObjectItem(f->hdr, "__metadata__");
    char hex[17], key[512];
    if (!cJSON_IsObject(m)) return;
    for (cJSON *e = m->child, *next; e; e = next) {
        next = e->next;
        if (!strncmp(e->string, "xxh64:", 6)) cJSON_DeleteItemFromObject(m, e->string);
    }
    const char *kv[64];
    int n = 0;
    for (cJSON *e = m->child; e && n < 32; e = e->next) {
        if (!cJSON_IsString(e)) continue;
        kv[2 * n] = e->string;
        kv[2 * n++ + 1] = e->valuestring;
    }
    qsort(kv, (size_t)n, 2 * sizeof *kv, cmp_str);
    XXH64_state_t *s = XXH64_createState();
    XXH64_reset(s, 0);
    for (int i = 0; i < 2 * n; i++) XXH64_update(s, kv[i], strlen(kv[i]) + 1);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64_digest(s));
    XXH64_freeState(s);
    cJSON_AddStringToObject(m, "xxh64:__metadata__", hex);
    for (cJSON *e = f->hdr->child; e; e = e->next) {
        cJSON *o = cJSON_GetObjectItem(e, "data_offsets");
        if (!strcmp(e->string, "__metadata__") || cJSON_GetArraySize(o) != 2) continue;
        double b = cJSON_GetArrayItem(o, 0)->valuedouble, en = cJSON_GetArrayItem(o, 1)->valuedouble;
        if (!(b >= 0 && b <= en && en <= (double)f->dn)) continue;
        snprintf(hex, sizeof hex, "%016llx",
                 (unsigned long long)XXH64(f->data + (size_t)b, (size_t)(en - b), 0));
        snprintf(key, sizeof key, "xxh64:%s", e->string);
        cJSON_AddStringToObject(m, key, hex);
    }
}

/* Write f to path (its checksums made anew when resign) with the header length written as the true
 * one + hl_delta. */
void t_st_write(const char *path, t_stf *f, long hl_delta, int resign) {
    if (resign) t_st_resign(f);
    char *js = cJSON_PrintUnformatted(f->hdr);
    /* padded to 8 bytes with at least one space, so that a header length one short cuts
     * padding, not JSON, whatever the length of the config in the metadata */
    size_t jl = strlen(js), hl = (jl + 8) & ~(size_t)7;
    size_t n = 8 + hl + f->dn;
    unsigned char *b = malloc(n);
    uint64_t w = (uint64_t)((long)hl + hl_delta);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(w >> (8 * i));
    memcpy(b + 8, js, jl);
    memset(b + 8 + jl, ' ', hl - jl);
    memcpy(b + 8 + hl, f->data, f->dn);
    CHECK(t_spit(path, b, n) == 0);
    free(b);
    free(js);
}

void t_st_free(t_stf *f) {
    cJSON_Delete(f->hdr);
    free(f->data);
}

cJSON *t_st_offsets(t_stf *f, const char *name) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(f->hdr, name), "data_offsets");
}
double t_st_off_at(t_stf *f, const char *name, int i) {
    return cJSON_GetArrayItem(t_st_offsets(f, name), i)->valuedouble;
}
void t_st_set_offsets(t_stf *f, const char *name, double b, double e) {
    cJSON *o = t_st_offsets(f, name);
    cJSON_SetNumberValue(cJSON_GetArrayItem(o, 0), b);
    cJSON_SetNumberValue(cJSON_GetArrayItem(o, 1), e);
}
void t_st_set_meta(t_stf *f, const char *key, const char *value) {
    cJSON *m = cJSON_GetObjectItem(f->hdr, "__metadata__");
    cJSON_DeleteItemFromObject(m, key);
    cJSON_AddStringToObject(m, key, value);
}
/* the name of the tensor whose data starts at byte `begin` */
const char *t_st_at_offset(t_stf *f, double begin) {
    for (cJSON *e = f->hdr->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__") && t_st_off_at(f, e->string, 0) == begin) return e->string;
    return NULL;
}
void t_st_set_float(t_stf *f, const char *name, size_t i, float v) {
    memcpy(f->data + (size_t)t_st_off_at(f, name, 0) + 4 * i, &v, 4);
}

