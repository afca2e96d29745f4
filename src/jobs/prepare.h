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
    int vocab;                 /* 0 or 256: bytes; > 256: a tokenizer of vocab pieces is
                                  trained on train.bin (docs/tokens.md) */
    const char *tokenizer;     /* a tokenizer.model to reuse instead (vocab 0 or its own) */
    const char *tok_type;      /* the tokenizer trained: "bpe" (NULL) or "unigram" */
    long long tok_sample;      /* train it on at most this many bytes of train.bin (0: the
                                  default, DM_PREPARE_TOK_SAMPLE) */
} dm_prepare_args;

/* The tokenizer of a train.bin larger than this is trained on a sample of this many bytes:
 * pieces of 1 MiB spread evenly over it, each cut to whole lines. */
#define DM_PREPARE_TOK_SAMPLE (64ll << 20)

/* Default split: the last DM_PREPARE_VAL_BYTES bytes validate (the default eval_window,
 * so a prepared copy of a corpus trains as the corpus does). */
#define DM_PREPARE_VAL_BYTES 81920

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
