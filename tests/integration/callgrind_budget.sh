#!/usr/bin/env bash
# callgrind_budget.sh BENCH_GATE: the callgrind gate's fixed ceilings (bench/baseline/callgrind-budget.json) keep
# their teeth: a count over its item's budget fails `bench_gate --compare` even when the baseline was updated to
# that count in the same change, `--update` refuses to write such a baseline (and leaves the file as it was), an
# item without a budget fails, and counts within budget and tolerance pass. No valgrind: the counts are given.
set -euo pipefail
gate="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "callgrind_budget: $*" >&2; exit 1; }
cat > "$tmp/callgrind-budget.json" << 'JSON'
{"format": "tptune-callgrind-budget", "budget": {"a": 1000, "b": 2000}}
JSON
counts() { printf '{"counts": {"a": %s, "b": %s}, "environment": {}}\n' "$1" "$2" > "$tmp/counts.json"; }

# Within budget: the baseline is written (the budget beside it is found by default), and the same counts pass.
counts 900 1500
"$gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" --update > /dev/null || fail "--update within budget failed"
"$gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" > "$tmp/out" || fail "counts equal to the baseline failed"
cp "$tmp/callgrind.json" "$tmp/before.json"

# 1001 > 1000: --update refuses and leaves the baseline alone.
counts 1001 1500
if "$gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" --update > "$tmp/out"; then
  fail "--update wrote a baseline over the budget"
fi
grep -q "a .*FAIL: over its budget of 1000" "$tmp/out" || fail "--update did not name the item over budget: $(cat "$tmp/out")"
cmp -s "$tmp/callgrind.json" "$tmp/before.json" || fail "--update over budget changed the baseline"

# A baseline moved to the same counts by hand (the same change updating it) still fails, within tolerance or not.
printf '{"format": "tptune-callgrind-baseline", "tolerance_pct": 3.0, "counts": {"a": 1001, "b": 1500}}\n' \
  > "$tmp/callgrind.json"
if "$gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" > "$tmp/out"; then
  fail "a count over its budget passed against a baseline moved with it"
fi
grep -q "FAIL: over its budget" "$tmp/out" || fail "no budget failure reported: $(cat "$tmp/out")"

# An item without a budget fails.
printf '{"counts": {"a": 900, "b": 1500, "c": 5}, "environment": {}}\n' > "$tmp/counts.json"
printf '{"format": "tptune-callgrind-baseline", "tolerance_pct": 3.0, "counts": {"a": 900, "b": 1500, "c": 5}}\n' \
  > "$tmp/callgrind.json"
if "$gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" > "$tmp/out"; then fail "an item without a budget passed"; fi
grep -q "c .*FAIL: no budget" "$tmp/out" || fail "the item without a budget was not named: $(cat "$tmp/out")"

# A missing budget file is an error (exit 2), not a pass.
rm "$tmp/callgrind-budget.json"
rc=0
"$gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a missing budget file gave exit $rc, expected 2"
echo "callgrind_budget: over-budget counts fail the gate and --update, whatever the baseline says"
