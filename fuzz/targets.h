/* targets.h — the fuzz targets: one entry point per input format, the same function for
 * the libFuzzer harnesses (fuzz/fuzz_*.c, `make fuzz`, clang) and for the replay of the
 * corpus in `make test` (tests/test_fuzz.c, the plain build). Each returns 0 when the
 * input was accepted, 1 when it was refused with an error; a crash, a hang, a sanitizer
 * report or an abort() (a broken property, below) is a finding.
 *
 *   safetensors  the bytes of a safetensors file (dm_st_parse); accepted files are read
 *                through (every tensor's every value, the metadata).
 *   ckpt         a checkpoint: u32 little-endian length L, then L bytes of model file,
 *                then the rest as its optim.safetensors (none when empty); loaded into
 *                the fuzz model (FUZZ_CONFIG below) with its AdamW optimizer, as a resume
 *                loads (dm_ckpt_from_files, dm_ckpt_into).
 *   config       the text of a JSON config file (dm_config_from_json); an accepted and
 *                valid config must survive dm_config_to_json and back unchanged. */
#ifndef DM_FUZZ_TARGETS_H
#define DM_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* The model of the checkpoint target: small enough that a checkpoint pair is a few KB. */
#define FUZZ_CONFIG                                                                       \
    {"d_model=2", "n_layer=1", "n_head=1", "head_dim=2", "gate_rank=1", "conv_size=2",   \
     "tie_embeddings=true", "optimizer=adamw", "threads=1", "batch_size=1", "seq_len=8",  \
     "eval_window=64", "warmup_steps=1", "log_every=1"}

int dm_fuzz_safetensors(const uint8_t *data, size_t n);
int dm_fuzz_ckpt(const uint8_t *data, size_t n);
int dm_fuzz_config(const uint8_t *data, size_t n);

#endif
