#!/bin/sh
# published_accuracy.sh TP_PLAN SOURCE_DIR: `tp-plan accuracy --published profiles/published` against the committed
# figures, tests/integration/published_accuracy.json: fails (naming each figure) when a source's mean or max |error|
# of tokens/s or its peak-memory max |error| grew by more than 0.5 percentage points, its Kendall tau fell by more
# than 0.01, or fewer of its runs are predicted. Regenerate the committed file after a change of the model that moves
# the figures on purpose (and say so in the commit):
#   tp-plan accuracy --published profiles/published --json tests/integration/published_accuracy.json
# Then: the check fails on a committed file with better figures; and every predicted run's tokens/s equals what
# `tp-plan simulate CONFIG --preset P --tp N --float8 F [--async-tp] [--ac-layers K] [--cp C] [--pp N --pp-schedule S
# --pp-microbatch-size B]` prints for its config (the
# record's runs are predicted as simulate resolves them). Needs python3 for that part (skipped without it).
# While the GPU preset the record's H100 runs name (h100-sxm-hbm2e-500w) is not in sim/gpus/, the record is read
# from a copy that names h100-sxm, and the committed figures are those of that copy.
set -u
tp_plan=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "published_accuracy: $*" >&2; exit 1; }
record=$src/profiles/published
committed=$src/tests/integration/published_accuracy.json
if [ ! -f "$src/sim/gpus/h100-sxm-hbm2e-500w.yaml" ]; then
  echo "published_accuracy: no h100-sxm-hbm2e-500w preset: the record's H100 runs on h100-sxm"
  mkdir "$dir/record"
  for f in "$record"/*.yaml; do
    sed 's/h100-sxm-hbm2e-500w/h100-sxm/' "$f" > "$dir/record/$(basename "$f")"
  done
  record=$dir/record
fi

"$tp_plan" accuracy --published "$record" --json "$dir/now.json" --fail-above-committed "$committed" > "$dir/out.txt" \
  2> "$dir/err.txt" || { cat "$dir/out.txt" "$dir/err.txt"; fail "worse than $committed (above)"; }
grep -q "^overall: " "$dir/out.txt" || fail "no overall line in the text report"
grep -q "^no figure worse than " "$dir/out.txt" || fail "no 'no figure worse' line"

# The check can fail: a committed mean |error| of 0 for a source is beaten by any real figure.
cat > "$dir/better.json" << 'EOF'
{"sources": [{"id": "torchtitan-h100-202412", "runs": 9, "mean_abs_error": 0.0, "max_abs_error": 0.0,
              "kendall_tau": 1.0, "memory_max_abs_error": 0.0}]}
EOF
"$tp_plan" accuracy --published "$record" --fail-above-committed "$dir/better.json" > /dev/null 2> "$dir/better.err"
[ $? -eq 1 ] || fail "--fail-above-committed passed a committed file with better figures"
grep -q "worse than committed: torchtitan-h100-202412: tokens/s mean |error| .*, committed 0.0% (more than 0.5 points worse)" \
  "$dir/better.err" || { cat "$dir/better.err"; fail "no line naming the worse mean |error|"; }

command -v python3 > /dev/null || { echo "published_accuracy: python3 not found: simulate comparison skipped"; exit 0; }
# Every predicted run: its config (the three lines under `config:`) and its plan as simulate's options.
python3 - "$record" "$dir" << 'EOF' || fail "could not extract the runs' configs"
import os, re, sys
record, out = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(record)):
    if not name.endswith(".yaml"):
        continue
    lines = open(os.path.join(record, name)).read().split("\n")
    run = None
    for i, line in enumerate(lines):
        m = re.match(r"  - id: (\S+)$", line)
        if m:
            run = m.group(1)
        if line == "    config:" and run:
            cfg = "\n".join(l[6:] for l in lines[i + 1:i + 4]) + "\n"
            plan = re.match(r"    plan: \{(.*)\}$", lines[i + 4]).group(1)
            kv = dict(p.strip().split(": ") for p in plan.split(","))
            args = ["--preset", kv.get("preset", "sequence_parallel"), "--tp", kv["tp"], "--float8", kv["float8"]]
            if kv.get("async_tp") == "true":
                args.append("--async-tp")
            if "ac_layers" in kv:
                args += ["--ac-layers", kv["ac_layers"]]
            if "cp" in kv:
                args += ["--cp", kv["cp"]]
            if "pp" in kv:
                args += ["--pp", kv["pp"], "--pp-schedule", kv.get("pp_schedule", "1F1B"),
                         "--pp-microbatch-size", kv.get("pp_microbatch_size", "1")]
            open(os.path.join(out, run + ".yaml"), "w").write(cfg)
            open(os.path.join(out, run + ".args"), "w").write(" ".join(args) + "\n")
            run = None
EOF
python3 - "$dir/now.json" > "$dir/predicted.txt" << 'EOF' || fail "could not read the accuracy JSON"
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print(r["id"], repr(r["predicted_tokens_per_second_per_gpu"]))
EOF
n=0
while read -r id predicted; do
  [ -f "$dir/$id.args" ] || fail "run $id: its config was not extracted"
  # shellcheck disable=SC2046
  "$tp_plan" simulate "$dir/$id.yaml" $(cat "$dir/$id.args") --json "$dir/$id.json" > /dev/null ||
    fail "run $id: tp-plan simulate $(cat "$dir/$id.args") failed"
  simulated=$(python3 -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['tokens_per_second_per_gpu']))" \
    "$dir/$id.json")
  [ "$simulated" = "$predicted" ] || fail "run $id: accuracy predicted $predicted tokens/s, simulate $simulated"
  n=$((n + 1))
done < "$dir/predicted.txt"
[ "$n" -ge 20 ] || fail "only $n runs compared"
echo "published_accuracy: figures not worse than committed; $n runs predicted as tp-plan simulate predicts them"
