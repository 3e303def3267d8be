#!/usr/bin/env bash
# trust_line.sh TP_PLAN: every prediction says how far to trust it (sim/trust.h), in each of its three forms, in the
# text and the JSON of simulate, explain and search.
#   uncalibrated        the h100-sxm preset (no calibration block)
#   calibrated on ...   an inline cluster.gpu spec with a calibration block
#   calibrated by FILE  --calibration FILE
set -euo pipefail
tp_plan="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "trust_line: $*" >&2; exit 1; }
has() {  # has TEXT NEEDLE WHAT
  case "$1" in *"$2"*) ;; *) printf '%s\n' "$1" >&2; fail "$3: expected '$2'";; esac
}

cat > "$tmp/preset.yaml" <<'YAML'
model: {preset: tiny-llama}
training: {seq_len: 256, local_batch_size: 1}
cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 2}
search: {tp_degrees: [1, 2], float8: [none], async_tp: [false]}
YAML
cat > "$tmp/calibrated.yaml" <<'YAML'
model: {preset: tiny-llama}
training: {seq_len: 256, local_batch_size: 1}
cluster:
  nodes: 1
  gpus_per_node: 2
  gpu:
    name: mygpu
    bf16_tflops: 500
    fp16_tflops: 500
    fp8_tflops: 0
    fp32_tflops: 50
    hbm_bandwidth_GBps: 2000
    memory_GiB: 48
    sm_count: 100
    nvlink_bandwidth_GBps: 200
    nvlink_latency_us: 3
    nvswitch: true
    nvls: false
    network_bandwidth_GBps: 25
    network_latency_us: 10
    calibration: {runs: 12, sources: [src-a, src-b], mean_error: 0.04, loso_mean_error: 0.071}
search: {tp_degrees: [1, 2], float8: [none], async_tp: [false]}
YAML
cat > "$tmp/fit.yaml" <<'YAML'
format: tptune-calibration
version: 1
device: h100-sxm
params:
  gemm_efficiency: {value: 0.7, default: 0.84, class: gemm}
YAML

uncal="h100-sxm: uncalibrated (figures of sim/gpus/h100-sxm.yaml, not fitted to measured runs; see docs/calibration.md); Hopper kernels compared with 4 kernel-level sources"
cal="mygpu: calibrated on 12 public runs (2 sources), leave-one-source-out error 7 %"
byfile="h100-sxm: calibrated by $tmp/fit.yaml; Hopper kernels compared with 4 kernel-level sources"

out="$("$tp_plan" simulate "$tmp/preset.yaml" --preset sequence_parallel --tp 2)"
has "$out" "  trust              $uncal" "simulate, preset"
out="$("$tp_plan" simulate "$tmp/calibrated.yaml" --preset sequence_parallel --tp 2)"
has "$out" "  trust              $cal" "simulate, calibration block"
out="$("$tp_plan" simulate "$tmp/preset.yaml" --preset sequence_parallel --tp 2 --calibration "$tmp/fit.yaml")"
has "$out" "  trust              $byfile" "simulate --calibration"
out="$("$tp_plan" simulate "$tmp/calibrated.yaml" --preset sequence_parallel --tp 2 --json -)"
has "$out" '"basis": "preset"' "simulate --json, calibration block"
has "$out" '"loso_mean_error": 0.071' "simulate --json, calibration block"
"$tp_plan" simulate "$tmp/preset.yaml" --preset sequence_parallel --tp 2 --report "$tmp/r.html" > /dev/null
has "$(cat "$tmp/r.html")" "<li>$uncal</li>" "simulate --report"

out="$("$tp_plan" explain "$tmp/calibrated.yaml" --preset sequence_parallel --tp 2)"
has "$out" "trust: $cal" "explain"
out="$("$tp_plan" explain "$tmp/preset.yaml" --preset sequence_parallel --tp 2 --json -)"
has "$out" "\"basis\":\"uncalibrated\"" "explain --json"

out="$("$tp_plan" search "$tmp/preset.yaml" --quiet)"
has "$out" "trust: $uncal" "search"
out="$("$tp_plan" search "$tmp/calibrated.yaml" --quiet --json -)"
has "$out" '"text": "'"$cal"'"' "search --json"
out="$("$tp_plan" search "$tmp/preset.yaml" --quiet --calibration "$tmp/fit.yaml" --report "$tmp/s.html")"
has "$out" "trust: $byfile" "search --calibration"
has "$(cat "$tmp/s.html")" "<li>$byfile</li>" "search --report"
echo "trust_line: ok"
