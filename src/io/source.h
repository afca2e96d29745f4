/* source.h — corpus sources read as a stream: one file's bytes, plain or gzip (every
 * member inflated, its trailer checked), handed to a sink piece by piece, never the
 * whole file in memory; the binary-file rule; and the files of a directory tree. */
#ifndef DM_SOURCE_H
#define DM_SOURCE_H

#include <stddef.h>
#include <stdint.h>

/* A sink takes the next n bytes of the file's content (decompressed). It returns 0 to go
 * on, else a code of its own: reading stops and dm_source_read returns that code. */
typedef int (*dm_sink_fn)(void *ctx, const uint8_t *p, size_t n);

typedef struct {
    uint64_t file_bytes;  /* the file's size on disk */
    uint64_t read_bytes;  /* of those, read so far (kept current while the sink runs) */
    int gz;               /* the file is gzip (it starts with 1f 8b) */
} dm_source_info;

/* Stream the file at path (dm_open_regular: a FIFO or a device is refused) to sink:
 * plain bytes as they are; a gzip file (magic 1f 8b) inflated through every member, each
 * trailer (CRC-32 and length) checked by zlib, so a stream that ends early, a bad
 * trailer or bytes after the last member that are not another member are errors.
 * info (may be NULL) is filled as reading goes. 0 ok; 1 error (a one-line err naming
 * path); else the sink's own code. */
int dm_source_read(const char *path, dm_sink_fn sink, void *ctx, dm_source_info *info,
                   char *err, size_t errlen);

/* The binary-file rule (git's): a NUL byte among the first DM_BINARY_PROBE bytes. */
#define DM_BINARY_PROBE 8000
int dm_is_binary(const uint8_t *p, size_t n);

/* The regular files under dir, recursively, as paths (dir/...), sorted by their path
 * relative to dir (bytewise): entries whose name starts with '.' are left out, so are
 * files no include glob matches (when there are includes) and files an exclude glob
 * matches. A glob with a '/' is matched (fnmatch) against the relative path, one without
 * against the file's name. Entries that are neither regular files nor directories (FIFOs,
 * devices, sockets, dangling links) are left out and named in *skipped (malloc'd lines
 * "PATH: not a regular file", NULL when none). *paths is malloc'd (each path too:
 * dm_free_paths). 0 ok, 1 error (err). */
int dm_list_tree(const char *dir, const char *const *incl, int n_incl, const char *const *excl,
                 int n_excl, char ***paths, size_t *n, char **skipped, char *err,
                 size_t errlen);
void dm_free_paths(char **paths, size_t n);

/* Append a printf-formatted line to the malloc'd text *buf (NULL: none yet). */
void dm_text_append(char **buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
