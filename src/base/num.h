/* num.h — strict numbers from text: config values (--set, JSON files, a run's
 * config.json, checkpoint metadata), command-line flags and the step of a checkpoint all
 * go through these, so every place takes the same spellings.
 *
 * Integers are `-?[0-9]+` (unsigned: `[0-9]+`); reals are decimal,
 * `-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?`, and finite. The whole string must
 * be the number: no spaces, no '+' sign, no hex, no inf or nan. */
#ifndef DM_NUM_H
#define DM_NUM_H

#include <stdint.h>

/* 0 when s is an integer in [lo, hi] (into *out); 1 otherwise. */
int dm_parse_int(const char *s, long long lo, long long hi, long long *out);
/* 0 when s is an unsigned integer that fits 64 bits; 1 otherwise. */
int dm_parse_u64(const char *s, uint64_t *out);
/* 0 when s is a finite decimal real (into *out); 1 otherwise. */
int dm_parse_real(const char *s, double *out);
/* 0 when s is a duration in whole seconds, at most hi (into *out); 1 otherwise. A plain
 * integer is seconds; else hours, minutes and seconds in that order, each optional but
 * not all: `90`, `90s`, `5m`, `1h30m`, `2m30s`. */
int dm_parse_duration(const char *s, long long hi, long long *out);

#endif
