/* stfile.h — a safetensors file as its header JSON and its data, to rewrite in tests
 * (tests/test_ckptfile.c, tests/test_robust.c): read, change (offsets, metadata, values),
 * write back with its checksums made anew (as a writer would: then each change reaches
 * the check it is about) or left as they were (damage the checksums must catch). */
#ifndef DM_TEST_STFILE_H
#define DM_TEST_STFILE_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct {
    cJSON *hdr;
    char *data;
    size_t dn;
} t_stf;

int t_st_read(const char *path, t_stf *f); /* 0 ok */
/* Write f to path, its checksums made anew when resign, with the header length written as
 * the true one + hl_delta. */
void t_st_write(const char *path, t_stf *f, long hl_delta, int resign);
void t_st_free(t_stf *f);
/* The checksums of f made anew (io/safetensors.h) */
void t_st_resign(t_stf *f);
cJSON *t_st_offsets(t_stf *f, const char *name);
double t_st_off_at(t_stf *f, const char *name, int i);
void t_st_set_offsets(t_stf *f, const char *name, double b, double e);
void t_st_set_meta(t_stf *f, const char *key, const char *value);
/* the name of the tensor whose data starts at byte `begin` */
const char *t_st_at_offset(t_stf *f, double begin);
void t_st_set_float(t_stf *f, const char *name, size_t i, float v);

#endif
