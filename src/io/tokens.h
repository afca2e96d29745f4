/* tokens.h — the token side of a prepared data directory, and the bytes each token covers
 * (docs/tokens.md).
 *
 * `dormouse prepare --vocab N` (N > 256) writes, beside train.bin and val.bin (the text,
 * as for bytes):
 *   tokenizer.model   the SentencePiece model (io/tokenizer.h)
 *   train.tok         the tokens of train.bin, little-endian uint16 (vocab <= 65536) or
 *   val.tok           uint32, one after another
 * and meta.json gains format_version 2 and a "tokens" record: the vocabulary, the
 * tokenizer's type and checksum, the token width, and of each .tok its tokens, CRC-32 and
 * the bytes per token. The bytes of the vocabulary (256, the default) keep format_version
 * 1 and none of these files.
 *
 * Scoring tokens in bits per byte: a validation window is a span of bytes [a, b) of the
 * text; the tokens that cover it are those whose bytes overlap it. As a window of bytes
 * predicts its bytes after the first, the first covering token is the context and the
 * others are scored:
 *     BPB = (sum of their NLL in nats) / (ln 2 x the bytes they cover).
 * For the byte vocabulary each token is its byte, so this is the bytes' number exactly. */
#ifndef DM_TOKENS_H
#define DM_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "io/dataset.h" /* DM_TOKENS_FORMAT_VERSION, DM_DS_* */
#include "io/tokenizer.h"

#define DM_TOKENIZER_FILE "tokenizer.model"
#define DM_TOK_PART_NAME(part) ((part) == 0 ? "train.tok" : "val.tok")

typedef struct {
    uint64_t tokens;     /* in the .tok */
    uint64_t text_bytes; /* of the .bin it encodes */
    uint32_t crc;        /* CRC-32 of the .tok file */
} dm_tokpart;

typedef struct {
    int vocab;
    int width;                           /* bytes per token in the .tok files: 2 or 4 */
    char type[16];                       /* "bpe", "unigram", ... */
    char checksum[DM_TOK_CHECKSUM_LEN];  /* of tokenizer.model: "xxh64:" + 16 hex digits */
    dm_tokpart part[2];                  /* DM_PART_TRAIN, DM_PART_VAL */
    uint8_t *model;                      /* tokenizer.model's bytes (malloc'd) */
    size_t model_n;
    dm_tokenizer *tok;                   /* ... loaded */
    int32_t *len;                        /* the bytes of each piece, by id (malloc'd) */
    char dir[4096];
    void *map[2];                        /* the .tok files mapped by dm_tokdata_stream */
    size_t map_n[2];
} dm_tokdata;

/* The tokens of the data directory dir (whose meta.json dm_dataset_open has accepted):
 * DM_DS_NONE (io/dataset.h) for a directory of bytes (format_version 1); DM_DS_OK, t
 * filled and its tokenizer loaded; DM_DS_BAD, a one-line reason in err: a "tokens" record
 * missing or malformed, tokenizer.model missing, of another checksum than meta.json
 * records (damaged), not a SentencePiece model, or of another vocabulary, a .tok of
 * another size than its tokens. */
int dm_tokdata_open(const char *dir, dm_tokdata *t, char *err, size_t errlen);
void dm_tokdata_free(dm_tokdata *t);
/* Read both .tok files and check their CRC-32s against meta.json (--verify-data). 0 ok,
 * else a one-line err. */
int dm_tokdata_verify(const dm_tokdata *t, char *err, size_t errlen);

/* A stream of tokens and where each one's bytes lie in the text it encodes. */
#define DM_TOK_MARK 1024 /* a byte offset is kept for every DM_TOK_MARK-th token */
typedef struct {
    const uint8_t *ids;  /* n tokens of width bytes each (1: the bytes themselves) */
    int width;
    size_t n;
    const int32_t *len;  /* the bytes of each id (vocab of them) */
    int vocab;
    uint64_t *mark;      /* mark[k]: the byte offset of token k x DM_TOK_MARK (malloc'd) */
    size_t n_mark;
    uint64_t bytes;      /* the text's bytes: all the tokens' */
} dm_tokstream;

/* Index ids (width 1, 2 or 4, little-endian) whose tokens have len[id] bytes. An id out of
 * the vocabulary is an error. 0 ok, else err. */
int dm_tokstream_init(dm_tokstream *s, const void *ids, int width, size_t n,
                      const int32_t *len, int vocab, char *err, size_t errlen);
void dm_tokstream_free(dm_tokstream *s);
uint32_t dm_tokstream_id(const dm_tokstream *s, size_t i);

/* The tokens that cover the byte window [a, b): tokens [t0, t1) cover bytes [b0, b1)
 * (b0 <= a < b <= b1); t0 is the context, tokens t0+1 .. t1-1 are scored, and they cover
 * scored_bytes = b1 - (b0 + the bytes of t0). */
typedef struct {
    size_t t0, t1;
    uint64_t b0, b1;
    uint64_t scored_bytes;
} dm_cover;
/* 0 ok; 1 when the window is not 0 <= a < b <= s->bytes. */
int dm_tokstream_cover(const dm_tokstream *s, uint64_t a, uint64_t b, dm_cover *c);

/* The tokens of part (DM_PART_TRAIN, DM_PART_VAL) of t, memory-mapped, as a stream (its
 * bytes must be the .bin's: else the .tok is damaged). Free the stream before t. 0 ok,
 * else err. */
int dm_tokdata_stream(dm_tokdata *t, int part, dm_tokstream *s, char *err, size_t errlen);

#endif
