#!/usr/bin/env bash
# export_round_trip.sh TP_PLAN CONFIGS_DIR: a search winner written with --out-plan reads back (issue 21, items 1, 3).
#   For a torchtitan-0.3 winner (enable_sp off) and a DTensor-family winner on two nodes:
#   - the plan file keeps the entries of its framework's modules (0.3: attention.wqkv and lm_head);
#   - `simulate CONFIG --plan best.yaml` gives the search's step time, tokens/s and peak memory exactly (JSON);
#   - `explain CONFIG --plan best.yaml` and `export --format torchtitan|python|torchtitan-toml` accept it;
#   - the 0.3 vanilla winner exports with sequence parallel off, without a "closest" NOTE; the two-node winner's
#     torchrun line starts 2 nodes x 8 ranks with a c10d rendezvous; every script passes `bash -n`.
set -uo pipefail
tp_plan="$1"; configs="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# same_numbers SEARCH_JSON SIM_JSON: top[0] of the search equals the simulation, field for field.
same_numbers() {
  python3 - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["top"][0]
m = json.load(open(sys.argv[2]))
bad = [k for k in ("step_time_ms", "tokens_per_second_per_gpu", "peak_memory_gib")
       if k not in m or s[k] != m[k]]
for k in bad:
    print(f"  {k}: search {s.get(k)} vs simulate {m.get(k)}")
sys.exit(1 if bad else 0)
PY
}

round_trip() {
  local name="$1" cfg="$2"
  local d="$tmp/$name"; mkdir -p "$d"
  if ! "$tp_plan" search "$cfg" --quiet --top 3 --out-plan "$d/best.yaml" --json "$d/search.json" >"$d/search.txt" 2>&1; then
    fail "$name: search"; cat "$d/search.txt"; return
  fi
  if "$tp_plan" simulate "$cfg" --plan "$d/best.yaml" --json "$d/sim.json" >"$d/sim.txt" 2>&1 &&
     same_numbers "$d/search.json" "$d/sim.json"; then
    ok "$name: simulate --plan best.yaml gives the search's numbers"
  else
    fail "$name: simulate --plan best.yaml"; cat "$d/sim.txt" "$d/best.yaml"
  fi
  if "$tp_plan" explain "$cfg" --plan "$d/best.yaml" >"$d/explain.txt" 2>&1; then ok "$name: explain"
  else fail "$name: explain"; cat "$d/explain.txt"; fi
  for f in torchtitan python torchtitan-toml; do
    if "$tp_plan" export "$d/best.yaml" --config "$cfg" --format "$f" -o "$d/export.$f" >"$d/export.txt" 2>&1; then
      ok "$name: export --format $f"
    else
      fail "$name: export --format $f"; cat "$d/export.txt"
    fi
  done
  if bash -n "$d/export.torchtitan" 2>"$d/bash.txt"; then ok "$name: bash -n"; else fail "$name: bash -n"; cat "$d/bash.txt"; fi
  if python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$d/export.python"; then ok "$name: python parses"
  else fail "$name: python parses"; fi
}

# expect_in FILE REGEX WHAT / expect_not_in FILE REGEX WHAT
expect_in() { if grep -Eq -- "$2" "$1"; then ok "$3"; else fail "$3: no /$2/ in $1"; cat "$1"; fi; }
expect_not_in() { if grep -Eq -- "$2" "$1"; then fail "$3: /$2/ in $1"; cat "$1"; else ok "$3"; fi; }

round_trip tt03 "$configs/tt03_vanilla_search.yaml"
d="$tmp/tt03"
expect_in "$d/best.yaml" '^framework: torchtitan-0.3$' "tt03: the plan file states its framework"
expect_in "$d/best.yaml" '^  layers\.\*\.attention\.wqkv: \{style: colwise' "tt03: the plan file keeps wqkv"
expect_in "$d/best.yaml" '^  lm_head: \{style: colwise' "tt03: the plan file keeps lm_head"
expect_in "$d/export.torchtitan" '--parallelism.no-enable-sequence-parallel' "tt03: vanilla exports with sequence parallel off"
expect_not_in "$d/export.torchtitan" '--parallelism.enable-sequence-parallel' "tt03: vanilla never exports sequence parallel on"
expect_not_in "$d/export.torchtitan" 'neither of torchtitan|closest' "tt03: no closest-switch NOTE"
expect_in "$d/export.torchtitan" '^torchrun --nnodes 1 --nproc-per-node 8 -m torchtitan.train|nproc-per-node 8 -m' "tt03: one node of 8 ranks"
expect_in "$d/export.python" '"layers\.\*\.attention\.wqkv": ColwiseParallel\(\)' "tt03: python plan names wqkv"

