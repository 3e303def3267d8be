#!/usr/bin/env bash
# tp_plan_check_test.sh TP_PLAN EXAMPLES_DIR: `tp-plan check` end to end, as a user's CI runs it.
#   pass           --update writes the baseline; the same plan then passes (exit 0)
#   slowdown       vanilla instead of sequence_parallel (8B, full AC): step time +35 % (217.0 -> 293.5 ms), exit 1, the diff names ops that moved
#   tolerance      the same change within --max-slowdown 70% --max-memory-growth 90% (memory +66 %): exit 0
#   memory growth  no activation checkpointing instead of full: faster but +41 % memory, exit 1
#   same as simulate  a cpu-device config with --hf-config: check's step time is simulate's, to the last digit (check
#                  ignored --hf-config and the device preset's cost parameters: 12.59 ms vs 2.82 ms, issue 21 item 7)
#   units          tolerances in percent: the verdict says "slower by 56.87 % (limit 2 %)"; a bad percentage names
#                  the unit
#   formats        --format markdown (a pull-request comment: the verdict heading and the metrics table) and json
#                  (the exit status, stamped), with the same exit status as text
#   other tptune   a baseline whose stamp names another version, and one without the stamp: the same plan passes
#                  (exit 0) with a note naming both builds; a slower plan exits 4, not 1, saying the change may come
#                  from tptune
#   bad input      missing baseline, malformed JSON, a baseline without step_time_ms, a bad percentage or --format:
#                  exit 2 with one line naming the file (or option) and what was expected
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
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --max-slowdown 70% --max-memory-growth 90%
expect "memory growth fails" 1 "peak memory \(GiB\) .* FAIL" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac none --baseline "$b"
expect "memory growth: step time is better" 1 "step time \(ms\) .* ok: faster by [0-9.]+ %" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac none --baseline "$b"
expect "missing baseline" 2 "^tp-plan: error: .*nope.json: no such file \(expected a check baseline JSON file\); .*--update" \
  check "$cfg" --preset sequence_parallel --baseline "$tmp/nope.json"
printf '{"format": "tptune-check-baseline",\n "step_time_ms": }\n' > "$tmp/malformed.json"
expect "malformed baseline" 2 "^tp-plan: error: .*malformed.json:2: invalid JSON \(expected a tptune-check-baseline file\)" \
  check "$cfg" --preset sequence_parallel --baseline "$tmp/malformed.json"
grep -v '"step_time_ms"' "$b" > "$tmp/incomplete.json"
expect "baseline without step_time_ms" 2 "^tp-plan: error: .*incomplete.json: step_time_ms: missing \(expected a number" \
  check "$cfg" --preset sequence_parallel --baseline "$tmp/incomplete.json"
expect "bad percentage" 2 "^tp-plan: error: --max-slowdown 2x: expected a percentage from 0 to 1000 \(5 means 5 %, not 0.05\)" \
  check "$cfg" --preset sequence_parallel --baseline "$b" --max-slowdown 2x
expect "percentage out of range" 2 "^tp-plan: error: --max-memory-growth 1001%: expected a percentage from 0 to 1000" \
  check "$cfg" --preset sequence_parallel --baseline "$b" --max-memory-growth 1001%
expect "bad format" 2 "^tp-plan: error: --format md: expected text, json or markdown" \
  check "$cfg" --preset sequence_parallel --baseline "$b" --format md

# Units: the verdict states the slowdown and its limit in percent (228.85 -> 358.99 ms: 358.99 / 228.85 - 1 = 56.87 %; cuDNN attention, training.sdpa_backend auto).
expect "the verdict in percent" 1 "step time \(ms\) +228.85 +358.99 +\+56.87 %  FAIL: slower by 56.87 % \(limit 2 %\)" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b"
expect "a fractional tolerance prints as written" 1 "^tp-plan check: FAIL against .* \(max slowdown 0.5 %, max memory growth 1 %\)" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --max-slowdown 0.5

# Formats: markdown for a pull-request comment, json for tools; the exit status does not depend on the format.
expect "markdown: verdict heading" 1 "^### tp-plan check: FAIL$" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --format markdown
expect "markdown: the metrics table" 1 "^\| step time \(ms\) \| 228.85 \| 358.99 \| \+56.87 % \| \*\*FAIL\*\*: slower by 56.87 % \(limit 2 %\) \|$" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --format markdown
expect "markdown: the ops that moved" 1 "^\| \`layers\.\*\.attention_norm\.bwd \[backward\]\` \| 4.545 \| 35.465 \| \+30.920 \|$" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --format markdown
expect "markdown: pass" 0 "^### tp-plan check: PASS$" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac full --baseline "$b" --format markdown
expect "json: exit status" 1 '"exit_status": 1,' \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --format json
if command -v python3 > /dev/null; then
  "$tp_plan" check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$b" --format json > "$tmp/result.json"
  if python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["format"] == "tptune-check-result" and j["verdict"] == "FAIL" and j["same_tptune"], j
assert set(j["tptune"]) == {"version", "git_hash"}, j
assert any(o["what"] == "layers.*.attention_norm.bwd [backward]" for o in j["ops_ms"]), j["ops_ms"]' "$tmp/result.json"; then
    echo "ok: json: the verdict, this build's stamp, every moved op"
  else
    echo "FAIL: json result"; failures=$((failures + 1))
  fi
fi

# Another tptune: a baseline stamped with version 0.0.1 (planted), and one without the stamp.
sed 's/"version": "[0-9][0-9.]*"/"version": "0.0.1"/' "$b" > "$tmp/old-version.json"
grep -q '"version": "0.0.1"' "$tmp/old-version.json" || { echo "FAIL: could not plant a version"; failures=$((failures + 1)); }
# The stamp is the object "tptune" (keys are written sorted, so "version": 1 follows it and the JSON stays valid).
sed '/^  "tptune": {$/,/^  },$/d' "$b" > "$tmp/unstamped.json"
! grep -q '"tptune"' "$tmp/unstamped.json" || { echo "FAIL: could not remove the stamp"; failures=$((failures + 1)); }
expect "other version: the same plan passes, with the note" 0 "note: the baseline was written by tptune 0.0.1 \(git [0-9a-f]+\), this is tptune [0-9.]+ \(git [0-9a-f]+\): a change may come from tptune, not from your plan" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac full --baseline "$tmp/old-version.json"
expect "other version: a slower plan exits 4" 4 "^tp-plan check: CHANGED \(baseline from another tptune\) against" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$tmp/old-version.json"
expect "other version: markdown says so" 4 "^> \*\*Baseline from another tptune\*\*: the baseline was written by tptune 0.0.1" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$tmp/old-version.json" --format markdown
expect "other version: json says so" 4 '"exit_status": 4,' \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$tmp/old-version.json" --format json
expect "no stamp: the same plan passes, with the note" 0 "note: the baseline carries no tptune version \(written before versions were stamped\)" \
  check "$cfg" --preset sequence_parallel --tp 8 --ac full --baseline "$tmp/unstamped.json"
expect "no stamp: a slower plan exits 4" 4 "^tp-plan check: CHANGED \(baseline from another tptune\)" \
  check "$cfg" --preset vanilla --tp 8 --ac full --baseline "$tmp/unstamped.json"
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
