#!/usr/bin/env bash
# gpu_check_rehearsal.sh SOURCE_DIR BUILD_DIR WORK_DIR: bench/gpu-check.sh rehearsed on the CPU backend (issue 27),
# so that the device check's mechanics are tested on every commit before a GPU is lent:
#   1. `--backend cpu` runs every step, passes, and leaves exactly the two files a lease brings back (the archive
#      and the summary); the archive holds every step's log and result (4 verify, 8 Profile and 5 bench JSON, the
#      simulator's accuracy report of the profiles), and the summary a row per step with its time and the device
#      estimate, then issue 39's goals, each met, NOT MET or not measured (bench/gpu_goals.py).
#   2. a step that hangs is ended at its limit (GPU_CHECK_STEP_LIMIT), recorded as TIMEOUT, and the run still
#      finishes, writes its two files and exits non-zero: one hang cannot eat the lease; with the run's budget spent
#      (GPU_CHECK_BUDGET_S), the optional steps do not start.
#   3. `tp-plan accuracy` reads the archive's 8 profiles (one process at the local shapes of tp 1 and 8, and the
#      405B-shaped ones at tp 8 in bf16 and float8, eager and compiled; the rehearsal's are 8B-shaped: no step
#      wall, collectives not run): a step row each of its compute-only wall, every skipped collective seeded, and the
#      per-class and per-kind errors (issue 38).
set -euo pipefail
src="$1" build="$2" work="$3"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "gpu-check rehearsal: $*" >&2; exit 1; }

# 1. the rehearsal
out="$work/out"
"$src/bench/gpu-check.sh" --backend cpu "$out" "$build" >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "exit $?"; }
[ "$(ls "$out" | sort | tr '\n' ' ')" = "gpu-check.tar.gz summary.md " ] || fail "OUTDIR holds $(ls "$out"), expected the archive and the summary only"
tar -tzf "$out/gpu-check.tar.gz" >"$work/listing.txt"
for f in environment.txt summary.md cuda-tests.txt configs/llama3-70b-2layers.yaml \
  verify-tiny-{llama,gpt}-{none,tensorwise}.json profile-{8b,70b}-tp{1,8}.json gemm-{8b,70b}-{bf16,fp8_e4m3}.json \
  memory-bound-8b.json profile-405b-tp8-{none,tensorwise}{,-compile}.json accuracy.json goals.md steps.csv; do
  grep -qx "gpu-check/$f" "$work/listing.txt" || fail "the archive lacks $f"
done
rows="$(grep -c '^| [^s-].* | ok | [0-9.]* | [0-9]* |' "$out/summary.md" || true)"
[ "$rows" = 20 ] || { cat "$out/summary.md"; fail "$rows steps ok with a time, expected 20 (environment, tests, 4 verify, 4 profiles, 4 gemm, memory-bound, 4 405B-shaped profiles, accuracy)"; }
grep -q '^| PyTorch comparison | skipped |' "$out/summary.md" || fail "no skipped PyTorch row"
# The goals as the CPU run gives them: no device (tests skipped), the rehearsal's layer moves < 64 MiB per op, and
# the float8 share and the compile comparison computed from its profiles (CPU times: only the mechanics are tested).
# (CUDA built: its tests skip on this machine; not built, as in the sanitizer build: there are none to run.)
grep -Eq "^\| \[cuda\] tests: 0 failed \| not measured \| no (CUDA device visible|\[cuda\] test binary)" "$out/summary.md" ||
  { cat "$out/summary.md"; fail "the tests goal is not 'not measured' without a device"; }
grep -q "^| every memory-bound kernel >= 70 % of a copy | not measured | no op moves >= 64 MiB" "$out/summary.md" ||
  { cat "$out/summary.md"; fail "the memory-bound goal is judged on ops under 64 MiB"; }
grep -Eq "^\| float8 amax \+ casts <= 5 % of the 405B tp 8 float8 step \| (met|NOT MET|met [a-z]+ only) \| eager [0-9.]+ of [0-9.]+ ms = [0-9.]+ %; compiled " "$out/summary.md" ||
  { cat "$out/summary.md"; fail "no float8 share of the eager and compiled profiles"; }
