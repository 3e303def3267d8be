#!/usr/bin/env bash
# update-baseline.sh [BUILD_DIR]: rewrites bench/baseline/callgrind.json with this tree's instruction counts (the
# median of 3 runs per item). Do it on purpose, when a change makes tptune slower or faster and that is intended,
# and say why in the commit message; the counts are for the CI image (Debian 12, g++ 12, Release build).
set -euo pipefail
exec "$(dirname "$0")/callgrind-gate.sh" "$@" --runs 3 --update
