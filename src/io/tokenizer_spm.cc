// tokenizer_spm.cc — the C shim over SentencePiece (io/tokenizer.h): train, load, encode a
// segment, decode, piece bytes, vocabulary size. The only C++ of the CPU build; nothing
// here throws across the C boundary (every call catches and reports).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "io/tokenizer.h"
}

struct dm_tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    std::vector<std::string> bytes; // the bytes each piece decodes to, by id
    const char *type;
};

static void set_err(char *err, size_t errlen, const char *what, const std::string &why) {
    std::snprintf(err, errlen, "%s: %s", what, why.c_str());
}

// The training sentences: the lines of the text, empty ones left out, long ones cut into
// pieces of at most TRAIN_LINE bytes at character boundaries (SentencePiece's default
// max_sentence_length is 4192; its BPE trainer crashes on some sentences of 64 KiB).
namespace {
const size_t TRAIN_LINE = 4096;

class Lines : public sentencepiece::SentenceIterator {
  public:
    Lines(const uint8_t *p, size_t n) : p_(p), n_(n) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        while (off_ < n_) {
            size_t len = dm_tok_segment(p_ + off_, n_ - off_);
            const char *s = reinterpret_cast<const char *>(p_ + off_);
            if (len > TRAIN_LINE) { // before a character's first byte
                size_t k = TRAIN_LINE;
                while (k > TRAIN_LINE - 3 && (p_[off_ + k] & 0xC0) == 0x80) k--;
                len = (p_[off_ + k] & 0xC0) == 0x80 ? TRAIN_LINE : k;
            }
            off_ += len;
            if (s[len - 1] == '\n') len--;
            if (len) {
                cur_.assign(s, len);
                return;
            }
        }
        done_ = true;
    }
    const std::string &value() const override { return cur_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    const uint8_t *p_;
    size_t n_, off_ = 0;
    bool done_ = false;
    std::string cur_;
};

// ModelProto.trainer_spec (field 2).model_type (field 3): 1 unigram, 2 bpe, 3 word, 4 char
// (read from the serialized proto: Debian ships no sentencepiece_model.pb.h)
int varint(const uint8_t *&p, const uint8_t *e, uint64_t *v) {
    *v = 0;
    for (int s = 0; p < e && s < 64; s += 7) {
        *v |= uint64_t(*p & 0x7f) << s;
        if (!(*p++ & 0x80)) return 0;
    }
    return 1;
}

// the field-th length-delimited field or varint of a message; 0 found
int field(const uint8_t *p, const uint8_t *e, uint64_t want, const uint8_t **sub, size_t *subn,
          uint64_t *num) {
    while (p < e) {
        uint64_t key, v;
        if (varint(p, e, &key)) return 1;
        switch (key & 7) {
        case 0:
            if (varint(p, e, &v)) return 1;
            if ((key >> 3) == want && num) { *num = v; return 0; }
            break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        case 2:
            if (varint(p, e, &v) || v > uint64_t(e - p)) return 1;
            if ((key >> 3) == want && sub) { *sub = p; *subn = size_t(v); return 0; }
            p += v;
            break;
        default: return 1;
        }
    }
    return 1;
}

const char *model_type(const std::string &proto) {
    const uint8_t *p = reinterpret_cast<const uint8_t *>(proto.data()), *ts;
    size_t tsn;
    uint64_t t = 1; // the proto's default
    if (field(p, p + proto.size(), 2, &ts, &tsn, nullptr) == 0)
        field(ts, ts + tsn, 3, nullptr, nullptr, &t);
    static const char *names[] = {"unknown", "unigram", "bpe", "word", "char"};
    return t <= 4 ? names[t] : names[0];
}
} // namespace

extern "C" {

const char *dm_tokenizer_missing(void) { return nullptr; }

int dm_tokenizer_train(const uint8_t *text, size_t n, int vocab, const char *type,
                       uint8_t **model, size_t *model_n, char *err, size_t errlen) {
    *model = nullptr;
    *model_n = 0;
    try {
        std::unordered_map<std::string, std::string> kw = {
            {"vocab_size", std::to_string(vocab)},
            {"model_type", type},
            {"byte_fallback", "true"},
            {"normalization_rule_name", "identity"},
            {"add_dummy_prefix", "false"},
            {"remove_extra_whitespaces", "false"},
            {"unk_id", "0"},
            {"bos_id", "-1"},
            {"eos_id", "-1"},
            {"pad_id", "-1"},
            {"input_sentence_size", "0"}, // every sentence given (prepare samples)
            {"num_threads", "16"}, // fixed: the model depends on it (see tokenizer.h)
            {"minloglevel", "2"}, // errors only: its progress log is not ours to print
        };
        Lines lines(text, n);
        std::string proto;
        auto st = sentencepiece::SentencePieceTrainer::Train(kw, &lines, &proto);
        if (!st.ok()) {
            set_err(err, errlen, "SentencePiece cannot train this tokenizer", st.message());
            return 1;
        }
        *model = static_cast<uint8_t *>(std::malloc(proto.size()));
        if (!*model) {
            std::snprintf(err, errlen, "out of memory");
            return 1;
        }
        std::memcpy(*model, proto.data(), proto.size());
        *model_n = proto.size();
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, "SentencePiece failed", e.what());
        return 1;
    }
}

