#!/usr/bin/env bash
# pp_profile_calibrate.sh "MPIRUN..." TP_RUN TP_PLAN CONFIG PLAN: `tp-run profile` of a pipeline plan (pp 2 at np 2)
# writes each rank's schedule and the p2p between the pp ranks; `tp-plan calibrate` fits a p2p curve (group of 2) from
# it; `tp-plan accuracy` predicts its step with simulate's pipeline and lists each pp rank, predicted and measured.
set -euo pipefail
read -r -a mpirun <<< "$1"
tp_run="$2" tp_plan="$3" config="$4" plan="$5"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "pp_profile_calibrate: $*" >&2; exit 1; }
has() {  # has TEXT REGEX WHAT
  grep -Eq -- "$2" <<< "$1" || { printf '%s\n' "$1" >&2; fail "$3: expected /$2/"; }
}

out="$("${mpirun[@]}" -np 2 "$tp_run" profile "$config" --plan "$plan" --tp 1 --local-batch-size 4 --warmup 1 --iters 3 \
        --quiet --out "$tmp/pp.json" 2>&1)" || { printf '%s\n' "$out" >&2; fail "tp-run profile failed"; }
has "$out" "^tp-run profile: pp 2 x tp 1, 1F1B, 4 microbatches" "profile summary"
has "$out" "pp rank 1: busy [0-9.]+ us, ends at" "per-rank line"
has "$out" "p2p 0 -> 1: [0-9]+ bytes in" "p2p line"

cal="$("$tp_plan" calibrate "$tmp/pp.json" --out "$tmp/cal.yaml" 2>&1)" || { printf '%s\n' "$cal" >&2; fail "calibrate failed"; }
has "$cal" "^  p2p +2 +[0-9.]+ +[0-9.]+ +3 " "the fitted p2p curve (3 sizes)"
has "$(cat "$tmp/cal.yaml")" "collective: p2p, ranks: 2" "the calibration file's p2p curve"

acc="$("$tp_plan" accuracy "$tmp/pp.json" --calibration "$tmp/cal.yaml" 2>&1)" || { printf '%s\n' "$acc" >&2; fail "accuracy failed"; }
has "$acc" "pp 2 1F1B mb 4" "the pipeline's plan label"
has "$acc" "pp rank 0: busy [0-9.]+ ms predicted, [0-9.]+ measured; ends at" "pp rank 0"
has "$acc" "pp rank 1: busy [0-9.]+ ms predicted, [0-9.]+ measured; ends at" "pp rank 1"
echo "pp_profile_calibrate: OK"
