#!/usr/bin/env bash
# history_check.sh [REPO_DIR] [FILE] — benches/history.tsv only ever gains rows at the end.
#
# Fails (exit 1) when the file has lost, changed or reordered a row compared with its
# previous committed version, checking two steps of its history:
#   HEAD~1 -> HEAD       the last commit (its first parent: a union merge keeps our rows
#                        first, so the first parent's file is a prefix of the merge's)
#   HEAD -> working tree uncommitted edits
# In each step the older file must be a prefix of the newer one, row for row (the older
# may end without a newline only if the newer adds nothing to that last row).
# Passes when the file has no history yet (not in HEAD~1 or HEAD), and skips (exit 0,
# with a message) outside a git checkout or without git. Exit 2 on bad usage.
# `make test` runs it as the CTest case history_append_only.
set -uo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
file=${2:-benches/history.tsv}
[[ $# -le 2 ]] || { echo "usage: history_check.sh [REPO_DIR] [FILE]" >&2; exit 2; }

if ! command -v git >/dev/null 2>&1; then
  echo "history check: skipped (git is not installed)"
  exit 0
fi
if ! git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "history check: skipped ($repo is not a git checkout)"
  exit 0
fi
top=$(git -C "$repo" rev-parse --show-toplevel)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/history-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Write REV:file into $tmp/NAME; returns 1 when the revision or the file does not exist.
show() {
  git -C "$top" rev-parse -q --verify "$1^{commit}" >/dev/null 2>&1 || return 1
  git -C "$top" cat-file -e "$1:$file" 2>/dev/null || return 1
  git -C "$top" show "$1:$file" >"$tmp/$2"
}

# prefix OLD NEW LABEL: 0 when OLD's rows are NEW's first rows, unchanged; else explain.
prefix() {
  local old=$1 new=$2 label=$3
  local n; n=$(wc -c <"$old")
  [[ $n -eq 0 ]] && return 0
  if cmp -s "$old" <(head -c "$n" "$new"); then
    # the same bytes; a last row without its newline must not have been extended
    local last next
    last=$(tail -c 1 "$old" | od -An -tx1 | tr -d ' \n')
    next=$(tail -c +$((n + 1)) "$new" | head -c 1 | od -An -tx1 | tr -d ' \n')
    [[ $last == 0a || -z $next || $next == 0a ]] && return 0
  fi
  # the first row that differs, for the message
  local row=1 a b
  exec 3<"$old" 4<"$new"
  while IFS= read -r a <&3 || [[ -n $a ]]; do
    if ! IFS= read -r b <&4 && [[ -z ${b:-} ]]; then
      echo "history check: FAILED ($label): $file lost rows from row $row on; it is append-only" \
           "(docs/architecture.md section 7): restore them and add new rows at the end" >&2
      return 1
    fi
    if [[ $a != "$b" ]]; then
      echo "history check: FAILED ($label): $file row $row was changed, removed or moved:" >&2
      echo "  was: $a" >&2
      echo "  now: $b" >&2
      echo "  rows are append-only (docs/architecture.md section 7): restore it; add new rows" \
           "at the end" >&2
      return 1
    fi
    row=$((row + 1))
  done
  echo "history check: FAILED ($label): $file row $((row - 1)) was extended; rows are append-only" >&2
  return 1
}

status=0
checked=0
if show HEAD head; then
  if show HEAD~1 prev; then
    prefix "$tmp/prev" "$tmp/head" "HEAD~1 -> HEAD" || status=1
    checked=1
  fi
  if [[ -e $top/$file ]]; then
    prefix "$tmp/head" "$top/$file" "HEAD -> working tree" || status=1
  else
    echo "history check: FAILED (HEAD -> working tree): $file was deleted; it is append-only" >&2
    status=1
  fi
  checked=1
fi
if [[ $status -eq 0 ]]; then
  if [[ $checked -eq 1 ]]; then
    echo "history check: $file only gained rows at the end"
  else
    echo "history check: $file has no committed history yet; nothing to compare"
  fi
fi
exit $status
