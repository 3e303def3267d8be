#!/usr/bin/env bash
# tp_plan_check_test.sh TP_PLAN EXAMPLES_DIR: `tp-plan check` end to end, as a user's CI runs it.
#   pass           --update writes the baseline; the same plan then passes (exit 0)
#   slowdown       vanilla instead of sequence_parallel (8B, full AC): step time +35 % (217.0 -> 293.5 ms), exit 1, the diff names ops that moved
#   tolerance      the same change within --max-slowdown 40% --max-memory-growth 90% (memory +66 %): exit 0
#   memory growth  no activation checkpointing instead of full: faster but +41 % memory, exit 1
#   same as simulate  a cpu-device config with --hf-config: check's step time is simulate's, to the last digit (check
#                  ignored --hf-config and the device preset's cost parameters: 12.59 ms vs 2.82 ms, issue 21 item 7)
#   bad input      missing baseline, malformed JSON, a baseline without step_time_ms, a bad percentage: exit 2 with
#                  one line naming the file (or option) and what was expected
set -uo pipefail
tp_plan="$1"; examples="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cfg="$examples/llama3-8b-h100.yaml"  # one node: no DP traffic hides what the plans change
failures=0

# expect NAME RC REGEX ARGS...: tp-plan ARGS must exit with RC and print something matching REGEX.
expect() {
  local name="$1" want="$2" regex="$3"; shift 3
  local out rc
  out=$("$tp_plan" "$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
    echo "FAIL: $name: exit $rc (expected $want), output should match /$regex/:"
    printf '%s\n' "$out"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

b="$tmp/baseline.json"
expect "update writes the baseline" 0 "wrote .*baseline.json: step time" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac full --baseline "$b" --update
expect "same plan passes" 0 "^tp-plan check: PASS" check "$cfg" --preset sequence_parallel --tp 8 --ac full --baseline "$b"
expect "slowdown fails" 1 "step time \(ms\) .* FAIL" check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b"
expect "slowdown diff names the ops" 1 "ops that moved most.*" check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b"
expect "slowdown within tolerance passes" 0 "^tp-plan check: PASS" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --max-slowdown 40% --max-memory-growth 90%
expect "memory growth fails" 1 "peak memory \(GiB\) .* FAIL" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac none --baseline "$b"
expect "memory growth: step time is better" 1 "step time \(ms\) .* ok \(better\)" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac none --baseline "$b"
expect "missing baseline" 2 "^tp-plan: error: .*nope.json: no such file \(expected a check baseline JSON file\); .*--update" \
  check "$cfg" --preset sequence_parallel --baseline "$tmp/nope.json"
printf '{"format": "tptune-check-baseline",\n "step_time_ms": }\n' > "$tmp/malformed.json"
expect "malformed baseline" 2 "^tp-plan: error: .*malformed.json:2: invalid JSON \(expected a tptune-check-baseline file\)" \
  check "$cfg" --preset sequence_parallel --baseline "$tmp/malformed.json"
grep -v '"step_time_ms"' "$b" > "$tmp/incomplete.json"
expect "baseline without step_time_ms" 2 "^tp-plan: error: .*incomplete.json: step_time_ms: missing \(expected a number" \
  check "$cfg" --preset sequence_parallel --baseline "$tmp/incomplete.json"
expect "bad percentage" 2 "^tp-plan: error: --max-slowdown 2x: expected a percentage" \
  check "$cfg" --preset sequence_parallel --baseline "$b" --max-slowdown 2x
[ "$(wc -l < <("$tp_plan" check "$cfg" --preset sequence_parallel --baseline "$tmp/malformed.json" 2>&1))" -eq 1 ] ||
  { echo "FAIL: the malformed-baseline error is not one line"; failures=$((failures + 1)); }
# check predicts the step simulate predicts: same config (a cpu device, whose preset has its own cost parameters),
# same --hf-config model, same plan. Both JSON files print the double the same way (nlohmann's shortest round trip).
sed 's/gpu: h100-sxm/gpu: cpu/' "$examples/tiny-llama.yaml" > "$tmp/cpu.yaml"
plan=(--hf-config "$examples/hf/llama3-8b/config.json" --preset sequence_parallel --tp 2)
"$tp_plan" check "$tmp/cpu.yaml" "${plan[@]}" --baseline "$tmp/cpu-baseline.json" --update > /dev/null
check_ms=$(grep -o '"step_time_ms": *[0-9.e+-]*' "$tmp/cpu-baseline.json" | sed 's/.*: *//')
sim_ms=$("$tp_plan" simulate "$tmp/cpu.yaml" "${plan[@]}" --json - | grep -o '"step_time_ms": *[0-9.e+-]*' | sed 's/.*: *//')
if [ -n "$check_ms" ] && [ "$check_ms" = "$sim_ms" ]; then
  echo "ok: check's step time is simulate's ($check_ms ms)"
else
  echo "FAIL: check predicts '$check_ms' ms, simulate '$sim_ms' ms for the same config, --hf-config and plan"
  failures=$((failures + 1))
fi
exit $((failures > 0))
