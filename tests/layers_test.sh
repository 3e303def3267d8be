#!/usr/bin/env bash
# The layer test: every `#include "..."` of the product folders follows the dependency order of the design
# (the design's table "Folders and who may include whom"):
#   plans/   -> plans
#   kernels/ -> kernels
#   sim/     -> sim, plans
#   runtime/ -> runtime, plans, kernels
#   tools/   -> tools, plans, sim, runtime, kernels
# (tests/ and bench/ may include everything, so they are not scanned.) An include that names no folder of ours
# (a system or third-party header in quotes) is refused too: every project include is written from the repository
# root ("plans/language/plan.h"), so that the line says which layer it reaches into.
#
#   tests/layers_test.sh [SOURCE_DIR]     exit 0: no crossing; 1: each crossing as FILE:LINE: ... on stderr
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

allowed() {  # the folders that folder $1 may include
  case $1 in
    plans) echo "plans" ;;
    kernels) echo "kernels" ;;
    sim) echo "sim plans" ;;
    runtime) echo "runtime plans kernels" ;;
    tools) echo "tools plans sim runtime kernels" ;;
  esac
}

bad=0
files=0
for folder in plans kernels sim runtime tools; do
  ok=" $(allowed "$folder") "
  files=$((files + $(find "$folder" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)))
  # Every line `#include "X"` (any spacing) of the folder's sources, as FILE:LINE:X.
  while IFS=: read -r file line target; do
    top=${target%%/*}
    if [[ $target != */* ]]; then
      echo "$file:$line: #include \"$target\": not written from the repository root (FOLDER/...)" >&2
      bad=$((bad + 1))
    elif [[ $ok != *" $top "* ]]; then
      echo "$file:$line: #include \"$target\": $folder/ may include only $(allowed "$folder" | sed 's/ /, /g')" >&2
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