round_trip dtensor2 "$configs/dtensor_search_2nodes.yaml"
d="$tmp/dtensor2"
expect_in "$d/export.torchtitan" 'torchrun --nnodes 2 --nproc-per-node 8' "dtensor2: 2 nodes x 8 ranks"
expect_in "$d/export.torchtitan" '--rdzv-backend c10d --rdzv-endpoint "\$\{MASTER_ADDR:\?' "dtensor2: c10d rendezvous at MASTER_ADDR"
expect_in "$d/export.torchtitan" '--rdzv-id ' "dtensor2: a rendezvous id"
dp=$(grep -Eo 'data-parallel-shard-degree [0-9]+' "$d/export.torchtitan" | grep -Eo '[0-9]+$')
tp=$(grep -Eo 'tensor-parallel-degree [0-9]+' "$d/export.torchtitan" | grep -Eo '[0-9]+$')
if [ -n "$dp" ] && [ -n "$tp" ] && [ $((dp * tp)) -eq 16 ]; then ok "dtensor2: tp $tp x dp_shard $dp = 16 ranks"
else fail "dtensor2: tp '$tp' x dp_shard '$dp' is not the 16 ranks torchrun starts"; fi
# The script runs torchrun (a stand-in that prints its arguments) with the rendezvous at $MASTER_ADDR:$MASTER_PORT,
# and without MASTER_ADDR stops before torchrun (sh's ${VAR:?}), naming the variable.
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "torchrun $*"\n' >"$tmp/bin/torchrun"; chmod +x "$tmp/bin/torchrun"
if out=$(cd "$d" && MASTER_ADDR=10.1.2.3 PATH="$tmp/bin:$PATH" sh "$d/export.torchtitan" 2>&1) &&
   printf '%s\n' "$out" | grep -q -- '--rdzv-endpoint 10.1.2.3:29500 --rdzv-id tptune'; then
  ok "dtensor2: torchrun gets the rendezvous at MASTER_ADDR:29500"
else
  fail "dtensor2: running the script with MASTER_ADDR: $out"
fi
if out=$(cd "$d" && env -u MASTER_ADDR PATH="$tmp/bin:$PATH" sh "$d/export.torchtitan" 2>&1); then
  fail "dtensor2: the script ran without MASTER_ADDR: $out"
else
  case "$out" in *"set MASTER_ADDR"*) ok "dtensor2: the script refuses to start without MASTER_ADDR" ;;
    *) fail "dtensor2: without MASTER_ADDR: $out" ;; esac
fi

# A mixture of experts (issue 42 item 5): the Qwen3 30B-A3B example searched over its default ep degrees (1, 2, 4, 8)
# at tp 2, full AC, local batch 1 (2 does not fit 80 GB beside the caching allocator's reserve), no float8 (32
# candidates): the winner's ep reaches the plan file, simulate's numbers, explain and the torchtitan-toml and python
# exports (--format torchtitan refuses MoE models).
examples="$(dirname "$configs")/../../examples"
d="$tmp/moe"; mkdir -p "$d"
if "$tp_plan" search "$examples/qwen3-30b-a3b-h100.yaml" --tp 2 --ac full --local-batch-size 1 --float8 none --top 3 \
     --out-plan "$d/best.yaml" --json "$d/search.json" >"$d/search.txt" 2>&1; then
  ok "moe: search"
  expect_in "$d/search.txt" '^winner: tp 2 x dp 4, ep [248] \(efsdp [1-4]\)' "moe: the winner line names its ep"
  ep=$(grep -Eo '^ep_degree: [0-9]+' "$d/best.yaml" | grep -Eo '[0-9]+$')
  if [ -n "$ep" ] && [ "$ep" -gt 1 ]; then ok "moe: the plan file states ep_degree $ep"
  else fail "moe: no ep_degree above 1 in the plan file"; cat "$d/best.yaml"; fi
  if "$tp_plan" simulate "$examples/qwen3-30b-a3b-h100.yaml" --plan "$d/best.yaml" --json "$d/sim.json" >"$d/sim.txt" 2>&1 &&
     same_numbers "$d/search.json" "$d/sim.json"; then ok "moe: simulate --plan best.yaml gives the search's numbers"
  else fail "moe: simulate --plan best.yaml"; cat "$d/sim.txt"; fi
  "$tp_plan" explain "$examples/qwen3-30b-a3b-h100.yaml" --plan "$d/best.yaml" >"$d/explain.txt" 2>&1
  expect_in "$d/explain.txt" "^Plan .*, ep $ep, float8" "moe: explain names ep $ep"
  "$tp_plan" export "$d/best.yaml" --config "$examples/qwen3-30b-a3b-h100.yaml" --format torchtitan-toml \
    -o "$d/export.toml" >"$d/export.txt" 2>&1
  expect_in "$d/export.toml" "^expert_parallel_degree = $ep$" "moe: the TOML's expert_parallel_degree"
else
  fail "moe: search"; cat "$d/search.txt"
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
