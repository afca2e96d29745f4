/* data.h — the corpus: bytes from a file, a directory or a prepared data directory, the
 * train / validation split, seeded batches, and the validation windows (docs/data.md,
 * docs/architecture.md section 6).
 *
 * A file (plain or gzip) or a directory of files is read whole into memory; a data
 * directory of `dormouse prepare` (io/dataset.h) is memory-mapped instead: train.bin
 * trains and val.bin validates, nothing is read at start-up (its identity is meta.json's
 * CRCs), and the pages of each batch are asked for one step ahead and let go after use,
 * so resident memory does not grow with the corpus. Either way the training windows are
 * drawn the same way from the training bytes: the same bytes give the same batches. */
#ifndef DM_DATA_H
#define DM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "io/dataset.h"
#include "io/tokens.h"

/* Old inputs above this size (read whole into memory at every start) get a note that
 * suggests `dormouse prepare` (docs/data.md). */
#define DM_CORPUS_HINT_BYTES (1ull << 30)

typedef struct dm_corpus {
    uint8_t *bytes;        /* in memory: the corpus (malloc'd); NULL when mapped */
    size_t n;              /* the run's bytes: training then validation (with
                              dm_corpus_crc32 the identity a run directory records) */
    size_t train_n;        /* training bytes, at train */
    int n_files;
    const uint8_t *train;
    const uint8_t *val;    /* the validation set, val_n bytes; NULL before a split */
    size_t val_n;
    uint8_t *val_bytes;    /* --val: the validation corpus, whole (malloc'd) */
    int mapped;            /* a prepared data directory, memory-mapped */
    dm_dataset ds;         /* ... its meta.json */
    void *map[2];          /* ... train.bin and val.bin (NULL: not mapped, or empty) */
    size_t map_n[2];
    char *notes;           /* lines for the user (NULL: none): files skipped or binary, a
                              .bin checked because its mtime changed, the prepare hint */
    /* a token data directory (docs/tokens.md): its tokenizer and the token streams of
     * train.tok and val.tok; the batches are drawn from the training tokens, the
     * validation windows stay spans of val.bin's bytes, scored by their covering tokens */
    int vocab;             /* 256: bytes (no tokens); else the tokenizer's pieces */
    int width;             /* bytes per id of a batch: 1 (bytes), 2 or 4 (dm_id_width) */
    dm_tokdata *tok;       /* NULL for bytes (malloc'd) */
    dm_tokstream ts[2];    /* DM_PART_TRAIN, DM_PART_VAL */
    uint8_t *enc;          /* the validation tokens dm_corpus_use_tokenizer encoded */
} dm_corpus;

/* Load a prepared data directory (mapped; a damaged one, an unfinished prepare or a .bin
 * of another size than meta.json records is an error; a .bin whose mtime is not the one
 * prepare recorded, a copy or a changed file, has its CRC-32 checked now, with a note), a
 * regular file (gzip-compressed or plain) or a directory (its regular files, sorted by
 * name, concatenated; not recursive: files that are not regular are skipped and named in
 * the notes, so are binary files, which are kept). A gzip file is read to its end: every
 * member's trailer (CRC-32, length) is checked, and a truncated or damaged one is an
 * error. A FIFO or device is refused, never waited on. 0 ok, else err. */
int dm_corpus_load(dm_corpus *c, const char *path, char *err, size_t errlen);
void dm_corpus_free(dm_corpus *c);
/* CRC-32 of the run's bytes (n of them: the training bytes then the validation window;
 * a data directory: train.bin then val.bin, from meta.json): with n what a run directory
 * records of its corpus, the same bytes on resume. */
uint32_t dm_corpus_crc32(const dm_corpus *c);
/* A mapped corpus: read its .bin files and check their CRC-32s against meta.json
 * (--verify-data). 0 ok (also for a corpus in memory), else a one-line err. */
int dm_corpus_verify(const dm_corpus *c, char *err, size_t errlen);

/* Score the validation set with the tokenizer of a model of tokens (the bytes of its
 * tokenizer.model, their checksum, its vocab): a token corpus must be of that tokenizer
 * (else err names both checksums); a corpus of bytes, split, has its validation set
 * encoded now, as one text (a segment at a time, io/tokenizer.h), which must round-trip.
 * 0 ok, else a one-line err. */
int dm_corpus_use_tokenizer(dm_corpus *c, const void *model, size_t n, const char *checksum,
                            int vocab, char *err, size_t errlen);

/* Reserve the last eval_window bytes for validation; the rest must hold at least one
 * training sequence of seq_len+1 bytes. A mapped corpus keeps its split (val.bin must
 * hold eval_window bytes, train.bin one sequence). 0 ok, else a clear error. */
int dm_corpus_split(dm_corpus *c, long eval_window, int seq_len, char *err, size_t errlen);
/* Only the validation set, for eval: a corpus in memory its last eval_window bytes (whole:
 * all of it, a validation corpus of --val, as train takes one), a mapped one val.bin;
 * either must hold eval_window bytes. 0 ok, else err. */
int dm_corpus_split_eval(dm_corpus *c, long eval_window, int whole, char *err, size_t errlen);

/* Validation from a separate corpus (--val): every byte of c trains and val, taken over
 * whole (val is left empty), is the validation set: its last eval_window bytes are the
 * default window and the run's identity (n = c's bytes + eval_window). val must hold
 * eval_window bytes and c one training sequence of seq_len+1; c must not be mapped. 0 ok,
 * else a clear error (val: "the validation corpus ..."). */
int dm_corpus_split_val(dm_corpus *c, dm_corpus *val, long eval_window, int seq_len,
                        char *err, size_t errlen);

/* B training windows of T+1 ids into out [B, T+1] (c->width bytes each: the bytes
 * themselves, or a token corpus's training tokens), at offsets drawn from a generator
 * seeded by (seed, step): the same step always draws the same batch. A mapped corpus lets
 * the windows' pages go after the copy (they stay in the page cache). */
void dm_corpus_batch(const dm_corpus *c, uint64_t seed, long step, int B, int T, void *out);
/* The config's vocab against the corpus's: a token corpus sets *vocab when it is the
 * default (256) and `explicit` is 0; any other difference is an error naming both. 0 ok. */
int dm_corpus_vocab(const dm_corpus *c, int *vocab, int explicit_, char *err, size_t errlen);
/* A mapped corpus: ask the kernel for the pages of the batch of (seed, step) ahead of it
 * (madvise WILLNEED); nothing for a corpus in memory. */
void dm_corpus_prefetch(const dm_corpus *c, uint64_t seed, long step, int B, int T);
/* A mapped corpus: the pages of p[0, n) are no longer needed by this process. */
void dm_corpus_release(const dm_corpus *c, const uint8_t *p, size_t n);

/* The validation windows of eval_windows=N (N >= 2): the validation set of val_n bytes
 * cut into N equal strata, one window of w bytes in each at an offset drawn from a
 * generator seeded by seed: the same offsets (ascending, not overlapping) for the same
 * arguments. 0 ok; 1 when a stratum is shorter than w. */
int dm_corpus_eval_offsets(size_t val_n, size_t w, long N, uint64_t seed, size_t *off);
/* The seed of the eval windows: fixed, so every run and every eval of the same data
 * scores the same windows. */
#define DM_EVAL_WINDOW_SEED 0x5EED0FE7A1ull

#endif
