/* tokenizer.h — a SentencePiece tokenizer through a small C shim (io/tokenizer_spm.cc, the
 * one C++ file of the CPU build; io/tokenizer_none.c in a build without SentencePiece) and
 * the text rules every user of it shares (docs/tokens.md).
 *
 * The tokenizers prepare trains are lossless: byte_fallback on, identity normalization, no
 * dummy prefix, no whitespace cleanup, so that decode(encode(x)) == x byte for byte for
 * valid UTF-8 text (invalid UTF-8 cannot round-trip: decode replaces it). A token's "bytes"
 * are the bytes it decodes to: a byte piece <0xAB> one, a piece "\xe2\x96\x81the" (the
 * escaped space) four, a control piece none.
 *
 * Text is encoded a segment at a time: a segment ends after a newline, or where a line
 * reaches DM_TOK_SEGMENT bytes (cut back to a character boundary), or at the end of the
 * text. The tokens of a text are the tokens of its segments in order, so any cut at a
 * segment boundary encodes to the same tokens (prepare encodes in parallel pieces). */
#ifndef DM_TOKENIZER_H
#define DM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define DM_TOK_SEGMENT 65536

typedef struct dm_tokenizer dm_tokenizer;

/* A growing array of token ids or of bytes (realloc'd as needed; free(p) when done). */
typedef struct {
    uint32_t *p;
    size_t n, cap;
} dm_ids;
typedef struct {
    uint8_t *p;
    size_t n, cap;
} dm_bytes;

/* NULL when this build has SentencePiece; else why it has not, naming what to install. */
const char *dm_tokenizer_missing(void);

/* Train a tokenizer of vocab pieces (type "bpe" or "unigram") on the lines of text (each
 * line a sentence; empty ones left out, long ones cut into pieces of 4096 bytes). The same
 * text gives the same model, byte for byte, on any machine (SentencePiece's 16 threads,
 * whatever the cores: its unigram result depends on the thread count, and the model
 * records it). *model is the serialized model (malloc'd, *model_n bytes). 0 ok,
 * else a one-line err (SentencePiece's own reason: a vocabulary too large for the text, or
 * too small for its characters). */
int dm_tokenizer_train(const uint8_t *text, size_t n, int vocab, const char *type,
                       uint8_t **model, size_t *model_n, char *err, size_t errlen);
/* Load a serialized model (the bytes of a tokenizer.model). NULL on error (err: it is not
 * a SentencePiece model). */
dm_tokenizer *dm_tokenizer_load(const void *model, size_t n, char *err, size_t errlen);
void dm_tokenizer_free(dm_tokenizer *t);
int dm_tokenizer_vocab(const dm_tokenizer *t);
/* The model's type as its trainer recorded it: "unigram", "bpe", "word", "char". */
const char *dm_tokenizer_type(const dm_tokenizer *t);
/* The number of bytes token id decodes to (see above); -1 for an id out of range. */
int dm_tokenizer_piece_bytes(const dm_tokenizer *t, uint32_t id);
/* Those bytes: *p (owned by t) and their number; -1 for an id out of range. The bytes of
 * the tokens of a text, one token after another, are the text: a generator can print a
 * token's bytes as it comes (a character of several byte pieces arrives byte by byte). */
int dm_tokenizer_piece(const dm_tokenizer *t, uint32_t id, const uint8_t **p);

/* Encode one segment (no cut inside it), appending its ids to out. 0 ok, else err. */
int dm_tokenizer_encode_segment(const dm_tokenizer *t, const uint8_t *p, size_t n,
                                dm_ids *out, char *err, size_t errlen);
/* Decode ids, appending their bytes to out. 0 ok, else err. */
int dm_tokenizer_decode(const dm_tokenizer *t, const uint32_t *ids, size_t n, dm_bytes *out,
                        char *err, size_t errlen);

/* ---- C (io/tokenizer.c) ------------------------------------------------------------- */

/* Where the segment that starts at p[0] ends (its length, > 0 for n > 0). */
size_t dm_tok_segment(const uint8_t *p, size_t n);
/* Encode text, a segment at a time, appending to out. 0 ok, else err. */
int dm_tokenizer_encode(const dm_tokenizer *t, const uint8_t *p, size_t n, dm_ids *out,
                        char *err, size_t errlen);
/* The offset of the first byte of p[0, n) that is not part of valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid; a sequence cut by the end is
 * invalid at its first byte); n when all of it is valid. */
size_t dm_utf8_invalid(const uint8_t *p, size_t n);
/* XXH64 of a tokenizer model's bytes as "xxh64:" and 16 hex digits (buf: 23 bytes). */
void dm_tokenizer_checksum(const void *model, size_t n, char *buf);
#define DM_TOK_CHECKSUM_LEN 23

/* Append to an id / byte array (1: out of memory). */
int dm_ids_push(dm_ids *a, const uint32_t *ids, size_t n);
int dm_bytes_push(dm_bytes *a, const uint8_t *p, size_t n);

#endif
