#!/usr/bin/env bash
# pipeline_outputs.sh TP_PLAN EXAMPLES: the outputs of a pipeline-parallel plan end to end (tp 2 x pp 2, 1F1B and
# Interleaved1F1B, on tiny-llama's 4 GPUs): `simulate --report` writes well-formed XHTML with a row per pp rank and a
# box per action of the schedule; `--trace` writes a thread per pp rank and an event per action, and says how many;
# `--trace --measured` is refused (a profile's ops have no counterpart among a pipeline's actions); `explain --json`
# writes the microbatch Program's collectives and the pipeline: its stages' modules, each rank's actions and each stage
# Program's transfers;
# `tp-plan check` passes against its own --update and fails (exit 1) against a pipeline with a faster step, naming
# the stages' actions that moved, and lists pp 2 -> 1 among the setup changes; simulate's JSON has top ops and each pp
# rank's parameters; `search --report --trace` of a pipeline-parallel winner draw its pipeline.
set -uo pipefail
tp_plan="$1"; examples="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
for schedule in 1F1B Interleaved1F1B; do
  args=("$examples/tiny-llama.yaml" --preset sequence_parallel --tp 2 --pp 2 --pp-schedule "$schedule")
  if ! out="$("$tp_plan" simulate "${args[@]}" --json "$tmp/s.json" --report "$tmp/r.html" 2>&1)"; then
    echo "FAIL $schedule: simulate --report failed:"; echo "$out"; fail=1; continue
  fi
  if ! python3 - "$tmp/s.json" "$tmp/r.html" <<'PY'; then
import json, sys, xml.dom.minidom
rep = json.load(open(sys.argv[1]))["pipeline"]
html = open(sys.argv[2]).read()
xml.dom.minidom.parseString(html)  # well-formed: the report is XHTML
whole = json.load(open(sys.argv[1]))
pp = rep["pp_degree"]
# Issue 37: a pipeline's top ops are its critical rank's (never empty); per_gpu is the largest pp rank's count.
params = whole["parameters"]
if not whole["top_ops"] or len(params["per_pp_rank"]) != pp or params["per_gpu"] != max(params["per_pp_rank"]):
    sys.exit(f"top ops {len(whole['top_ops'])}, parameters {params}")
rows, ranks = html.count('class="pp-row"'), html.count('<tr class="pp-rank">')
# 1F1B and Interleaved1F1B run one F and one B of every stage for every microbatch.
actions = html.count('class="pp-action"')
want = 2 * len(rep["stage_blocks"]) * rep["microbatches"]
if rows != pp or ranks != pp or actions != want:
    sys.exit(f"rows {rows}, table rows {ranks} (pp {pp}); action boxes {actions}, expected {want}")
PY
    echo "FAIL $schedule: the report's pipeline section"; fail=1; continue
  fi
  echo "ok $schedule: --report"
  if ! out="$("$tp_plan" simulate "${args[@]}" --trace "$tmp/t.json" 2>&1)"; then
    echo "FAIL $schedule: simulate --trace failed:"; echo "$out"; fail=1; continue
  fi
  said="$(printf '%s\n' "$out" | sed -n "s|^wrote $tmp/t.json (\([0-9]*\) events)\$|\1|p")"
  if ! python3 - "$tmp/s.json" "$tmp/t.json" "$said" <<'PY'; then
import json, sys
rep = json.load(open(sys.argv[1]))["pipeline"]
events = json.load(open(sys.argv[2]))["traceEvents"]
threads = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
actions = [e for e in events if e["ph"] == "X"]
want = 2 * len(rep["stage_blocks"]) * rep["microbatches"]
if threads != set(range(rep["pp_degree"])) or len(actions) != want or sys.argv[3] != str(len(events)):
    sys.exit(f"threads {sorted(threads)}, {len(actions)} action events (expected {want}), said {sys.argv[3]!r} of {len(events)}")
if any(e["ts"] + e["dur"] > rep["schedule_ms"] * 1e3 * (1 + 1e-9) for e in actions):
    sys.exit("an action ends after the schedule's pass")
PY
    echo "FAIL $schedule: the trace"; fail=1; continue
  fi
  echo "ok $schedule: --trace ($said events)"
  if ! "$tp_plan" explain "${args[@]}" --json "$tmp/e.json" > "$tmp/e.txt" 2>&1; then
    echo "FAIL $schedule: explain --json failed:"; cat "$tmp/e.txt"; fail=1; continue
  fi
  if ! python3 - "$tmp/s.json" "$tmp/e.json" <<'PY'; then
import json, sys
rep = json.load(open(sys.argv[1]))["pipeline"]
e = json.load(open(sys.argv[2]))
p = e["pipeline"]
modules = [m for s in p["stages"] for m in s["modules"]]
blocks = sum(rep["stage_blocks"])
if modules != ["tok_embeddings"] + [f"layers.{b}" for b in range(blocks)] + ["norm", "output"]:
    sys.exit(f"modules {modules}")
actions = sum(len(r["actions"]) for r in p["ranks"])
if len(p["ranks"]) != rep["pp_degree"] or actions != 2 * len(rep["stage_blocks"]) * rep["microbatches"]:
    sys.exit(f"{len(p['ranks'])} ranks, {actions} actions")
if not e["collectives"] or "trust" not in e:
    sys.exit("no collectives or trust beside the pipeline")
