#!/usr/bin/env bash
# The cost of the checkpoint checksums against a save (opt-in, not in `make test`): the
# default model's checkpoint (model + optimizer) saved REPS times into DIR, and XXH64 of
# the same bytes REPS times, interleaved in one process so that a busy machine slows both
# alike; prints the median of each and their ratio.
#   scripts/probe_ckpt_cost.sh [BUILD=build] [REPS=15] [DIR=/tmp/dm-ckpt-cost]
set -euo pipefail
BUILD=${1:-build}; REPS=${2:-15}; DIR=${3:-/tmp/dm-ckpt-cost}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DIR"
cat > "$DIR/cost.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <xxhash.h>
#include "dormouse.h"
#include "io/ckpt.h"
#include "optim/optim.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    int reps = atoi(argv[2]);
    char err[4096];
    dm_config c;
    dm_config_default(&c);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_optim *o = m ? dm_optim_create(m, &c, err, sizeof err) : NULL;
    if (!o) { fprintf(stderr, "%s\n", err); return 1; }
    dm_optim_buf b[DM_OPTIM_MAX_BUFS];
    int nb = dm_optim_state(o, b, DM_OPTIM_MAX_BUFS);
    size_t bytes = dm_model_num_params(m) * 4;
    for (int i = 0; i < nb; i++) bytes += b[i].n * 4;
    double *ts = malloc(sizeof(double) * reps), *th = malloc(sizeof(double) * reps);
    volatile unsigned long long sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (dm_ckpt_save(argv[1], m, o, 1 + r, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        ts[r] = now() - t0;
        t0 = now();
        sink += XXH64(dm_model_params(m), dm_model_num_params(m) * 4, 0);
        for (int i = 0; i < nb; i++) sink += XXH64(b[i].data, b[i].n * 4, 0);
        th[r] = now() - t0;
    }
    qsort(ts, reps, sizeof *ts, cmp);
    qsort(th, reps, sizeof *th, cmp);
    printf("checkpoint of the default model: %.1f MB (model + optimizer)\n", bytes / 1e6);
    printf("save (checksums included): median %.1f ms; XXH64 of the same bytes: median %.2f ms "
           "(%.1f GB/s); checksums = %.1f%% of a save\n", 1e3 * ts[reps / 2], 1e3 * th[reps / 2],
           bytes / th[reps / 2] / 1e9, 100 * th[reps / 2] / ts[reps / 2]);
    return (int)(sink & 0);
}
C
cc -O2 -fopenmp -I"$ROOT/include" -I"$ROOT/src" "$DIR/cost.c" "$ROOT/$BUILD/libdormouse.a" \
   $(pkg-config --libs --static "$ROOT/$BUILD/dormouse.pc" 2>/dev/null || echo "-lopenblas -ldnnl -lcjson -lxxhash -lz -lm") \
   -o "$DIR/cost" 2>/dev/null || cc -O2 -fopenmp -I"$ROOT/include" -I"$ROOT/src" "$DIR/cost.c" \
   "$ROOT/$BUILD/libdormouse.a" -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl \
   -lcjson -lxxhash -lz -lm $(pkg-config --libs plplot 2>/dev/null) -lmpi -o "$DIR/cost"
mkdir -p "$DIR/run"
"$DIR/cost" "$DIR/run" "$REPS"
rm -rf "$DIR/run"
