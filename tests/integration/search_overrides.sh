#!/bin/sh
# search_overrides.sh TP_PLAN EXAMPLES_DIR: `tp-plan search CONFIG --tp 4` (and the other overrides) searches exactly
# what the config with the same value written into its YAML searches: the same candidates, counts, prune reasons and
# ranking (the JSON compared whole, less timings and the "overrides" record); the JSON and the text say which
# overrides applied; --out-plan writes the winner; bad values give the one-line errors simulate gives; a restriction
# that leaves nothing feasible says which constraint pruned everything. Needs python3 (exit 77, skipped, without it).
set -u
tp_plan=$1
examples=$2
command -v python3 > /dev/null || { echo "search_overrides: python3 not found: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "search_overrides: $*" >&2; exit 1; }
cfg=$examples/llama3-8b-h100.yaml

# edited NAME PYTHON: the example config with its YAML edited by PYTHON (on the text `t`), written to $dir/NAME.yaml.
edited() {
  python3 - "$cfg" "$dir/$1.yaml" "$2" << 'EOF'
import sys
t = open(sys.argv[1]).read()
exec(sys.argv[3])
open(sys.argv[2], "w").write(t)
EOF
}
# search NAME ARGS...: tp-plan search --json into $dir/NAME.json (exit status kept in $dir/NAME.rc).
search() {
  name=$1; shift
  "$tp_plan" search "$@" --quiet --threads 2 --top 1000 --json "$dir/$name.json" > "$dir/$name.txt" 2> "$dir/$name.err"
  echo $? > "$dir/$name.rc"
}
# same A B: the two searches' JSON equal, less what differs between two runs (timings, threads) and the record of
# the overrides; and the same exit status.
same() {
  [ "$(cat "$dir/$1.rc")" = "$(cat "$dir/$2.rc")" ] || fail "$1 exit $(cat "$dir/$1.rc"), $2 exit $(cat "$dir/$2.rc")"
  python3 - "$dir/$1.json" "$dir/$2.json" << 'EOF' || fail "$1 and $2 differ"
import json, sys
def load(p):
    j = json.load(open(p))
    for k in ("elapsed_ms", "threads", "phases_ms", "overrides", "tptune"):
        j.pop(k, None)
    return j
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            print("differs:", k, json.dumps(a.get(k))[:300], "vs", json.dumps(b.get(k))[:300])
    sys.exit(1)
print(sys.argv[1], "==", sys.argv[2], ":", a["evaluated"], "candidates,", a["feasible"], "feasible, winner",
      json.dumps(a["top"][0]["plan"]) if a["top"] else "none")
EOF
}

# --tp 4 == search.tp_degrees: [4] (4 is in the config's list: a restriction).
edited tp4 't = t.replace("tp_degrees: [1, 2, 4, 8]", "tp_degrees: [4]")'
search opt_tp4 "$cfg" --tp 4 --out-plan "$dir/best.yaml"
search yaml_tp4 "$dir/tp4.yaml"
same opt_tp4 yaml_tp4
[ "$(cat "$dir/opt_tp4.rc")" = 0 ] || fail "--tp 4: exit $(cat "$dir/opt_tp4.rc"): $(cat "$dir/opt_tp4.err")"
python3 - "$dir/opt_tp4.json" << 'EOF' || fail "--tp 4: the JSON does not record the override"
import json, sys
j = json.load(open(sys.argv[1]))
o = j["overrides"]
assert o == [{"option": "--tp", "value": "4", "replaces": "search.tp_degrees",
              "was": o[0]["was"]}] and o[0]["was"].startswith("[1, 2, 4, 8] ("), o
assert all(e["plan"]["tp_degree"] == 4 for e in j["top"]), "a candidate other than tp 4 ranked"
EOF
grep -Eq '^  --tp 4 +search.tp_degrees, was \[1, 2, 4, 8\] \(.*llama3-8b-h100.yaml:[0-9]+\)$' "$dir/opt_tp4.txt" ||
  fail "--tp 4: the text does not say which override applied: $(head -5 "$dir/opt_tp4.txt")"
grep -q '^tp_degree: 4$' "$dir/best.yaml" || fail "--out-plan: the winner is not tp 4: $(cat "$dir/best.yaml")"
grep -q "tp-plan simulate $cfg --plan $dir/best.yaml)" "$dir/opt_tp4.txt" || fail "--out-plan: no simulate command"

# A value outside the config's list replaces it: --tp 2 --float8 none == tp_degrees: [2], float8: [none].
edited tp2 't = t.replace("tp_degrees: [1, 2, 4, 8]", "tp_degrees: [2]").replace("float8: [none, tensorwise, rowwise]", "float8: [none]")'
search opt_tp2 "$cfg" --tp 2 --float8 none
search yaml_tp2 "$dir/tp2.yaml"
same opt_tp2 yaml_tp2

# The cluster and training overrides replace the config's values as the edited YAML does.
edited cluster 't = t.replace("gpu: h100-sxm", "gpu: h200").replace("nodes: 1", "nodes: 2").replace("seq_len: 8192", "seq_len: 4096")'
search opt_cluster "$cfg" --gpu h200 --nodes 2 --seq-len 4096 --out-plan "$dir/cluster-best.yaml"
search yaml_cluster "$dir/cluster.yaml"
same opt_cluster yaml_cluster
grep -q "^seq_len: 4096$" "$dir/cluster-best.yaml" || fail "--seq-len 4096: the winner's plan file does not state it"
grep -q -- "--plan $dir/cluster-best.yaml --gpu h200 --nodes 2 --seq-len 4096)" "$dir/opt_cluster.txt" ||
  fail "--out-plan: the simulate command lacks the overrides: $(grep 'wrote the winner' "$dir/opt_cluster.txt")"
# The winner's file, simulated with the printed command (--seq-len is in the file), is the search's winner.
"$tp_plan" simulate "$cfg" --plan "$dir/cluster-best.yaml" --gpu h200 --nodes 2 --json "$dir/winner.json" > /dev/null ||
  fail "simulate of the winner's plan file"
python3 - "$dir/opt_cluster.json" "$dir/winner.json" << 'EOF' || fail "the winner's plan file simulates to another step"
import json, sys
s, w = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert abs(s["top"][0]["step_time_ms"] - w["step_time_ms"]) <= 1e-9 * w["step_time_ms"], (s["top"][0], w["step_time_ms"])
EOF
edited gpn 't = t.replace("gpus_per_node: 8", "gpus_per_node: 4")'
search opt_gpn "$cfg" --gpus-per-node 4 --preset sequence_parallel --ac full --local-batch-size 2
edited gpn_sp 't = t.replace("gpus_per_node: 8", "gpus_per_node: 4").replace("presets: [vanilla, sequence_parallel]", "presets: [sequence_parallel]").replace("activation_checkpointing: [none, selective, full]", "activation_checkpointing: [full]").replace("local_batch_sizes: [1, 2, 4]", "local_batch_sizes: [2]")'
search yaml_gpn "$dir/gpn_sp.yaml"
same opt_gpn yaml_gpn

# --global-batch-size G: simulate's gradient accumulation, as search.global_batch_size with gradient_accumulation.
edited ga 't = t.replace("memory_headroom_gib: 2 ", "memory_headroom_gib: 2\n  global_batch_size: 32\n  gradient_accumulation: true\n ")'
search opt_ga "$cfg" --global-batch-size 32 --async-tp --no-compile
edited ga_async 't = t.replace("memory_headroom_gib: 2 ", "memory_headroom_gib: 2\n  global_batch_size: 32\n  gradient_accumulation: true\n ").replace("async_tp: [false, true]", "async_tp: [true]").replace("activation_checkpointing: none ", "activation_checkpointing: none\n  compile: false\n ")'
search yaml_ga "$dir/ga_async.yaml"
same opt_ga yaml_ga

# --cp N: search.cp_degrees: [N] (context parallelism; the example's 8192 tokens split into 2 x 2 chunks).
edited cp2 't = t.replace("tp_degrees: [1, 2, 4, 8]", "tp_degrees: [1, 2, 4, 8]\n  cp_degrees: [2]")'
search opt_cp2 "$cfg" --cp 2
search yaml_cp2 "$dir/cp2.yaml"
same opt_cp2 yaml_cp2

# --pp N --pp-schedule S --pp-stages-per-rank V: search.pp_degrees, pp_schedules and pp_stages_per_rank (virtual
# stages: Interleaved1F1B with 4 stages on each of 2 ranks), on one preset and tp to keep it short.
edited pp2v4 't = t.replace("tp_degrees: [1, 2, 4, 8]", "tp_degrees: [4]\n  pp_degrees: [2]\n  pp_schedules: [Interleaved1F1B]\n  pp_stages_per_rank: [4]")'
search opt_pp2v4 "$cfg" --tp 4 --pp 2 --pp-schedule Interleaved1F1B --pp-stages-per-rank 4
search yaml_pp2v4 "$dir/pp2v4.yaml"
same opt_pp2v4 yaml_pp2v4
grep -Eq -- '--pp-stages-per-rank 4 +search.pp_stages_per_rank, was \[0\]' "$dir/opt_pp2v4.txt" ||
  fail "--pp-stages-per-rank 4: the text does not record the override: $(head -20 "$dir/opt_pp2v4.txt")"

# --plan FILE: that file's family only (no presets), as search.plans: [FILE] with presets: [] says.
plan=$(dirname "$0")/plans/megatron_no_toggles.yaml
plan=$(cd "$(dirname "$plan")" && pwd)/$(basename "$plan")
edited plan "t = t.replace('presets: [vanilla, sequence_parallel]', 'presets: []\n  plans: [$plan]')"
search opt_plan "$cfg" --plan "$plan" --tp 8
search yaml_plan "$dir/plan.yaml" --tp 8
same opt_plan yaml_plan

# --framework: the config lists tensorwise, which torchtitan 0.3 has not: an error naming the option and the line.
search tt_bad "$cfg" --framework torchtitan-0.3
[ "$(cat "$dir/tt_bad.rc")" = 2 ] && [ "$(wc -l < "$dir/tt_bad.err")" = 1 ] &&
  grep -Eq '^tp-plan: error: --framework torchtitan-0.3: .*llama3-8b-h100.yaml:[0-9]+: search.float8 lists tensorwise' \
    "$dir/tt_bad.err" || fail "--framework torchtitan-0.3: $(cat "$dir/tt_bad.err")"
edited tt 't = t.replace("float8: [none, tensorwise, rowwise]", "float8: [rowwise]").replace("  loss_parallel: [false, true]\n", "").replace("search:\n", "search:\n  framework: torchtitan-0.3\n")'
search opt_tt "$cfg" --framework torchtitan-0.3 --float8 rowwise --loss-parallel
search yaml_tt "$dir/tt.yaml"
same opt_tt yaml_tt

# A restriction that leaves nothing feasible: exit 1, and the text says which constraint pruned every candidate.
search tp3 "$cfg" --tp 3
[ "$(cat "$dir/tp3.rc")" = 1 ] || fail "--tp 3: exit $(cat "$dir/tp3.rc"), expected 1 (nothing fits)"
grep -Eq 'tp does not divide the world size' "$dir/tp3.txt" && grep -q 'no candidate fits' "$dir/tp3.txt" &&
  grep -q -- '--tp 3' "$dir/tp3.txt" || fail "--tp 3: the text does not say why: $(cat "$dir/tp3.txt")"

# Bad values: the one line simulate prints, word for word.
for bad in "--tp 0" "--float8 bf8" "--ac some" "--framework megatron" "--nodes 0" "--gpus-per-node 2000" \
  "--gpu h1000" "--seq-len 0" "--local-batch-size 0" "--framework torchtitan-0.3 --no-loss-parallel" \
  "--nodes 65536 --gpus-per-node 1024"; do
  # shellcheck disable=SC2086 # the options are words
  "$tp_plan" simulate "$cfg" --preset vanilla $bad > /dev/null 2> "$dir/sim.err"
  sim_rc=$?
  # shellcheck disable=SC2086
  "$tp_plan" search "$cfg" --preset vanilla $bad --quiet > "$dir/search.out" 2> "$dir/search.err"
  search_rc=$?
  echo "$bad: $(cat "$dir/search.err")"
  [ "$sim_rc" = 2 ] && [ "$search_rc" = 2 ] || fail "$bad: exit $sim_rc (simulate), $search_rc (search)"
  [ "$(wc -l < "$dir/search.err")" = 1 ] && [ ! -s "$dir/search.out" ] || fail "$bad: not one line"
  cmp -s "$dir/sim.err" "$dir/search.err" || fail "$bad: simulate said '$(cat "$dir/sim.err")'"
done
# The options that are not a restriction of the space (and --ep on this dense model): refused, naming the option.
for bad in "--dp-shard 2" "--ac-layers 4" "--loss-chunks 4" "--cp-rotate alltoall" "--no-cp-load-balance" "--ep 2"; do
  # shellcheck disable=SC2086
  "$tp_plan" search "$cfg" $bad --quiet > "$dir/search.out" 2> "$dir/search.err"
  rc=$?
  echo "$bad: $(cat "$dir/search.err")"
  opt=${bad%% *}
  [ "$rc" = 2 ] && [ "$(wc -l < "$dir/search.err")" = 1 ] && grep -q "^tp-plan: error: $opt: " "$dir/search.err" ||
    fail "$bad: exit $rc"
done
# explain and simulate take the cluster overrides too: 2 nodes x 8 at tp 8 is dp_shard 2.
"$tp_plan" simulate "$cfg" --preset sequence_parallel --tp 8 --nodes 2 --seq-len 4096 > "$dir/sim.txt" ||
  fail "simulate --nodes 2"
grep -Eq '^  dp_shard +2 ' "$dir/sim.txt" && grep -Eq '^  training.seq_len +4096 +option --seq-len' "$dir/sim.txt" ||
  fail "simulate --nodes 2 --seq-len 4096: $(grep -A20 'effective values' "$dir/sim.txt")"
echo "search_overrides: ok"
