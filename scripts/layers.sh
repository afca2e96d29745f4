#!/usr/bin/env bash
# layers.sh [SOURCE_DIR] — the include rules of docs/architecture.md section 2: a file under
# src/ includes headers of its own layer or of lower ones, never of a higher one, and no
# chain of includes comes back to where it started. Exits 1 and names every include that
# breaks a rule (or that names a header it cannot find) and every circle.
#
# Layers, lowest first (a folder under src/ and its rank):
#   base 0 (the seeded generator, the config key table, small helpers every layer uses)
#   kernels 1 (kernels/cuda, kernels/common.h)   ref 1 (the reference kernels, the oracles)
#   ops 2 (the generic op layer)   backends 3 (one folder per backend, src/backends/<name>/,
#   and the registry beside them)   model 4   optim 5   io 6   jobs 7   cli 8
# include/dormouse.h is the public API: any file may include it. System headers (<...>)
# are not checked. A quoted include is resolved as the compiler does: beside the file
# first, then from src/, then from include/.
#
# The seams of the op layer (docs/backends.md) forbid more arrows:
#   - ops -> a backend: the generic layer never names a backend's headers (backends
#     register their implementations with it);
#   - a backend's kernels (src/backends/<b>/kernels/) are kernels: they include base,
#     kernels, ref and their own folder only, and only their backend includes them;
#   - one backend -> another: only through that backend's interface, backends/<b>/<b>.h;
#   - ops -> kernels/<b> from outside src/ops/<b>/ (the CUDA probe's own folder);
#   - a layer above the backends (model, optim, io, jobs, cli) -> kernels/, ref/ or
#     backends/: it reaches them through the op layer;
#   - a layer above the backends -> the op layer's internals: anything in ops but its
#     interface, ops/ops.h, ops/atlas.h, ops/backend.h, ops/buffer.h, ops/policy.h,
#     ops/precision.h and ops/optim_ops.h.
# Circles: a module is a .c file and the .h of the same name beside it; a header x_y.h
# with no x_y.c beside it belongs to the module x beside it (optim_internal.h to optim).
# Module A includes module B when a file of A includes a file of B; any circle of modules
# is named (optim.c calling Muon while muon.c includes optim's header is one).
set -uo pipefail
src_dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src_dir" || { echo "layers: cannot enter $src_dir" >&2; exit 1; }

declare -A rank=([base]=0 [kernels]=1 [ref]=1 [ops]=2 [backends]=3 [model]=4 [optim]=5
                 [io]=6 [jobs]=7 [cli]=8)
# the op layer's interface to the layers above it
declare -A ops_public=([src/ops/ops.h]=1 [src/ops/atlas.h]=1 [src/ops/backend.h]=1
                       [src/ops/buffer.h]=1 [src/ops/policy.h]=1 [src/ops/precision.h]=1
                       [src/ops/optim_ops.h]=1)

# the layer of a path under src/ ("" when it is not under a known layer folder)
layer_of() {
    local p=${1#src/}
    local top=${p%%/*}
    [[ $p == */* && -n ${rank[$top]+x} ]] && echo "$top"
}
# the backend folder of a path (src/backends/<b>/...: <b>; else "")
backend_of() {
    [[ $1 == src/backends/*/* ]] || return 0
    local b=${1#src/backends/}
    echo "${b%%/*}"
}
say() { echo "layers: $*" >&2; bad=1; }
# the module of a file (see Circles above)
module_of() {
    local dir=${1%/*} base=${1##*/}
    base=${base%.*}
    if [[ $base == *_* && ! -f $dir/$base.c ]]; then
        local pre=${base%%_*}
        if [[ -f $dir/$pre.c || -f $dir/$pre.h ]]; then base=$pre; fi
    fi
    echo "$dir/$base"
}

bad=0 files=0 includes=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
while IFS= read -r f; do
    files=$((files + 1))
    from=$(layer_of "$f")
    if [[ -z $from ]]; then
        say "$f is not in a layer folder (src/{$(echo "${!rank[@]}" | tr ' ' ',')})"
        continue
    fi
    fbe=$(backend_of "$f")
    while IFS= read -r inc; do
        includes=$((includes + 1))
        dir=$(dirname "$f")
        if [[ -f $dir/$inc ]]; then target=$(realpath --relative-to=. "$dir/$inc")
        elif [[ -f src/$inc ]]; then target=src/$inc
        elif [[ -f include/$inc ]]; then continue # the public API
        else
            say "$f includes \"$inc\", which is not under src/ or include/"
            continue
        fi
        echo "$(module_of "$f") $(module_of "$target")" >> "$edges"
        to=$(layer_of "$target")
        tbe=$(backend_of "$target")
        if [[ -z $to ]]; then
            say "$f includes $target, which is in no layer"
        elif [[ $f == src/backends/*/kernels/* && $to != base && $to != kernels && $to != ref &&
                $target != src/backends/$fbe/kernels/* ]]; then
            say "$f (a kernel of the $fbe backend) includes $target: kernels include" \
                "base, kernels, ref and their own folder only"
        elif (( rank[$to] > rank[$from] )); then
            say "$f ($from, layer ${rank[$from]}) includes $target ($to, layer ${rank[$to]}):" \
                "an include that points up"
        elif [[ $target == src/backends/*/kernels/* && $fbe != "$tbe" ]]; then
            say "$f includes $target: only the $tbe backend (src/backends/$tbe/) calls its kernels"
        elif [[ -n $fbe && -n $tbe && $fbe != "$tbe" && $target != src/backends/$tbe/$tbe.h ]]; then
            say "$f (the $fbe backend) includes $target: another backend is reached through" \
                "its interface, backends/$tbe/$tbe.h"
        elif [[ $from == ops && $target == src/kernels/*/* ]]; then
            kb=${target#src/kernels/}
            kb=${kb%%/*}
            if [[ $f != src/ops/$kb/* ]]; then
                say "$f (ops) includes $target: only src/ops/$kb/ calls kernels/$kb"
            fi
        elif (( rank[$from] > rank[backends] )) && [[ $to == kernels || $to == ref || $to == backends ]]; then
            say "$f ($from, layer ${rank[$from]}) includes $target: above the backends the" \
                "kernels and the backends are reached through ops"
        elif (( rank[$from] > rank[backends] )) && [[ $to == ops && -z ${ops_public[$target]+x} ]]; then
            say "$f ($from, layer ${rank[$from]}) includes $target: an internal of" \
                "the op layer (its interface: ${!ops_public[*]})"
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find src -type f \( -name '*.c' -o -name '*.h' \) | sort)

# circles: tsort names the modules of each loop it finds, a loop after each header line
while IFS= read -r loop; do
    [[ -n $loop ]] && say "an include circle through the modules:$loop"
done < <(awk '$1 != $2' "$edges" | sort -u | tsort 2>&1 >/dev/null |
         awk '/input contains a loop/ { if (l != "") print l; l = ""; next }
              { sub(/^tsort: /, ""); l = l " " $0 } END { if (l != "") print l }')

if (( files == 0 )); then
    echo "layers: no sources under $src_dir/src" >&2
    exit 1
fi
if (( bad )); then
    echo "layers: FAILED (docs/architecture.md section 2: includes only point down)" >&2
    exit 1
fi
echo "layers: $files files, $includes includes, every one points to its own layer or below, no circle"
