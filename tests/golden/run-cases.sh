#!/usr/bin/env bash
# run-cases.sh TP_PLAN OUT_DIR: runs every case of tests/golden/cases.txt from the repository root,
#   TP_PLAN simulate CONFIG ARGS... --json OUT_DIR/NAME.json
# Exit 1 when a case fails to run (its error is printed); the outputs of the others are still written.
set -uo pipefail
tp_plan="$1"; out="$2"
cd "$(dirname "$0")/../.."
mkdir -p "$out"
rc=0
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ''|'#'*) continue ;; esac
  name="${line%%:*}"; args="${line#*:}"
  # shellcheck disable=SC2086  # the case's arguments are words
  if ! "$tp_plan" simulate $args --json "$out/$name.json" > /dev/null; then
    echo "golden: case $name failed: tp-plan simulate $(echo $args)" >&2
    rc=1
  fi
done < tests/golden/cases.txt
exit $rc
