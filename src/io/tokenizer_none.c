/* tokenizer_none.c — io/tokenizer.h's shim in a build without SentencePiece: every call
 * says what to install (the build compiles io/tokenizer_spm.cc instead when it finds it). */
#include <stdio.h>

#include "io/tokenizer.h"

static const char *WHY = "this dormouse was built without SentencePiece, which token "
                         "vocabularies need: install the Debian package libsentencepiece-dev "
                         "and build again (--vocab 256, bytes, needs nothing)";

struct dm_tokenizer {
    int unused;
};

const char *dm_tokenizer_missing(void) { return WHY; }

int dm_tokenizer_train(const uint8_t *text, size_t n, int vocab, const char *type,
                       uint8_t **model, size_t *model_n, char *err, size_t errlen) {
    (void)text, (void)n, (void)vocab, (void)type;
    *model = NULL;
    *model_n = 0;
    snprintf(err, errlen, "%s", WHY);
    return 1;
}

dm_tokenizer *dm_tokenizer_load(const void *model, size_t n, char *err, size_t errlen) {
    (void)model, (void)n;
    snprintf(err, errlen, "%s", WHY);
    return NULL;
}

void dm_tokenizer_free(dm_tokenizer *t) { (void)t; }
int dm_tokenizer_vocab(const dm_tokenizer *t) { (void)t; return 0; }
const char *dm_tokenizer_type(const dm_tokenizer *t) { (void)t; return "unknown"; }
int dm_tokenizer_piece_bytes(const dm_tokenizer *t, uint32_t id) { (void)t, (void)id; return -1; }
int dm_tokenizer_piece(const dm_tokenizer *t, uint32_t id, const uint8_t **p) {
    (void)t, (void)id;
    *p = NULL;
    return -1;
}

int dm_tokenizer_encode_segment(const dm_tokenizer *t, const uint8_t *p, size_t n,
                                dm_ids *out, char *err, size_t errlen) {
    (void)t, (void)p, (void)n, (void)out;
    snprintf(err, errlen, "%s", WHY);
    return 1;
}

int dm_tokenizer_decode(const dm_tokenizer *t, const uint32_t *ids, size_t n, dm_bytes *out,
                        char *err, size_t errlen) {
    (void)t, (void)ids, (void)n, (void)out;
    snprintf(err, errlen, "%s", WHY);
    return 1;
}
