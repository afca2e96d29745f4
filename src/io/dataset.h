/* dataset.h — a prepared data directory (`dormouse prepare`, docs/data.md): DATA_DIR holds
 *   train.bin   the training bytes, raw
 *   val.bin     the validation bytes, raw
 *   meta.json   what they were made from (every source with its size and CRC-32, the
 *               split rule, the totals), the size, CRC-32 and mtime of each .bin, the
 *               format and the dormouse version; written last
 * A prepare writes into a sibling temporary directory (DATA_DIR.partial-PID, which holds
 * the file PREPARING) and renames it to DATA_DIR only when everything is written and
 * synced: a prepare that is killed or fails leaves no DATA_DIR. */
#ifndef DM_DATASET_H
#define DM_DATASET_H

#include <stddef.h>
#include <stdint.h>

#define DM_DATASET_FORMAT "dormouse-data"
#define DM_DATASET_VERSION 1
#define DM_TOKENS_FORMAT_VERSION 2 /* a data directory with tokens (io/tokens.h) */
#define DM_DATASET_MARK "PREPARING" /* in the temporary directory while a prepare runs */

enum { DM_PART_TRAIN = 0, DM_PART_VAL = 1 };
#define DM_PART_NAME(part) ((part) == DM_PART_TRAIN ? "train.bin" : "val.bin")

typedef struct {
    uint64_t bytes;
    uint32_t crc;
    long long mtime_ns; /* when prepare finished it */
} dm_dataset_part;

typedef struct {
    dm_dataset_part part[2]; /* DM_PART_TRAIN, DM_PART_VAL */
    int tokens;              /* format_version 2: tokens beside the text (io/tokens.h) */
} dm_dataset;

/* What dir is: DM_DS_NONE, not a data directory (no meta.json of this format, no .bin
 * file, no PREPARING mark: an ordinary corpus directory); DM_DS_OK, a finished one, its
 * meta.json read into d; DM_DS_BAD, one that cannot be used (the one-line reason in err:
 * an unfinished prepare, a meta.json that is not valid, a .bin file missing or of another
 * size than meta.json records). */
enum { DM_DS_NONE = 0, DM_DS_OK = 1, DM_DS_BAD = 2 };
int dm_dataset_open(const char *dir, dm_dataset *d, char *err, size_t errlen);

/* The size and CRC-32 of the bytes of the whole data set, train.bin then val.bin (the
 * CRC combined from meta.json's two: nothing is read). */
uint64_t dm_dataset_bytes(const dm_dataset *d);
uint32_t dm_dataset_crc32(const dm_dataset *d);

/* CRC-32 of n bytes (in pieces of at most 1 GiB: zlib takes a uInt length). */
uint32_t dm_crc32(uint32_t crc, const void *p, size_t n);
/* The CRC-32 of A then B from crc(A) = a, crc(B) = b and B's length bn. */
uint32_t dm_crc32_combine(uint32_t a, uint32_t b, uint64_t bn);

#endif
