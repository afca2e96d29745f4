/* data.h — the corpus: bytes from a file or a directory, the train / validation split,
 * seeded batches, and the validation windows (docs/architecture.md section 6). */
#ifndef DM_DATA_H
#define DM_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct dm_corpus {
    uint8_t *bytes;
    size_t n;       /* total bytes */
    size_t train_n; /* bytes[0, train_n) train; bytes[train_n, n) validation */
    int n_files;
} dm_corpus;

/* Load a regular file (gzip-compressed or plain) or a directory (its regular files,
 * sorted by name, concatenated; not recursive). A gzip file is read to its end: every
 * member's trailer (CRC-32, length) is checked, and a truncated or damaged one is an
 * error. A FIFO or device is refused, never waited on. 0 ok, else err. */
int dm_corpus_load(dm_corpus *c, const char *path, char *err, size_t errlen);
void dm_corpus_free(dm_corpus *c);
/* CRC-32 of the corpus bytes (with the size, what a run directory records of its
 * corpus: the same bytes on resume). */
uint32_t dm_corpus_crc32(const dm_corpus *c);

/* Reserve the last eval_window bytes for validation; the rest must hold at least one
 * training sequence of seq_len+1 bytes. 0 ok, else a clear error. */
int dm_corpus_split(dm_corpus *c, long eval_window, int seq_len, char *err, size_t errlen);

/* Validation from a separate corpus (--val): every byte of c trains, and the last
 * eval_window bytes of val are appended to c as its validation window (train_n = the
 * old n). val must hold eval_window bytes and c one training sequence of seq_len+1.
 * 0 ok, else a clear error (val: "the validation corpus ..."). */
int dm_corpus_split_val(dm_corpus *c, const dm_corpus *val, long eval_window, int seq_len,
                        char *err, size_t errlen);

/* B training windows of T+1 bytes into out [B, T+1], at offsets drawn from a generator
 * seeded by (seed, step): the same step always draws the same batch. */
void dm_corpus_batch(const dm_corpus *c, uint64_t seed, long step, int B, int T, uint8_t *out);

#endif
