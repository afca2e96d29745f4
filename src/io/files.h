/* files.h — the few file-system helpers every job shares: mkdir -p, whole-file read,
 * atomic whole-file write (temp file, fsync, rename, fsync of the directory), rm -rf. */
#ifndef DM_FILES_H
#define DM_FILES_H

#include <stddef.h>

int dm_mkdir_p(const char *path);   /* 0 ok */
int dm_fsync_dir(const char *dir);  /* 0 ok */
int dm_rmtree(const char *path);    /* 0 ok (also when path does not exist) */
/* The whole file, malloc'd and NUL-terminated; NULL with err on failure. */
char *dm_read_file(const char *path, char *err, size_t errlen);
/* The first line of a small text file (a run's data_path) into buf, without its newline.
 * 0 ok; 1 when the file cannot be read or the line is empty. */
int dm_read_line(const char *path, char *buf, size_t n);
/* Replace path with text, atomically: a crash leaves the old file or the new one. */
int dm_write_file_atomic(const char *path, const char *text, char *err, size_t errlen);

#endif