grep -Eq "^\| compiled faster than eager where the simulator says so \| (met|NOT MET) \| .*float8 none: predicted -[0-9.]+ ms, measured [-+][0-9.]+ ms.*float8 tensorwise: predicted -" "$out/summary.md" ||
  { cat "$out/summary.md"; fail "no predicted gain of the compiled profiles"; }
[ "$(tail -1 "$work/run.txt")" = PASS ] || fail "the summary is not printed last"
grep -q '^CUDA runtime: \|^CUDA runtime: not linked' "$work/run.txt" || fail "no CUDA runtime version line"

# 3. (cheap, so before the hang) tp-plan accuracy on the profiles the check made
tar -xzf "$out/gpu-check.tar.gz" -C "$work"
"$build/tools/tp-plan" accuracy "$work"/gpu-check/profile-{8b,70b}-tp{1,8}.json \
  "$work"/gpu-check/profile-405b-tp8-{none,tensorwise}{,-compile}.json --json "$work/accuracy.json" \
  >"$work/accuracy.txt" 2>&1 || { cat "$work/accuracy.txt"; fail "tp-plan accuracy refused the check's profiles"; }
python3 - "$work/accuracy.json" <<'PY' || { cat "$work/accuracy.txt"; fail "tp-plan accuracy's report of the check's profiles"; }
import json, sys
r = json.load(open(sys.argv[1]))
tps = [s.get("local_shapes_of_tp") for s in r["steps"]]
assert tps == [1, 8, 1, 8, 8, 8, 8, 8], tps
assert all(s["unseeded_collectives"] == 0 for s in r["steps"]), "a skipped collective not seeded"
assert all(s["measured_ms"] > 0 and s["predicted_ms"] == s["predicted_compute_ms"] for s in r["steps"])
assert {"gemm", "attention", "memory_bound"} <= set(r["per_class"]), r["per_class"].keys()
assert "collective" not in r["per_class"], "a collective measured on one process"
assert {"elementwise", "optimizer"} <= set(r["per_memory_kind"]), r["per_memory_kind"].keys()
PY
[ "$(grep -c '(local shapes on 1 GPU: compute only)' "$work/accuracy.txt")" = 8 ] || { cat "$work/accuracy.txt"; fail "accuracy's text lacks the 8 compute-only step rows"; }

# 2. a hanging step: a tp-run that hangs in verify, under a 2 s limit per step
fake="$work/fake-build"
mkdir -p "$fake/tools"
printf '#!/bin/sh\n[ "$1" = verify ] && exec sleep 600\nexit 0\n' >"$fake/tools/tp-run"
chmod +x "$fake/tools/tp-run"
set +e
GPU_CHECK_STEP_LIMIT=2 GPU_CHECK_BUDGET_S=1 timeout 120 "$src/bench/gpu-check.sh" --backend cpu "$work/out-hang" "$fake" \
  >"$work/hang.txt" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$work/hang.txt"; fail "a hanging step: exit $rc, expected a failure of the check itself"; }
[ "$(grep -c '| TIMEOUT after 2 s |' "$work/out-hang/summary.md")" = 4 ] || { cat "$work/out-hang/summary.md"; fail "the 4 hanging verify steps are not recorded as TIMEOUT"; }
[ -s "$work/out-hang/gpu-check.tar.gz" ] || fail "no archive after a hanging step"
# ... and with the budget spent (GPU_CHECK_BUDGET_S=1 against the hangs' 8 s), the optional steps do not start.
grep -q '^| PyTorch comparison | skipped (time) |' "$work/out-hang/summary.md" ||
  { cat "$work/out-hang/summary.md"; fail "the optional steps started past the run's budget"; }
echo "gpu-check rehearsal: ok ($(grep -c '^| ' "$out/summary.md") summary rows; accuracy read the 8 profiles; hanging steps ended at their limit)"
