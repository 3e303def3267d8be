#!/usr/bin/env bash
# trace_said.sh TP_PLAN EXAMPLES: `tp-plan simulate --trace F` and `tp-plan search --trace F` each print
# `wrote F (N events)`, and N is the number of events in F.
set -uo pipefail
tp_plan="$1"; examples="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME ARGS...: runs tp-plan ARGS... --trace $tmp/NAME.json
  local name="$1"; shift
  local file="$tmp/$name.json" out said events
  if ! out="$("$tp_plan" "$@" --trace "$file" 2>&1)"; then
    echo "FAIL $name: tp-plan $* --trace $file failed:"; echo "$out"; fail=1; return
  fi
  said="$(printf '%s\n' "$out" | sed -n "s|^wrote $file (\([0-9]*\) events)\$|\1|p")"
  events="$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["traceEvents"]))' "$file")"
  if [ -z "$said" ] || [ "$said" != "$events" ]; then
    echo "FAIL $name: printed '${said:-no wrote line}', the file has $events events"; fail=1; return
  fi
  echo "ok $name: wrote $file ($said events)"
}
check simulate simulate "$examples/tiny-llama.yaml" --preset sequence_parallel --tp 2
check search search "$examples/tiny-llama.yaml" --top 1 --quiet
exit $fail
