#!/usr/bin/env bash
# Install the Debian packages dormouse needs, only those that are missing.
# Used by `make run`, `make test` and .ci/run. Does nothing when all are present.
# On a system without dpkg/apt-get it names what to install and stops.
#   deps.sh          what dormouse builds and runs with (PLplot draws `dormouse plot`)
#   deps.sh --test   also what the tests need: python3-torch, for the PyTorch twin's test
#                    (tests/test_python.c; it is skipped, with its reason, without it), and
#                    python3-sentencepiece, for the twin's side of the tokens
#                    (tests/test_tokens.c)
set -euo pipefail

# libopenmpi-dev, openmpi-bin: data-parallel training under mpirun (optional at build
# time: CMake builds without MPI when it is missing, and the MPI tests then skip)
# libsentencepiece-dev: the tokenizers of `prepare --vocab N` (g++ builds its C shim; CMake
# builds without it, bytes only, and the token tests then skip)
PKGS=(gcc make cmake pkgconf libopenblas-openmp-dev libdnnl-dev libcjson-dev libxxhash-dev zlib1g-dev
      libplplot-dev plplot-driver-cairo libopenmpi-dev openmpi-bin g++ libsentencepiece-dev)
if [[ ${1:-} == --test ]]; then PKGS+=(python3-torch python3-sentencepiece); fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: this is not a Debian-like system (no dpkg/apt-get)." >&2
  echo "deps: install these (or your system's equivalents) and run again:" >&2
  echo "      ${PKGS[*]}  (a C11 compiler with OpenMP, CMake >= 3.18, OpenBLAS built with OpenMP, oneDNN, cJSON, xxHash, zlib, PLplot with its cairo driver, Open MPI for mpirun (optional), a C++ compiler and SentencePiece for token vocabularies (optional); for the tests PyTorch and SentencePiece for /usr/bin/python3)" >&2
  exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$st" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "deps: installing missing Debian packages: ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
  echo "deps: not root and no sudo; run as root: apt-get install -y ${missing[*]}" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" \
  || { "${SUDO[@]}" apt-get update && "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; }
