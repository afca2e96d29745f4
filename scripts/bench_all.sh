#!/usr/bin/env bash
# `make bench`: run every benchmark and append its rows to benches/history.tsv.
# Each row carries the contention flag of its probe: run on a quiet machine.
set -euo pipefail
build=${1:-build}
hist=benches/history.tsv
"$build/dormouse" bench --history "$hist"
"$build/bench_delta" --history "$hist"
"$build/bench_ns" --history "$hist"
"$build/bench_gemm" --history "$hist"
"$build/bench_kernels" --cold --history "$hist"
