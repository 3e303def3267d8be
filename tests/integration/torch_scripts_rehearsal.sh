#!/usr/bin/env bash
# torch_scripts_rehearsal.sh SOURCE_DIR WORK_DIR CHECK_DIR: the PyTorch steps of bench/gpu-check.sh rehearsed on a CPU
# torch, where one is installed (skipped otherwise: torch is no dependency of tptune), so that a lease does not find
# their bugs. CHECK_DIR is the gpu-check rehearsal's extracted archive (its GEMM, profile and memory-bound JSON).
#   1. bench/torch_compare.py (TORCH_COMPARE_DEVICE=cpu: CPU times, the mechanics only) writes a row for every GEMM
#      shape, both attention directions of every profile, and every memory-bound op, with torch's eager time.
#   2. bench/inductor_fusions.py --float8 compiles a small Llama block with torchao-style float8 linears, forward and
#      backward, and names the kernels that cast.
set -euo pipefail
src="$1" work="$2" check="$3"
fail() { echo "torch scripts rehearsal: $*" >&2; exit 1; }
# A torch that runs what the scripts need on the CPU (float8 dtypes, torch._scaled_mm, torch.compile), else skipped.
skip() { echo "no torch in this python3 that runs float8 matmuls and torch.compile on the CPU: skipped"; exit 77; }
python3 - 2>/dev/null <<'PY' || skip
import torch
a = torch.ones(16, 16).to(torch.float8_e4m3fn)
one = torch.tensor(1.0)
torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
import torch._inductor  # noqa: F401
PY
rm -rf "$work"
mkdir -p "$work"
cp "$check"/gemm-*.json "$check"/profile-*.json "$check"/memory-bound-*.json "$work"/

TORCH_COMPARE_DEVICE=cpu python3 "$src/bench/torch_compare.py" "$work" >"$work/compare.txt" 2>&1 ||
  { cat "$work/compare.txt"; fail "torch_compare.py exit $?"; }
python3 - "$work" <<'PY' || { cat "$work/compare.txt"; fail "torch_compare.py's report"; }
import glob, json, os, sys
work = sys.argv[1]
r = json.load(open(os.path.join(work, "compare.json")))
assert r["device"] == "cpu", r["device"]
gemms = len({(x["m"], x["n"], x["k"], x["dtype"])  # each distinct shape once
             for f in glob.glob(os.path.join(work, "gemm-*.json")) for x in json.load(open(f))["results"]})
got = [x for x in r["rows"] if x["op"] == "gemm"]
assert len(got) == gemms and all(x["torch_us"] > 0 for x in got), (len(got), gemms)
att = {x["op"] for x in r["rows"] if x["op"].startswith("attention")}
assert att == {"attention fwd", "attention bwd"}, att
ops = [x["op"] for x in r["memory_bound"]]
for op in ["rmsnorm_fwd", "rmsnorm_bwd", "rope_fwd", "rope_bwd", "residual_add", "swiglu_fwd", "swiglu_bwd",
           "ce_backward", "fp8_amax", "fp8_cast", "adamw", "embedding_fwd", "embedding_bwd"]:
    assert op in ops, (op, ops)
assert all(x["eager_us"] and x["eager_us"] > 0 for x in r["memory_bound"]), "a memory-bound op without torch's time"
PY

python3 "$src/bench/inductor_fusions.py" --out "$work/inductor" --dim 256 --heads 4 --kv-heads 2 --ffn 512 --seq 64 \
  --float8 --device cpu >"$work/inductor.txt" 2>&1 || { cat "$work/inductor.txt"; fail "inductor_fusions.py exit $?"; }
md="$work/inductor/inductor-fusions.md"
grep -q '^| forward | `cpp_fused_.*| .*cast_fp8 cast' "$md" || { cat "$md"; fail "no forward kernel that casts to float8"; }
grep -q '^| backward ([0-9]*) | `cpp_fused_.*| .*cast_fp8 cast' "$md" || { cat "$md"; fail "no backward kernel that casts to float8"; }
echo PASS
