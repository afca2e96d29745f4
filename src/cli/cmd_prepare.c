/* cmd_prepare.c — `dormouse prepare`: its flags (the job is src/jobs/prepare.c). */
#include <stdio.h>
#include <string.h>

#include "base/num.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "io/tokenizer.h"
#include "jobs/prepare.h"

static const char *HELP =
    "usage: dormouse prepare SRC... --out DATA_DIR [--val PATH | --val-bytes N |\n"
    "                        --val-fraction F] [--val-split spread|tail] [--val-seed S]\n"
    "                        [--shuffle-files SEED] [--include GLOB]... [--exclude GLOB]...\n"
    "                        [--binary skip|ok]\n"
    "                        [--vocab N [--tokenizer-type bpe|unigram] [--tokenizer-sample BYTES]\n"
    "                         | --tokenizer FILE.model]\n"
    "\n"
    "Prepare a corpus of any size once: the sources are read as a stream (never the whole\n"
    "corpus in memory) and written to DATA_DIR as train.bin and val.bin (raw bytes) and\n"
    "meta.json (every source with its size and CRC-32, the split rule, the totals, the\n"
    "size, CRC-32 and mtime of each .bin, the dormouse version). Then\n"
    "  dormouse train --data DATA_DIR     (also eval, bench, ab, and under mpirun)\n"
    "memory-maps the .bin files: nothing is read at start-up, resident memory does not grow\n"
    "with the corpus, and the training windows are drawn from train.bin exactly as from a\n"
    "corpus in memory (a prepared copy of a corpus with the same split, --val-split tail,\n"
    "trains to the same losses, bit for bit). docs/data.md describes the format.\n"
    "\n"
    "SRC is a file (plain, or gzip: every member inflated and checked) or a directory (its\n"
    "files, recursively, sorted by path; names starting with '.' are left out, so are FIFOs\n"
    "and devices, with a note). The sources are concatenated in the order given.\n"
    "\n"
    "options:\n"
    "  --out DATA_DIR     the data directory to create (it must not exist); it appears only\n"
    "                     when complete: the data is written into DATA_DIR.partial-PID,\n"
    "                     synced, and renamed at the end, so a prepare that is killed or\n"
    "                     fails leaves no DATA_DIR (a failed one removes its partial\n"
    "                     directory; a killed one leaves it, marked PREPARING, refused as\n"
    "                     data)\n"
    "  --val PATH         val.bin is PATH (a file or a directory), train.bin all of SRC\n"
    "  --val-bytes N      val.bin holds N bytes of the sources (default 81920, the default\n"
    "                     eval_window; eval_windows=16 needs 16 windows: --val-bytes 1310720)\n"
    "  --val-fraction F   val.bin holds round(F x total) bytes (0 < F < 1)\n"
    "  --val-split spread|tail  where they come from: spread (the default for bytes),\n"
    "                     pieces of 4096 bytes, one in each of as many equal stretches of\n"
    "                     the sources at an offset drawn with --val-seed (default 0), so\n"
    "                     text from all over the corpus validates; tail, the last bytes (as\n"
    "                     train --data SRC splits: train --data DATA_DIR then trains as it,\n"
    "                     bit for bit), the only split of tokens (a piece's edge could cut a\n"
    "                     character). meta.json records the method, the seed and every piece\n"
    "  --shuffle-files SEED  shuffle the order of the files (after sorting) with SEED\n"
    "  --include GLOB     take only the files of directories that match a GLOB\n"
    "                     (repeatable); a GLOB with a '/' is matched against the path under\n"
    "                     the directory, one without against the file name\n"
    "  --exclude GLOB     leave out the files of directories that match (repeatable)\n"
    "  --binary skip|ok   skip (default) binary files, a NUL byte among their first 8,000\n"
    "                     bytes, with a note naming each; ok keeps them\n"
    "\n"
    "tokens (docs/tokens.md):\n"
    "  --vocab N          the vocabulary: 4096 by default (text; a build without\n"
    "                     SentencePiece: bytes, with a note). N > 256: train a\n"
    "                     SentencePiece tokenizer of N pieces on train.bin (byte fallback,\n"
    "                     no normalization: it decodes to the text byte for byte) and write\n"
    "                     tokenizer.model, train.tok and val.tok (uint16 ids up to 65,536\n"
    "                     pieces, else uint32), with the vocabulary, the tokenizer's checksum\n"
    "                     and the bytes per token in meta.json. Every byte is checked to\n"
    "                     round-trip; text that is not valid UTF-8 is refused, naming the file\n"
    "                     and the offset of its first such byte. 256: bytes, the format\n"
    "                     above, for any input (binary too)\n"
    "  --tokenizer-type bpe|unigram  the tokenizer trained (default bpe)\n"
    "  --tokenizer-sample BYTES  train it on at most BYTES of train.bin (default 67108864):\n"
    "                     a larger train.bin gives pieces of 1 MiB spread evenly over it\n"
    "  --tokenizer FILE.model  reuse this SentencePiece model instead of training one\n"
    "\n"
    "Progress: a line with the bytes read, bytes/s and the ETA (about once a second).\n"
    "Ctrl-C or SIGTERM stops it; nothing is left. Exit codes: 0 done, 1 I/O failure, 2 bad\n"
    "usage or input (a source missing, DATA_DIR exists, a damaged gzip, a split that leaves\n"
    "fewer than 2 bytes on a side; with a vocabulary above 256, text that is not valid\n"
    "UTF-8 or does not round-trip, a vocabulary SentencePiece cannot train), 130 / 143\n"
    "interrupted.\n";

