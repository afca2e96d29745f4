/* files.h — the file-system helpers every job shares: opening a regular file without
 * blocking, mkdir -p, whole-file read, atomic whole-file write (temp file, fsync, rename,
 * fsync of the directory), rm -rf. */
#ifndef DM_FILES_H
#define DM_FILES_H

#include <stddef.h>

/* Open path for reading, and only when it is a regular file: opened O_NONBLOCK, then
 * fstat'ed, so a FIFO, a device or a socket is refused at once instead of blocking.
 * Returns the descriptor (blocking mode restored), or -1 with a one-line error naming
 * `what` ("checkpoint", "corpus file", ...; NULL: the path alone) and path. */
int dm_open_regular(const char *path, const char *what, char *err, size_t errlen);
/* Read exactly n bytes at offset off of fd into buf (retrying short reads). 0 ok; 1 at
 * an early end of file or an error (errno says which: 0 for the end of file). */
int dm_pread_all(int fd, void *buf, size_t n, long long off);

int dm_mkdir_p(const char *path);   /* 0 ok (path is then a directory) */
/* mkdir -p that also gives the topmost directory it created in made ("" when every one
 * existed): removing that directory undoes the call. 0 ok. */
int dm_mkdir_made(const char *path, char *made, size_t madelen);
int dm_fsync_dir(const char *dir);  /* 0 ok */
int dm_rmtree(const char *path);    /* 0 ok (also when path does not exist) */
/* The whole regular file (dm_open_regular), malloc'd and NUL-terminated; NULL with err
 * on failure. dm_read_file_n also gives its length (a NUL byte inside shows as a length
 * beyond strlen). */
char *dm_read_file(const char *path, char *err, size_t errlen);
char *dm_read_file_n(const char *path, size_t *len, char *err, size_t errlen);
/* The first line of a small text file (a run's data_path) into buf, without its newline.
 * 0 ok; 1 when the file cannot be read or the line is empty. */
int dm_read_line(const char *path, char *buf, size_t n);
/* Replace path with text, atomically: a crash leaves the old file or the new one. */
int dm_write_file_atomic(const char *path, const char *text, char *err, size_t errlen);

#endif
