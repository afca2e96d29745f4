#!/usr/bin/env bash
# device_deps.sh [--unpack] [DIR] — the Debian packages a build of the CUDA tests needs on
# a machine that has the CUDA toolkit, CMake and a C compiler but none of Debian's
# libraries (the device image of docs/cuda.md).
#   device_deps.sh [DIR]           fetch them here with `apt-get download` into DIR/debs
#                                  (default DIR: .device, git-ignored), then unpack
#   device_deps.sh --unpack [DIR]  unpack DIR/debs into DIR/prefix (what
#                                  scripts/device_check.sh runs on the device: the .deb
#                                  files travel, a seventh of the unpacked size)
# A build then configures with CMAKE_PREFIX_PATH=DIR/prefix/usr and finds its libraries
# through LD_LIBRARY_PATH (device_check.sh sets both). PLplot and MPI are left out (the
# device build configures -DDM_PLPLOT=OFF -DDM_MPI=OFF). Also, where pip works here, the
# wheel of fla's kernels (fla-core, pure Python: its Triton and PyTorch are the device
# image's) into DIR/whl, for the device check's PyTorch peer (python/dormouse.py bench).
set -euo pipefail
cd "$(dirname "$0")/.."
unpack_only=0
if [[ ${1:-} == --unpack ]]; then unpack_only=1; shift; fi
dir=${1:-.device}
# OpenBLAS (OpenMP) and its Fortran runtime, oneDNN and its OpenCL loader, cJSON, xxHash
# (the checkpoints' checksums), zlib: every library CMakeLists.txt requires
PKGS=(libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 libdnnl2 libdnnl-dev
      ocl-icd-libopencl1 libcjson1 libcjson-dev libxxhash0 libxxhash-dev zlib1g zlib1g-dev)
LIMIT_MB=40 # the device call carries at most 64 MiB with the working tree

if (( ! unpack_only )); then
  command -v apt-get >/dev/null ||
    { echo "device_deps: needs apt-get (a Debian-like system)" >&2; exit 1; }
  rm -rf "$dir/debs"
  mkdir -p "$dir/debs"
  # (apt's note that it downloads unsandboxed as root is dropped)
  (cd "$dir/debs" && apt-get download "${PKGS[@]}" >/dev/null 2> >(grep -v unsandboxed >&2)) ||
    { echo "device_deps: apt-get download failed (try apt-get update)" >&2; exit 1; }
  mb=$(( $(du -sb "$dir/debs" | cut -f1) / 1048576 ))
  echo "device_deps: ${#PKGS[@]} packages, ${mb} MiB of .deb files in $dir/debs"
  if (( mb > LIMIT_MB )); then
    echo "device_deps: $dir/debs is ${mb} MiB, over ${LIMIT_MB}: the device call would not carry it" >&2
    exit 1
  fi
  rm -rf "$dir/whl"
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir/whl" fla-core \
       >/dev/null 2>&1; then
    echo "device_deps: $(cd "$dir/whl" && ls) in $dir/whl (the PyTorch peer's fla)"
  else
    echo "device_deps: note: no fla wheel (pip download fla-core failed here): the device" \
         "check's peer step will say it did not run"
  fi
fi

ls "$dir"/debs/*.deb >/dev/null 2>&1 ||
  { echo "device_deps: no .deb files in $dir/debs (run scripts/device_deps.sh here first)" >&2; exit 1; }
# every package there (a folder fetched by an older list lacks some: the configure on the
# device would fail on the first missing library)
missing=()
for p in "${PKGS[@]}"; do
  ls "$dir/debs/${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "device_deps: $dir/debs lacks ${missing[*]} (run scripts/device_deps.sh here again)" >&2
  exit 1
fi
rm -rf "$dir/prefix"
mkdir -p "$dir/prefix"
prefix=$(cd "$dir/prefix" && pwd)
for f in "$dir"/debs/*.deb; do
  if command -v dpkg >/dev/null; then dpkg -x "$f" "$prefix"
  else # no dpkg: a .deb is an ar archive holding data.tar.*
    t=$(mktemp -d) abs=$(realpath "$f")
    (cd "$t" && ar x "$abs" && tar -xf data.tar.* -C "$prefix")
    rm -rf "$t"
  fi
done
# links to absolute paths (zlib1g-dev's libz.so -> /lib/...) point into the prefix
while IFS= read -r l; do
  target=$(readlink "$l")
  if [[ $target == /* ]]; then ln -sfn "$prefix$target" "$l"; fi
done < <(find "$prefix" -type l)
echo "device_deps: unpacked into $dir/prefix ($(du -sh "$prefix" | cut -f1))"
