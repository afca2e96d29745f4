/* prepare.h — `dormouse prepare`: sources (files, directories, plain or gzip) streamed
 * once into a data directory (io/dataset.h: train.bin, val.bin, meta.json) that train,
 * eval, bench and ab then memory-map (docs/data.md). */
#ifndef DM_PREPARE_H
#define DM_PREPARE_H

#include <stdint.h>

#include "jobs/job.h"

typedef struct {
    const char *const *srcs;   /* files and directories of the training data, in order */
    int n_srcs;
    const char *out;           /* DATA_DIR: must not exist */
    const char *val;           /* the validation data of its own (file or directory); NULL:
                                  the last bytes of the sources (val_bytes / val_fraction) */
    long long val_bytes;       /* > 0: val.bin is the last val_bytes bytes */
    double val_fraction;       /* > 0: val.bin is the last round(F x total) bytes */
    int shuffle;               /* shuffle the order of the training files ... */
    uint64_t shuffle_seed;     /* ... with this seed (after sorting) */
    const char *const *incl;   /* globs of the files taken from directories (none: all) */
    int n_incl;
    const char *const *excl;   /* globs of the files left out of directories */
    int n_excl;
    int binary_ok;             /* keep binary files (default: skip each, with a note) */
    int val_tail;              /* the validation bytes are the sources' last ones */
    uint64_t val_seed;         /* the seed of the spread split's offsets */
    int vocab;                 /* 0 or 256: bytes; > 256: a tokenizer of vocab pieces is
                                  trained on train.bin (docs/tokens.md); the command's
                                  default is DM_PREPARE_VOCAB */
    const char *tokenizer;     /* a tokenizer.model to reuse instead (vocab 0 or its own) */
    const char *tok_type;      /* the tokenizer trained: "bpe" (NULL) or "unigram" */
    long long tok_sample;      /* train it on at most this many bytes of train.bin (0: the
                                  default, DM_PREPARE_TOK_SAMPLE) */
} dm_prepare_args;

/* The vocabulary of `prepare` without --vocab (or --tokenizer): text trains a tokenizer
 * of this many pieces, in a build with SentencePiece (without it: bytes, with a note).
 * Chosen by an A/B at make run's budget: docs/tokens.md, "The default vocabulary". */
#define DM_PREPARE_VOCAB 4096

/* The tokenizer of a train.bin larger than this is trained on a sample of this many bytes:
 * pieces of 1 MiB spread evenly over it, each cut to whole lines. */
#define DM_PREPARE_TOK_SAMPLE (64ll << 20)

/* Default split: DM_PREPARE_VAL_BYTES bytes validate (the default eval_window), spread over
 * the sources: cut into pieces of DM_PREPARE_PIECE bytes (the last one shorter), piece i
 * taken at an offset drawn (seed val_seed) inside the i-th of as many equal strata of the
 * concatenated sources, so that a corpus of many files validates on text from all over
 * it, not on the end of its last file; val.bin is the pieces in order, train.bin the rest.
 * meta.json records the method, the seed and every piece. --val-split tail (val_tail)
 * takes the last bytes, as prepare did before (a data directory holds its split in its
 * files, so those of older prepares read as they were); so does token data (--vocab >
 * 256, --tokenizer), whose text a piece's edge could cut inside a UTF-8 character. */
#define DM_PREPARE_VAL_BYTES 81920
#define DM_PREPARE_PIECE 4096
#define DM_PREPARE_MAX_PIECES 65536 /* beyond it (V > 256 MiB) the split is the tail */

/* Prepare. With a vocabulary (vocab > 256 or a tokenizer), after the text also the
 * tokenizer and the tokens (io/tokens.h); text that is not valid UTF-8, or that the
 * tokenizer cannot round-trip, is refused, naming the source and the offset of its first
 * such byte. Reports a note per skipped file, progress lines (bytes read of the sources'
 * total, bytes/s, ETA) about once a second, and a summary note. Bad input: no sources,
 * a source missing, out exists, a split that leaves train.bin or val.bin under 2 bytes,
 * a damaged gzip; failed: I/O; interrupted: io->stop (nothing is left behind). Whatever
 * happens, DATA_DIR exists only when complete: the data is written into
 * DATA_DIR.partial-PID and renamed at the end. */
dm_status dm_prepare(const dm_prepare_args *a, const dm_job_io *io);

#endif
