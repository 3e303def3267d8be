#!/usr/bin/env bash
# regenerate.sh [BUILD_DIR]: rewrites tests/golden/expected/*.json from BUILD_DIR's tp-plan (default: build; build
# tp-plan and golden_diff first: cmake --build build --target tp-plan golden_diff) and prints what moved against the
# previous files (the same summary as check.sh). Golden files of cases no longer in cases.txt are deleted.
# Commit the result together with the change that moved the predictions, and say why in the message.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-$here/../../build}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$here/run-cases.sh" "$build/tools/tp-plan" "$tmp"
mkdir -p "$here/expected"
"$build/tests/golden/golden_diff" "$here/expected" "$tmp" "$here/cases.txt" --report-only
rm -f "$here/expected"/*.json
cp "$tmp"/*.json "$here/expected/"
echo "golden: wrote $(ls "$tmp" | wc -l) files to tests/golden/expected/"
