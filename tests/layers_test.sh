#!/usr/bin/env bash
# The layer test: every `#include "..."` of the product folders follows the dependency order of the design
# (docs/design.md, "Folders and who may include whom"; docs/layout.md walks the folders). Each source belongs to the
# deepest unit below that holds it; it may include the units its line names (a unit with everything under it; a
# name ending in = the unit's own top files only):
#   plans/util/     -> plans/util                              the file plumbing, at the bottom
#   plans/model/    -> plans/model, plans/util
#   plans/language/backends/ -> plans/language/backends, plans/util   the backends torch and torchtitan run
#   plans/language/ -> plans/language=, plans/language/backends, plans/model, plans/util  the plan language
#   plans/language/resolve/ -> plans/language, plans/model, plans/util   a preset resolved on a config, the shrunk model
#   plans/program/  -> plans/program, plans/language, plans/model, plans/util
#   plans/lower/rewrite/ -> plans/lower/rewrite, plans/program, plans/language, plans/model, plans/util
#                                                               rewrites of a lowered Program: no tracer, no lower.h
#   plans/lower/    -> plans/lower, plans/program, plans/language, plans/model, plans/util
#   plans/export/   -> plans/export, plans/language, plans/model, plans/util
#   plans/ (top)    -> plans                                    (a file not yet in a part)
#   kernels/formulas/         -> kernels/formulas                  per-element formulas, CPU and CUDA alike
#   kernels/cpu/              -> kernels/cpu, kernels/formulas
#   kernels/cuda/device/      -> kernels/cuda/device, kernels/formulas  the device plumbing of every CUDA kernel
#   kernels/cuda/attention/   -> kernels/cuda/attention, kernels/cuda/device, kernels/cpu, kernels/formulas
#   kernels/cuda/             -> kernels/cuda, kernels/cpu, kernels/formulas
#   kernels/ (top)            -> kernels
#   sim/cost/       -> sim/cost, sim=, plans                     the cost model, on the specs at sim/'s top
#   sim/timeline/   -> sim/timeline, sim=, sim/cost, plans       one step's ops on the streams
#   sim/pipeline/, sim/search/, sim/report/, sim/calibrate/, sim/check/ -> sim, plans   (units of their own, so that
#                                                               sim= is the top's files, not the folders above them)
#   sim/            -> sim, plans
#   runtime/        -> runtime, plans, kernels
#   tools/ (top)    -> tools=, plans                            what both CLIs share
#   tools/tp_plan/  -> tools/tp_plan, tools=, plans, sim
#   tools/tp_run/   -> tools/tp_run, tools=, plans, sim, runtime, kernels
# A folder not named here (plans/moe/, say) is part of the unit above it, so that plans/util/ or plans/lower/
# including it fails until its line is added. (tests/ and bench/ may include everything, so they are not scanned.)
# An include that names no folder of ours (a system or third-party header in quotes) is refused too: every project
# include is written from the repository root ("plans/language/plan.h"), so that the line says which layer it
# reaches into.
#
#   tests/layers_test.sh [SOURCE_DIR]     exit 0: no crossing; 1: each crossing as FILE:LINE: ... on stderr
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

declare -A allowed=(
  [plans/util]="plans/util"
  [plans/model]="plans/model plans/util"
  [plans/language/backends]="plans/language/backends plans/util"
  [plans/language]="plans/language= plans/language/backends plans/model plans/util"
  [plans/language/resolve]="plans/language plans/model plans/util"
  [plans/program]="plans/program plans/language plans/model plans/util"
  [plans/lower/rewrite]="plans/lower/rewrite plans/program plans/language plans/model plans/util"
  [plans/lower]="plans/lower plans/program plans/language plans/model plans/util"
  [plans/export]="plans/export plans/language plans/model plans/util"
  [plans]="plans"
  [kernels/formulas]="kernels/formulas"
  [kernels/cpu]="kernels/cpu kernels/formulas"
  [kernels/cuda/device]="kernels/cuda/device kernels/formulas"
  [kernels/cuda/attention]="kernels/cuda/attention kernels/cuda/device kernels/cpu kernels/formulas"
  [kernels/cuda]="kernels/cuda kernels/cpu kernels/formulas"
  [kernels]="kernels"
  [sim/cost]="sim/cost sim= plans"
  [sim/timeline]="sim/timeline sim= sim/cost plans"
  [sim/pipeline]="sim plans"
  [sim/search]="sim plans"
  [sim/report]="sim plans"
  [sim/calibrate]="sim plans"
  [sim/check]="sim plans"
  [sim]="sim plans"
  [runtime]="runtime plans kernels"
  [tools]="tools= plans"
  [tools/tp_plan]="tools/tp_plan tools= plans sim"
  [tools/tp_run]="tools/tp_run tools= plans sim runtime kernels"
)

unit_of() {  # sets unit to the deepest unit holding path $1 (empty when it is in none of our folders)
  local p=$1
  unit=""
  while [[ $p == */* ]]; do
    p=${p%/*}
    if [[ -n ${allowed[$p]+x} ]]; then
      unit=$p
      return
    fi
  done
}

may_include() {  # unit $1 may include a header of unit $2
  local entry
  for entry in ${allowed[$1]}; do
    if [[ $entry == *= ]]; then
      [[ $2 == "${entry%=}" ]] && return 0
    elif [[ $2 == "$entry" || $2 == "$entry"/* ]]; then
      return 0
    fi
  done
  return 1
}

bad=0
files=0
for folder in plans kernels sim runtime tools; do
  [[ -d $folder ]] || continue
  files=$((files + $(find "$folder" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)))
  # Every line `#include "X"` (any spacing) of the folder's sources, as FILE:LINE:X.
  while IFS=: read -r file line target; do
    unit_of "$target"
    to=$unit
    unit_of "$file"
    if [[ $target != */* ]]; then
      echo "$file:$line: #include \"$target\": not written from the repository root (FOLDER/...)" >&2
      bad=$((bad + 1))
    elif [[ -z $to ]] || ! may_include "$unit" "$to"; then
      echo "$file:$line: #include \"$target\": $unit/ may include only $(sed 's/=/ (top)/g; s/ /, /g; s/, (top)/ (top)/g' <<< "${allowed[$unit]}")" >&2
      bad=$((bad + 1))
    fi
  done < <(grep -rnE --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
             '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$folder" |
             sed -E 's/^([^:]*):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1:\2:\3/')
done

if ((files == 0)); then
  echo "layers_test: no sources found under $root" >&2
  exit 1
fi
if ((bad > 0)); then
  echo "layers_test: $bad include(s) cross the dependency order ($files files scanned)" >&2
  exit 1
fi
echo "layers_test: $files files, every include within its layer"