int dm_cmd_prepare(int argc, char **argv, const dm_job_io *io) {
    static const char *const with_value[] = {"--out", "--val", "--val-bytes", "--val-fraction",
                                             "--shuffle-files", "--include", "--exclude",
                                             "--binary", "--val-split", "--val-seed",
                                             "--vocab", "--tokenizer", "--tokenizer-type",
                                             "--tokenizer-sample", NULL};
    static const char *const flags[] = {"--help", "-h", NULL};
    dm_args a = {argc, 1, argv, with_value, flags, NULL, NULL};
    const char *srcs[1024], *incl[256], *excl[256];
    dm_prepare_args pa = {.srcs = srcs, .incl = incl, .excl = excl};
    int vocab_given = 0, spread_asked = 0;
    int r, splits = 0;
    while ((r = dm_args_next(&a, "prepare")) > 0) {
        if (!a.name) {
            if (pa.n_srcs == 1024) {
                fprintf(stderr, "error: at most 1024 SRC arguments (give directories)\n");
                return EXIT_USAGE;
            }
            srcs[pa.n_srcs++] = a.value;
        } else if (!strcmp(a.name, "--help") || !strcmp(a.name, "-h")) {
            fputs(HELP, stdout);
            return EXIT_OK;
        } else if (!strcmp(a.name, "--out")) pa.out = a.value;
        else if (!strcmp(a.name, "--val")) pa.val = a.value, splits++;
        else if (!strcmp(a.name, "--val-bytes")) {
            long v;
            if (dm_cli_long("--val-bytes", a.value, 2, 1L << 62, &v)) return EXIT_USAGE;
            pa.val_bytes = v;
            splits++;
        } else if (!strcmp(a.name, "--val-fraction")) {
            double f;
            if (dm_parse_real(a.value, &f) || !(f > 0 && f < 1)) {
                char pv[64];
                fprintf(stderr, "error: --val-fraction expects a decimal number between 0 and 1 "
                        "(both excluded), got '%s'\n", dm_printable(a.value, pv, sizeof pv));
                return EXIT_USAGE;
            }
            pa.val_fraction = f;
            splits++;
        } else if (!strcmp(a.name, "--shuffle-files")) {
            if (dm_parse_u64(a.value, &pa.shuffle_seed)) {
                fprintf(stderr, "error: --shuffle-files expects a seed (an integer), got '%s'\n",
                        a.value);
                return EXIT_USAGE;
            }
            pa.shuffle = 1;
        } else if (!strcmp(a.name, "--val-split")) {
            if (strcmp(a.value, "spread") && strcmp(a.value, "tail")) {
                fprintf(stderr, "error: --val-split expects spread or tail, got '%s'\n",
                        a.value);
                return EXIT_USAGE;
            }
            pa.val_tail = !strcmp(a.value, "tail");
            spread_asked = !pa.val_tail;
        } else if (!strcmp(a.name, "--val-seed")) {
            if (dm_parse_u64(a.value, &pa.val_seed)) {
                fprintf(stderr, "error: --val-seed expects a seed (an integer), got '%s'\n",
                        a.value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a.name, "--binary")) {
            if (strcmp(a.value, "ok") && strcmp(a.value, "skip")) {
                fprintf(stderr, "error: --binary expects skip or ok, got '%s'\n", a.value);
                return EXIT_USAGE;
            }
            pa.binary_ok = !strcmp(a.value, "ok");
        } else if (!strcmp(a.name, "--vocab")) {
            long v;
            if (dm_cli_long("--vocab", a.value, 256, 1L << 30, &v)) return EXIT_USAGE;
            pa.vocab = (int)v;
            vocab_given = 1;
        } else if (!strcmp(a.name, "--tokenizer")) pa.tokenizer = a.value;
        else if (!strcmp(a.name, "--tokenizer-type")) {
            if (strcmp(a.value, "bpe") && strcmp(a.value, "unigram")) {
                fprintf(stderr, "error: --tokenizer-type expects bpe or unigram, got '%s'\n",
                        a.value);
                return EXIT_USAGE;
            }
            pa.tok_type = a.value;
        } else if (!strcmp(a.name, "--tokenizer-sample")) {
            long v;
            if (dm_cli_long("--tokenizer-sample", a.value, 1L << 20, 1L << 62, &v))
                return EXIT_USAGE;
            pa.tok_sample = v;
        } else if ((!strcmp(a.name, "--include") ? pa.n_incl : pa.n_excl) == 256) {
            fprintf(stderr, "error: too many %s options\n", a.name);
            return EXIT_USAGE;
        } else if (!strcmp(a.name, "--include")) incl[pa.n_incl++] = a.value;
        else excl[pa.n_excl++] = a.value;
    }
    if (r < 0) return EXIT_USAGE;
    if (!pa.n_srcs || !pa.out) {
        fprintf(stderr, "error: prepare: %s (try `dormouse prepare --help`)\n",
                pa.n_srcs ? "missing --out DATA_DIR" : "missing SRC (a file or directory)");
        return EXIT_USAGE;
    }
    if (splits > 1) {
        fprintf(stderr, "error: give one of --val, --val-bytes and --val-fraction\n");
        return EXIT_USAGE;
    }
    if (!splits) pa.val_bytes = DM_PREPARE_VAL_BYTES;
    if (!vocab_given && !pa.tokenizer) { /* the default: tokens for text */
        pa.vocab = dm_tokenizer_missing() ? 256 : DM_PREPARE_VOCAB;
        if (dm_tokenizer_missing())
            dm_job_note(io, "prepare: bytes (vocab 256): %s\n", dm_tokenizer_missing());
        else
            dm_job_note(io, "prepare: vocab %d, the default (--vocab 256 keeps the bytes)\n",
                        pa.vocab);
    }
    if (spread_asked && (pa.tokenizer || pa.vocab > 256)) {
        fprintf(stderr, "error: --val-split spread: token data validates on the tail (a "
                "spread piece's edge could cut a character); --vocab 256 for bytes\n");
        return EXIT_USAGE;
    }
    if (pa.tokenizer && pa.vocab == 256) {
        fprintf(stderr, "error: --vocab 256 is the bytes; it takes no --tokenizer\n");
        return EXIT_USAGE;
    }
    if ((pa.tok_type || pa.tok_sample) && (pa.tokenizer || pa.vocab <= 256)) {
        fprintf(stderr, "error: --tokenizer-type and --tokenizer-sample go with --vocab N "
                "(N > 256), a tokenizer to train\n");
        return EXIT_USAGE;
    }
    dm_status st = dm_prepare(&pa, io);
    return dm_cli_exit(io, &st);
}
