#!/usr/bin/env bash
# version_stamp.sh TP_PLAN TP_RUN EXAMPLES_DIR [BENCH_GATE]: `--version` of both tools, and the version stamp
# (plans/util/version.h) in every JSON file the tools write.
#   - `tp-plan --version` and `tp-run --version` print one line "TOOL X.Y.Z (git HASH)" and exit 0, the same
#     version and hash for both tools;
#   - each output carries "tptune": {"version": X.Y.Z, "git_hash": HASH} with that version and hash: tp-plan simulate
#     (--json FILE and -, --trace), search (--json FILE and -, --trace), explain (--json FILE and -), check --update's
#     baseline and check --format json, accuracy --json, calibrate's YAML; tp-run profile --out, verify --json, bench
#     memory --json; the callgrind baseline bench_gate --update writes (bench/update-baseline.sh), when BENCH_GATE
#     is given;
#   - a check baseline without the stamp (written before it existed) still reads: check passes against it (with a
#     note that it may come from another tptune: tests/integration/tp_plan_check_test.sh).
# Runs tp-run as one process (no mpirun). Needs python3 to read the JSON (exit 77, skipped, without it).
set -euo pipefail
tp_plan="$1"; tp_run="$2"; examples="$3"; bench_gate="${4:-}"
command -v python3 > /dev/null || { echo "version_stamp: python3 not found: skipped"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "version_stamp: FAIL: $*" >&2; exit 1; }

# --version: "TOOL X.Y.Z (git HASH)", HASH a short hex hash (or "unknown" outside a git checkout).
line_re='^(tp-plan|tp-run) ([0-9]+\.[0-9]+\.[0-9]+) \(git ([0-9a-f]{4,40}|unknown)\)$'
plan_line="$("$tp_plan" --version)" || fail "tp-plan --version exited $?"
run_line="$("$tp_run" --version)" || fail "tp-run --version exited $?"
echo "$plan_line"; echo "$run_line"
[[ "$plan_line" =~ $line_re ]] && [ "${BASH_REMATCH[1]}" = tp-plan ] || fail "tp-plan --version printed '$plan_line'"
version="${BASH_REMATCH[2]}"; hash="${BASH_REMATCH[3]}"
[ "$run_line" = "tp-run $version (git $hash)" ] || fail "tp-run --version printed '$run_line', tp-plan '$plan_line'"

# stamped FILE [json|yaml]: the file carries the stamp of this build.
stamped() {
  python3 - "$1" "${2:-json}" "$version" "$hash" << 'EOF' || fail "$1: no stamp {\"version\": \"$version\", \"git_hash\": \"$hash\"}"
import json, re, sys
path, kind, version, git_hash = sys.argv[1:]
text = open(path).read()
if kind == "json":
    stamp = json.loads(text).get("tptune")
else:  # the calibration YAML: one flow-mapping line `tptune: {version: "X", git_hash: "H"}`
    m = re.search(r'^tptune: \{version: "([^"]*)", git_hash: "([^"]*)"\}$', text, re.M)
    stamp = {"version": m.group(1), "git_hash": m.group(2)} if m else None
if stamp != {"version": version, "git_hash": git_hash}:
    print(f"{path}: tptune = {stamp!r}", file=sys.stderr)
    sys.exit(1)
EOF
  echo "  stamped: $(basename "$1")"
}

cfg="$examples/tiny-llama.yaml"
# tp-plan
"$tp_plan" simulate "$cfg" --preset sequence_parallel --tp 2 --json "$tmp/simulate.json" --trace "$tmp/simulate-trace.json" \
  > /dev/null
stamped "$tmp/simulate.json"; stamped "$tmp/simulate-trace.json"
"$tp_plan" simulate "$cfg" --preset sequence_parallel --tp 2 --json - > "$tmp/simulate-stdout.json"
stamped "$tmp/simulate-stdout.json"
"$tp_plan" search "$cfg" --quiet --json "$tmp/search.json" --trace "$tmp/search-trace.json" > /dev/null
stamped "$tmp/search.json"; stamped "$tmp/search-trace.json"
"$tp_plan" search "$cfg" --quiet --json - > "$tmp/search-stdout.json"
stamped "$tmp/search-stdout.json"
"$tp_plan" explain "$cfg" --preset vanilla --tp 2 --json "$tmp/explain.json" > /dev/null
stamped "$tmp/explain.json"
"$tp_plan" explain "$cfg" --preset vanilla --tp 2 --json - > "$tmp/explain-stdout.json"
stamped "$tmp/explain-stdout.json"
"$tp_plan" check "$cfg" --preset vanilla --tp 2 --baseline "$tmp/baseline.json" --update > /dev/null
stamped "$tmp/baseline.json"
"$tp_plan" check "$cfg" --preset vanilla --tp 2 --baseline "$tmp/baseline.json" > /dev/null ||
  fail "check against its own stamped baseline"
"$tp_plan" check "$cfg" --preset vanilla --tp 2 --baseline "$tmp/baseline.json" --format json > "$tmp/check.json" ||
  fail "check --format json against its own stamped baseline"
stamped "$tmp/check.json"
# A baseline written before the stamp existed: the same file without it still reads, and passes.
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); del j["tptune"]; json.dump(j, open(sys.argv[2], "w"))' \
  "$tmp/baseline.json" "$tmp/baseline-unstamped.json"
"$tp_plan" check "$cfg" --preset vanilla --tp 2 --baseline "$tmp/baseline-unstamped.json" > /dev/null ||
  fail "check against a baseline without the stamp"
echo "  a baseline without the stamp reads"

# tp-run (one process), and the tp-plan commands that read its profile
"$tp_run" profile "$cfg" --preset vanilla --tp 1 --warmup 0 --iters 1 --quiet --out "$tmp/profile.json" > /dev/null
stamped "$tmp/profile.json"
"$tp_run" verify "$cfg" --preset vanilla --tp 1 --quiet --json "$tmp/verify.json" > /dev/null
stamped "$tmp/verify.json"
"$tp_run" bench memory --warmup 0 --iters 1 --min-bytes 1K --max-bytes 4K --json "$tmp/bench.json" > /dev/null
stamped "$tmp/bench.json"
"$tp_plan" accuracy "$tmp/profile.json" --json "$tmp/accuracy.json" > /dev/null
stamped "$tmp/accuracy.json"
"$tp_plan" calibrate "$tmp/profile.json" --out "$tmp/calibration.yaml" > /dev/null
stamped "$tmp/calibration.yaml" yaml
"$tp_plan" accuracy "$tmp/profile.json" --calibration "$tmp/calibration.yaml" > /dev/null ||
  fail "a stamped calibration does not read"
echo "  a stamped calibration reads"

# The callgrind baseline (bench/update-baseline.sh writes it through bench_gate --compare ... --update).
if [ -n "$bench_gate" ]; then
  echo '{"counts": {"lower_405b": 1}, "environment": {"build_type": "Release"}}' > "$tmp/counts.json"
  "$bench_gate" --compare "$tmp/callgrind.json" "$tmp/counts.json" --update \
    --budget "$(dirname "$0")/../../bench/baseline/callgrind-budget.json" > /dev/null 2>&1 ||
    fail "bench_gate --update exited $?"
  stamped "$tmp/callgrind.json"
fi
echo "version_stamp: every output carries tptune $version (git $hash)"
