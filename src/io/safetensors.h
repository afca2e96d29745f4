/* safetensors.h — read and write safetensors files (F32 tensors + string metadata).
 *
 * Format: u64 little-endian header length n, then n bytes of JSON
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * (padded with spaces so the data starts 8-byte aligned), then the raw data.
 * Writes go to "<path>.tmp", are fsynced, then renamed over path: a crash leaves the
 * old file or the new one, never half of one. Reads validate everything against the
 * file size and reject what does not parse. */
#ifndef DM_SAFETENSORS_H
#define DM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[4];
} dm_st_tensor;

/* meta: NULL-terminated list of key, value, key, value, ... strings. 0 ok, else err. */
int dm_st_write(const char *path, const dm_st_tensor *tensors, int n, const char *const *meta,
                char *err, size_t errlen);

typedef struct dm_st_file dm_st_file;

/* Open and validate. NULL with err on failure (missing, truncated, not safetensors). */
dm_st_file *dm_st_open(const char *path, char *err, size_t errlen);
void dm_st_close(dm_st_file *f);
/* The tensor's data (NULL if absent); ndim/shape filled when non-NULL. */
const float *dm_st_get(const dm_st_file *f, const char *name, int *ndim, int64_t shape[4]);
int dm_st_count(const dm_st_file *f);
/* Metadata value, or NULL. */
const char *dm_st_meta(const dm_st_file *f, const char *key);

#endif
