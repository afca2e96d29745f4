#!/usr/bin/env bash
# Rebuild data/kjv.txt.gz, the bundled corpus, from Debian's bible-kjv package
# (the King James Bible, public domain) with its own `bible` program.
# One verse per line, verse labels ("Ge1:1 ") stripped, books in canonical order.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v bible >/dev/null 2>&1; then
  echo "build_corpus: the 'bible' program is missing: apt-get install bible-kjv" >&2
  exit 1
fi
bible -f "gen1:1-rev22:21" \
  | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' \
  | gzip -9n > kjv.txt.gz.tmp
mv kjv.txt.gz.tmp kjv.txt.gz
echo "build_corpus: $(gzip -dc kjv.txt.gz | wc -c) bytes, sha256 of the text:" \
     "$(gzip -dc kjv.txt.gz | sha256sum | cut -d' ' -f1)"
