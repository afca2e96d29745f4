/* rng.h — our own seeded generator, identical on every machine and thread count.
 * splitmix64 seeding into xoshiro256**; uniform doubles from 53 bits; normals by
 * Box–Muller in double. A stream is (seed, stream id): independent draws for each
 * tensor, step or thread without depending on how much another stream consumed. */
#ifndef DM_RNG_H
#define DM_RNG_H

#include <stdint.h>

typedef struct dm_rng { uint64_t s[4]; } dm_rng;

void dm_rng_seed(dm_rng *r, uint64_t seed, uint64_t stream);
uint64_t dm_rng_u64(dm_rng *r);
double dm_rng_uniform(dm_rng *r);              /* [0, 1) */
double dm_rng_normal(dm_rng *r);               /* N(0, 1) */
uint64_t dm_rng_below(dm_rng *r, uint64_t n);  /* uniform in [0, n), n > 0, unbiased */
uint64_t dm_hash_str(const char *s);           /* FNV-1a 64, for name-derived streams */

#endif