# Each stage Program's transfers: every boundary of neighbouring stages, an activation forward and its gradient back,
# each sent by one stage and received by the other.
n = len(rep["stage_blocks"])
sends = sorted((t["stage"], t["to"]["stage"], t["phase"]) for t in p["transfers"] if "to" in t)
recvs = sorted((t["from"]["stage"], t["stage"], t["phase"]) for t in p["transfers"] if "from" in t)
want = sorted([(s, s + 1, "forward") for s in range(n - 1)] + [(s + 1, s, "backward") for s in range(n - 1)])
if sends != want or recvs != want or any(t["bytes"] != rep["p2p_bytes"] for t in p["transfers"]):
    sys.exit(f"transfers {p['transfers']}")
PY
    echo "FAIL $schedule: explain --json"; fail=1; continue
  fi
  echo "ok $schedule: explain --json"
done
# A pipeline's profile with an op tp-run did not run ("measured": false, as its optimizer phase's records are): the
# pipeline plan is refused for what it is, not for that record's missing median (issue 37, class 14).
printf '{"format": "tptune-profile", "version": 1, "environment": {"backend": "cpu", "device": "x", "ranks": 4},\n' \
  > "$tmp/profile.json"
printf ' "pipeline": {"pp": 2, "schedule": "1F1B", "microbatches": 1, "microbatch_size": 1},\n' >> "$tmp/profile.json"
printf ' "ops": [{"name": "tok_embeddings.fwd", "time_us": {"median": 1}},\n' >> "$tmp/profile.json"
printf '         {"name": "optimizer.adamw", "measured": false, "time_us": null}]}\n' >> "$tmp/profile.json"
err="$("$tp_plan" simulate "$examples/tiny-llama.yaml" --preset vanilla --tp 2 --pp 2 --trace "$tmp/m.json" \
  --measured "$tmp/profile.json" 2>&1 >/dev/null)"; rc=$?
if [ "$rc" -ne 2 ] || ! printf '%s\n' "$err" | grep -q "^tp-plan: error: option --pp: pp_degree 2: --measured aligns"; then
  echo "FAIL --measured with a pp plan: exit $rc: $err"; fail=1
else
  echo "ok --measured with a pp plan refused"
fi
base=("$examples/tiny-llama.yaml" --preset sequence_parallel --tp 2 --pp 2 --local-batch-size 4)
"$tp_plan" check "${base[@]}" --pp-microbatch-size 2 --baseline "$tmp/b.json" --update > /dev/null ||
  { echo "FAIL check --update of a pp plan"; fail=1; }
"$tp_plan" check "${base[@]}" --pp-microbatch-size 2 --baseline "$tmp/b.json" > "$tmp/same.txt"; rc=$?
[ "$rc" -eq 0 ] && grep -q "^tp-plan check: PASS" "$tmp/same.txt" && echo "ok check: the same pipeline passes" ||
  { echo "FAIL check of the same pipeline: exit $rc"; cat "$tmp/same.txt"; fail=1; }
# 4 microbatches of 1 in place of 2 of 2: tiny-llama's stages cost about the same per microbatch at either size, so
# the pass takes longer.
"$tp_plan" check "${base[@]}" --pp-microbatch-size 1 --baseline "$tmp/b.json" > "$tmp/slower.txt"; rc=$?
if [ "$rc" -eq 1 ] && grep -q "^tp-plan check: FAIL" "$tmp/slower.txt" && grep -q "pipeline_bubble" "$tmp/slower.txt" &&
  grep -q "stage 1 \[backward\]" "$tmp/slower.txt"; then
  echo "ok check: a slower pipeline fails, its stages' actions listed"
else
  echo "FAIL check of a slower pipeline: exit $rc"; cat "$tmp/slower.txt"; fail=1
fi
# The same plan without the pipeline (pp 1, dp_shard 2): the pipeline's change is among the setup changes (issue 37).
"$tp_plan" check "$examples/tiny-llama.yaml" --preset sequence_parallel --tp 2 --local-batch-size 4 \
  --baseline "$tmp/b.json" > "$tmp/nopp.txt"; rc=$?
if grep -q "^  setup changed:.* pp 2 (1F1B, 1 stage per rank, 2 microbatches of 2) -> 1" "$tmp/nopp.txt"; then
  echo "ok check: pp 2 -> 1 is a setup change"
else
  echo "FAIL check against a pp baseline without pp: exit $rc"; cat "$tmp/nopp.txt"; fail=1
fi
if out="$("$tp_plan" search "$examples/tiny-llama.yaml" --quiet --pp 2 --top 1 --report "$tmp/s.html" \
  --trace "$tmp/st.json" 2>&1)" && printf '%s\n' "$out" | grep -q "^winner: .* pp 2 (" &&
  python3 - "$tmp/s.html" "$tmp/st.json" <<'PY'; then
import json, sys, xml.dom.minidom
html = open(sys.argv[1]).read()
xml.dom.minidom.parseString(html)
events = json.load(open(sys.argv[2]))["traceEvents"]
boxes = html.count('class="pp-action"')
actions = sum(1 for e in events if e["ph"] == "X")
rows = html.count('class="pp-row"')
threads = sum(1 for e in events if e["ph"] == "M" and e["name"] == "thread_name")
if boxes == 0 or boxes != actions or rows != 2 or threads != 2:
    sys.exit(f"{boxes} boxes, {actions} trace events, {rows} rows, {threads} threads")
PY
  echo "ok search: a pp winner's --report and --trace"
else
  echo "FAIL search --report --trace of a pp winner:"; printf '%s\n' "$out" | tail -3; fail=1
fi
exit $fail
