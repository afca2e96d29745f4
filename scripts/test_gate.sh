#!/usr/bin/env bash
# The test gate: runs every CTest case in BUILD_DIR and exits non-zero when any fails.
# Designed-red cases (tests/designed_red.txt) are expected to fail; an unexpected pass
# of one is a failure that tells you to remove its marker.
set -uo pipefail
build=${1:-build}
jobs=${2:-2}
ctest --test-dir "$build" --output-on-failure -j "$jobs"
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "test gate: FAILED (ctest exit $rc)" >&2
  exit 1
fi
echo "test gate: all tests passed"
