#!/usr/bin/env bash
# check.sh [BUILD_DIR]: the golden prediction suite. Runs every case of tests/golden/cases.txt with BUILD_DIR's
# tp-plan (default: build) and compares the predictions with the committed tests/golden/expected/*.json:
# fails when any number moved by more than 1e-9 relative, a string changed, or a case was added or removed without
# regenerating; prints which case, which number, old -> new, relative change. Registered in ctest as
# "golden: predictions". To accept a change: tests/golden/regenerate.sh, and commit the result with the change.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-$here/../../build}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run_rc=0
"$here/run-cases.sh" "$build/tools/tp-plan" "$tmp" || run_rc=$?
"$build/tests/golden/golden_diff" "$here/expected" "$tmp" "$here/cases.txt"
exit $run_rc
