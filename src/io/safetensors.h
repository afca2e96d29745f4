/* safetensors.h — read and write safetensors files (F32 tensors + string metadata).
 *
 * Format: u64 little-endian header length n, then n bytes of JSON
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * (padded with spaces so the data starts 8-byte aligned), then the raw data.
 * Checksums (XXH64, seed 0, as 16 lowercase hex digits) travel in the metadata, so the
 * files stay plain safetensors: "xxh64:NAME" of each tensor's bytes, and "xxh64:__metadata__"
 * of the other metadata entries (key NUL value NUL, sorted by key). dm_st_write adds them;
 * a reader that finds any checks all of them (docs/robustness.md).
 * Writes go to "<path>.tmp", are fsynced, then renamed over path: a crash leaves the
 * old file or the new one, never half of one; a tensor holding NaN or Inf is not
 * written (an error naming it).
 *
 * Reads treat the file as hostile and check everything the format requires before any
 * number is used: the header length at most 100,000,000 bytes and inside the file; the
 * header valid UTF-8 JSON starting with '{' with only spaces after it; every name once;
 * metadata an object of strings; every tensor F32 with at most 4 dimensions, each an
 * integer below 2^53, and data_offsets two integers within the data section (checked as
 * numbers before any conversion to an integer type), end - begin = 4 x the element
 * count (computed without overflow); the tensors, sorted by offset, covering the data
 * section from 0 to its last byte with no gap and no overlap; the checksums, when there
 * are any (one per tensor and the metadata's, each matching: else the error names the
 * tensor); and every value finite (else the error names the tensor and the first bad
 * index). */
#ifndef DM_SAFETENSORS_H
#define DM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define DM_ST_MAX_HEADER 100000000ull /* the format's limit on the header length */

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

/* Open and validate (a regular file only: a FIFO or device is refused, never waited
 * on). NULL with a one-line err naming path on failure. */
dm_st_file *dm_st_open(const char *path, char *err, size_t errlen);
/* The same checks on the bytes of a file held in memory (copied); name is the path
 * errors give. */
dm_st_file *dm_st_parse(const void *bytes, size_t n, const char *name, char *err,
                        size_t errlen);
void dm_st_close(dm_st_file *f);
/* The tensor's data (NULL if absent); ndim/shape filled when non-NULL. */
const float *dm_st_get(const dm_st_file *f, const char *name, int *ndim, int64_t shape[4]);
int dm_st_count(const dm_st_file *f);
/* Name of tensor i (0 <= i < dm_st_count), in the header's order. */
const char *dm_st_name(const dm_st_file *f, int i);
/* 1 when every tensor and the metadata carried a checksum and all matched. */
int dm_st_checksummed(const dm_st_file *f);
/* Metadata value, or NULL. */
const char *dm_st_meta(const dm_st_file *f, const char *key);

#endif
