#!/usr/bin/env python3
"""bench/torch_compare.py OUTDIR: GEMM and attention TFLOP/s of tptune's CUDA backend side by side with PyTorch.

Reads what bench/gpu-check.sh wrote into OUTDIR:
  gemm-*.json     `tp-run bench gemm --backend cuda --dtype bf16|fp8_e4m3` (shapes m, n, k; x W^T layout)
  profile-*.json  `tp-run profile --backend cuda` (attention ops: batch, seq, heads, kv heads, head_dim, direction)
and times PyTorch on the same shapes and dtypes on this GPU:
  bf16 GEMM       torch.matmul(A (m, k), B (n, k).t())                     -> bf16
  fp8_e4m3 GEMM   torch._scaled_mm(A e4m3 (m, k), B e4m3 (n, k).t(), unit scales, out_dtype=bf16)
                  (B.t() is column-major, what _scaled_mm requires: the same "TN" cuBLASLt call tptune makes)
  attention       F.scaled_dot_product_attention(q, k, v, is_causal=True) on (b, h, s, d) bf16, grouped-query heads
                  (enable_gqa), forward, and backward alone (the forward graph built outside the timed region)
Each time is the median of 20 runs after 5 warm-up runs, CUDA events around one call. TFLOP/s use the same FLOP count
for both sides (2mnk for GEMMs; the Program's causal attention FLOPs from the profile). ratio = tptune / torch
TFLOP/s (above 1: tptune faster). Writes OUTDIR/compare.md (the table) and OUTDIR/compare.json.
"""
import glob
import json
import os
import sys

import torch
import torch.nn.functional as F


def median_us(fn, warmup=5, iters=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    return times[len(times) // 2]


def torch_gemm_us(m, n, k, dtype):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if dtype == "bf16":
        return median_us(lambda: torch.matmul(a, b.t()))
    if dtype == "fp8_e4m3":
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")
        return median_us(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    raise ValueError(dtype)


def sdpa(q, k, v):
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:  # torch < 2.5: expand the kv heads
        rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              is_causal=True)


def torch_attention_us(b, s, h, kvh, d, backward):
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    k = torch.randn(b, kvh, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    v = torch.randn(b, kvh, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    if not backward:
        with torch.no_grad():
            return median_us(lambda: sdpa(q, k, v))
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    times = []
    for i in range(25):
        o = sdpa(q, k, v)
        torch.cuda.synchronize()
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        o.backward(g)
        en.record()
        torch.cuda.synchronize()
        if i >= 5:
            times.append(st.elapsed_time(en) * 1e3)
        q.grad = k.grad = v.grad = None
    times.sort()
    return times[len(times) // 2]


def main():
    out = sys.argv[1]
    rows = []
    seen = set()
    for path in sorted(glob.glob(os.path.join(out, "gemm-*.json"))):
        with open(path) as f:
            j = json.load(f)
        for r in j["results"]:
            key = ("gemm", r["m"], r["n"], r["k"], r["dtype"])
            if key in seen:
                continue
            seen.add(key)
            flops = 2.0 * r["m"] * r["n"] * r["k"]
            ours = r["time_us"]["median"]
            theirs = torch_gemm_us(r["m"], r["n"], r["k"], r["dtype"])
            rows.append({"op": "gemm", "shape": f'{r["m"]}x{r["n"]}x{r["k"]}', "dtype": r["dtype"],
                         "torch_call": "torch.matmul" if r["dtype"] == "bf16" else "torch._scaled_mm",
                         "tptune_us": ours, "torch_us": theirs, "flops": flops, "source": os.path.basename(path)})
    for path in sorted(glob.glob(os.path.join(out, "profile-*.json"))):
        with open(path) as f:
            j = json.load(f)
        for op in j["ops"]:
            if op["kind"] != "attention" or not isinstance(op.get("time_us"), dict):
                continue
            a = op["op"]
            key = ("attention", a["batch"], a["seq"], a["n_heads"], a["n_kv_heads"], a["head_dim"], a["backward"])
            if key in seen:
                continue
            seen.add(key)
            theirs = torch_attention_us(a["batch"], a["seq"], a["n_heads"], a["n_kv_heads"], a["head_dim"],
                                        a["backward"])
            rows.append({"op": "attention " + ("bwd" if a["backward"] else "fwd"),
                         "shape": f'b{a["batch"]} s{a["seq"]} h{a["n_heads"]}/{a["n_kv_heads"]} d{a["head_dim"]}',
                         "dtype": "bf16", "torch_call": "F.scaled_dot_product_attention",
                         "tptune_us": op["time_us"]["median"], "torch_us": theirs, "flops": float(a["flops"]),
                         "source": os.path.basename(path)})
    lines = [f"# tptune CUDA backend vs PyTorch {torch.__version__} on {torch.cuda.get_device_name()}", "",
             "| op | shape | dtype | torch call | tptune us | torch us | tptune TFLOP/s | torch TFLOP/s | ratio |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        r["tptune_tflops"] = r["flops"] / r["tptune_us"] / 1e6 if r["tptune_us"] > 0 else 0.0
        r["torch_tflops"] = r["flops"] / r["torch_us"] / 1e6 if r["torch_us"] > 0 else 0.0
        r["ratio"] = r["tptune_tflops"] / r["torch_tflops"] if r["torch_tflops"] > 0 else 0.0
        lines.append(f'| {r["op"]} | {r["shape"]} | {r["dtype"]} | {r["torch_call"]} | {r["tptune_us"]:.1f} | '
                     f'{r["torch_us"]:.1f} | {r["tptune_tflops"]:.1f} | {r["torch_tflops"]:.1f} | {r["ratio"]:.2f} |')
    with open(os.path.join(out, "compare.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