dm_tokenizer *dm_tokenizer_load(const void *model, size_t n, char *err, size_t errlen) {
    dm_tokenizer *t = nullptr;
    try {
        t = new dm_tokenizer;
        auto st = t->sp.LoadFromSerializedProto(
            std::string_view(static_cast<const char *>(model), n));
        if (!st.ok() || t->sp.GetPieceSize() <= 0) {
            set_err(err, errlen, "not a SentencePiece model",
                    st.ok() ? std::string("it has no pieces") : std::string(st.message()));
            delete t;
            return nullptr;
        }
        int V = t->sp.GetPieceSize();
        t->bytes.resize(size_t(V));
        for (int id = 0; id < V; id++) {
            const std::string &s = t->sp.IdToPiece(id);
            std::string &b = t->bytes[size_t(id)];
            if (t->sp.IsByte(id)) { // "<0xAB>"
                b.assign(1, char(std::strtoul(s.c_str() + 3, nullptr, 16)));
            } else if (!t->sp.IsControl(id) && !t->sp.IsUnknown(id)) {
                for (size_t i = 0; i < s.size(); i++) { // U+2581 (3 bytes) is the space
                    if (s.compare(i, 3, "\xe2\x96\x81") == 0) {
                        b += ' ';
                        i += 2;
                    } else {
                        b += s[i];
                    }
                }
            }
        }
        t->type = model_type(t->sp.serialized_model_proto());
        return t;
    } catch (const std::exception &e) {
        set_err(err, errlen, "not a SentencePiece model", e.what());
        delete t;
        return nullptr;
    }
}

void dm_tokenizer_free(dm_tokenizer *t) { delete t; }

int dm_tokenizer_vocab(const dm_tokenizer *t) { return t->sp.GetPieceSize(); }

const char *dm_tokenizer_type(const dm_tokenizer *t) { return t->type; }

int dm_tokenizer_piece_bytes(const dm_tokenizer *t, uint32_t id) {
    return id < t->bytes.size() ? int(t->bytes[id].size()) : -1;
}

int dm_tokenizer_piece(const dm_tokenizer *t, uint32_t id, const uint8_t **p) {
    if (id >= t->bytes.size()) return -1;
    *p = reinterpret_cast<const uint8_t *>(t->bytes[id].data());
    return int(t->bytes[id].size());
}

int dm_tokenizer_encode_segment(const dm_tokenizer *t, const uint8_t *p, size_t n, dm_ids *out,
                                char *err, size_t errlen) {
    try {
        std::vector<int> ids;
        auto st = t->sp.Encode(std::string_view(reinterpret_cast<const char *>(p), n), &ids);
        if (!st.ok()) {
            set_err(err, errlen, "SentencePiece cannot encode", st.message());
            return 1;
        }
        if (dm_ids_push(out, reinterpret_cast<const uint32_t *>(ids.data()), ids.size())) {
            std::snprintf(err, errlen, "out of memory");
            return 1;
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, "SentencePiece cannot encode", e.what());
        return 1;
    }
}

int dm_tokenizer_decode(const dm_tokenizer *t, const uint32_t *ids, size_t n, dm_bytes *out,
                        char *err, size_t errlen) {
    try {
        std::vector<int> v(n);
        int V = t->sp.GetPieceSize();
        for (size_t i = 0; i < n; i++) {
            if (ids[i] >= uint32_t(V)) {
                std::snprintf(err, errlen, "token %u is out of the vocabulary (%d)",
                              unsigned(ids[i]), V);
                return 1;
            }
            v[i] = int(ids[i]);
        }
        std::string s;
        auto st = t->sp.Decode(v, &s);
        if (!st.ok()) {
            set_err(err, errlen, "SentencePiece cannot decode", st.message());
            return 1;
        }
        if (dm_bytes_push(out, reinterpret_cast<const uint8_t *>(s.data()), s.size())) {
            std::snprintf(err, errlen, "out of memory");
            return 1;
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, "SentencePiece cannot decode", e.what());
        return 1;
    }
}

} // extern "C"
