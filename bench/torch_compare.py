#!/usr/bin/env python3
"""bench/torch_compare.py OUTDIR: tptune's CUDA kernels side by side with PyTorch's, on the same shapes and values.

Reads what bench/gpu-check.sh wrote into OUTDIR:
  gemm-*.json          `tp-run bench gemm --backend cuda --dtype bf16|fp8_e4m3` (shapes m, n, k; x W^T layout)
  profile-*.json       `tp-run profile --backend cuda` (attention ops: batch, seq, heads, kv heads, head_dim)
  memory-bound-*.json  `tp-run bench memory-bound --backend cuda` (one layer's memory-bound ops)
and times PyTorch on the same shapes and dtypes on this GPU, on the same values: bench/bench_data.py is the C++
generator ported bit for bit (runtime/bench_data.h; activations std 1, weights std 0.02, the seed from the JSON):
  bf16 GEMM       torch.matmul(A (m, k), B (n, k).t())                     -> bf16
  fp8_e4m3 GEMM   torch._scaled_mm(A e4m3 (m, k), B e4m3 (n, k).t(), amax-derived scales, out_dtype=bf16)
                  (B.t() is column-major, what _scaled_mm requires: the same "TN" cuBLASLt call tptune makes)
  attention       F.scaled_dot_product_attention(q, k, v, is_causal=True) on (b, h, s, d) bf16, grouped-query heads
                  (enable_gqa), forward, and backward alone (the forward graph built outside the timed region)
  memory-bound    each op as torchtitan writes it, eager and under torch.compile (where it compiles; "n/a" where it
                  does not or the compile budget is spent): F.rms_norm, rope as complex multiplication, a + b,
                  F.silu(a) * b, F.cross_entropy, abs().max(), torchao's tensorwise cast, the fused AdamW step
                  (fp32 gradients: torch's fused AdamW takes one dtype), F.embedding; backward ops time
                  torch.autograd.grad alone (the forward graph built outside the timed region)
Each time is the median of 20 runs after 5 warm-up runs, CUDA events around one call: GEMMs and attention between
synchronizations (as tp-run bench gemm and profile time them), memory-bound ops queued behind a 256 MiB copy with no
synchronization between runs (as tp-run bench memory-bound times them: the device's time with a cold L2).
TFLOP/s use the same FLOP count for both sides (2mnk for GEMMs; the Program's causal attention FLOPs from the
profile); memory-bound ops are compared in GB/s of the bytes tptune's bench counts (runtime/bench_kernels.h), so a
ratio is a ratio of times. ratio = tptune / torch (above 1: tptune faster). Writes OUTDIR/compare.md (the tables)
and OUTDIR/compare.json.
"""
import glob
import json
import os
import sys

import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402  (bench/bench_data.py: the C++ bench data generator, bit for bit)

SEED = 20261204  # runtime/bench_data.h kBenchSeed; a JSON's "data"."seed" replaces it
# cuda on the GPU machine; TORCH_COMPARE_DEVICE=cpu rehearses the script's mechanics (times are then CPU times).
DEVICE = os.environ.get("TORCH_COMPARE_DEVICE", "cuda")


def once_us(fn):
    """us of one call of fn() after the device is idle: CUDA events around it (the CPU rehearsal: the wall clock)."""
    if DEVICE == "cpu":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3


def median_us(fn, warmup=5, iters=20):
    if DEVICE == "cpu":
        warmup, iters = 1, 3
    for _ in range(warmup):
        fn()
    sync()
    times = sorted(once_us(fn) for _ in range(iters))
    return times[len(times) // 2]


_flush = []


def queued_median_us(fn, warmup=5, iters=20):
    """Median us of fn() as tp-run's memory-bound bench times its ops (runtime/bench.h, time_queued_calls): each
    sample issued behind a 256 MiB copy (the L2 flushed, the host ahead of the device), no synchronization between
    samples, the events read at the end. The CPU rehearsal times as median_us does."""
    if DEVICE == "cpu":
        return median_us(fn, warmup, iters)
    if not _flush:
        _flush.append([torch.empty(32 << 20, dtype=torch.float32, device=DEVICE) for _ in range(2)])
    src, dst = _flush[0]
    for _ in range(warmup):
        fn()
    sync()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in events:
        dst.copy_(src)
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in events)
    return times[len(times) // 2]


def sync():
    if DEVICE != "cpu":
        torch.cuda.synchronize()


def device_name():
    return torch.cuda.get_device_name() if DEVICE != "cpu" else "cpu"


def data(name, shape, std, seed, dtype=torch.bfloat16):
    n = 1
    for d in shape:
        n *= d
    return bench_data.values(seed, name, n, std, torch=torch, device=DEVICE).reshape(shape).to(dtype)


def fp8_multiplier(x):
    """torchao's tensorwise e4m3 scale of x (float8_utils.amax_to_scale): 448 / max(amax, 1e-12) in float64, to fp32."""
    return (448.0 / torch.clamp(x.abs().max().to(torch.float64), min=1e-12)).to(torch.float32)


def fp8_cast(x, m):
    """torchao's cast with multiplier m: x.float() * m, saturated, to e4m3 (tp-run's fp8_cast computes the same)."""
    return (x.float() * m).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def fp8_tensorwise(x):
    """amax, multiplier and cast; returns (fp8, torchao's _scale.reciprocal(): real = stored x scale)."""
    m = fp8_multiplier(x)
    return fp8_cast(x, m), m.reciprocal()


def torch_gemm_us(m, n, k, dtype, seed):
    # The same values as tp-run bench gemm: one A and one B sized for the largest shape, of which each shape takes
    # the first m x k and n x k elements (the same prefix of the same generator).
    a = data("A", (m * k,), bench_data.ACTIVATION_STD, seed).reshape(m, k)
    b = data("B", (n * k,), bench_data.WEIGHT_STD, seed).reshape(n, k)
    if dtype == "bf16":
        return median_us(lambda: torch.matmul(a, b.t()))
    if dtype == "fp8_e4m3":
        (a8, sa), (b8, sb) = fp8_tensorwise(a), fp8_tensorwise(b)
        return median_us(lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
    raise ValueError(dtype)


def sdpa(q, k, v):
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:  # torch < 2.5: expand the kv heads
        rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              is_causal=True)


def torch_attention_us(b, s, h, kvh, d, backward):
    q = torch.randn(b, h, s, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=backward)
    k = torch.randn(b, kvh, s, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=backward)
    v = torch.randn(b, kvh, s, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=backward)
    if not backward:
        with torch.no_grad():
            return median_us(lambda: sdpa(q, k, v))
    g = torch.randn(b, h, s, d, device=DEVICE, dtype=torch.bfloat16)
    times = []
    warmup, iters = (5, 20) if DEVICE != "cpu" else (1, 3)
    for i in range(warmup + iters):
        o = sdpa(q, k, v)
        sync()
        us = once_us(lambda: o.backward(g))  # noqa: B023 (called at once)
        if i >= warmup:
            times.append(us)
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
            theirs = torch_gemm_us(r["m"], r["n"], r["k"], r["dtype"], j.get("data", {}).get("seed", SEED))
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
    lines = [f"# tptune CUDA backend vs PyTorch {torch.__version__} on {device_name()}", "",
             "| op | shape | dtype | torch call | tptune us | torch us | tptune TFLOP/s | torch TFLOP/s | ratio |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        r["tptune_tflops"] = r["flops"] / r["tptune_us"] / 1e6 if r["tptune_us"] > 0 else 0.0
        r["torch_tflops"] = r["flops"] / r["torch_us"] / 1e6 if r["torch_us"] > 0 else 0.0
        r["ratio"] = r["tptune_tflops"] / r["torch_tflops"] if r["torch_tflops"] > 0 else 0.0
        lines.append(f'| {r["op"]} | {r["shape"]} | {r["dtype"]} | {r["torch_call"]} | {r["tptune_us"]:.1f} | '
                     f'{r["torch_us"]:.1f} | {r["tptune_tflops"]:.1f} | {r["torch_tflops"]:.1f} | {r["ratio"]:.2f} |')
    memory_rows = []
    for path in sorted(glob.glob(os.path.join(out, "memory-bound-*.json"))):
        with open(path) as f:
            j = json.load(f)
        memory_rows += compare_memory_bound(j, os.path.basename(path))
    if memory_rows:
        lines += ["", "Memory-bound ops (GB/s of the bytes tptune's bench counts; % of the copy tptune measured in the "
                  "same run; ratio = torch time / tptune time, above 1: tptune faster)", "",
                  "| op | tptune GB/s | % of copy | torch eager GB/s | torch compiled GB/s | ratio eager | "
                  "ratio compiled | torch call |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in memory_rows:
            def fmt(v, spec):
                return "n/a" if v is None else format(v, spec)
            lines.append(f'| {r["op"]} | {r["tptune_GBps"]:.0f} | {r["percent_of_copy"]:.0f} | '
                         f'{fmt(r["eager_GBps"], ".0f")} | {fmt(r["compiled_GBps"], ".0f")} | '
                         f'{fmt(r["ratio_eager"], ".2f")} | {fmt(r["ratio_compiled"], ".2f")} | {r["torch_call"]} |')
    with open(os.path.join(out, "compare.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump({"torch": torch.__version__, "device": device_name(), "rows": rows,
                   "memory_bound": memory_rows}, f, indent=1)
    print("\n".join(lines))


COMPILE_BUDGET_S = float(os.environ.get("TORCH_COMPARE_COMPILE_BUDGET_S", "120"))
_compile_spent = [0.0]


def eager_and_compiled_us(fn, args, dy=None):
    """Median us of fn(*args) eager and under torch.compile (None when it fails or the compile budget is spent).
    With dy: the backward alone, torch.autograd.grad of fn(*args) (built once, outside the timed calls) w.r.t. args;
    compiled: the backward of torch.compile(fn)'s graph."""
    def timed(f):
        if dy is None:
            return queued_median_us(lambda: f(*args))
        out = f(*args)
        return queued_median_us(lambda: torch.autograd.grad(out, args, dy, retain_graph=True))
    eager = timed(fn)
    compiled = None
    if _compile_spent[0] < COMPILE_BUDGET_S:
        t0 = time.time()
        try:
            cfn = torch.compile(fn, dynamic=False)
            cfn(*args)
            sync()
            compiled = timed(cfn)
        except Exception as e:  # noqa: BLE001 (an optional comparison: say n/a and go on)
            print(f"torch.compile failed: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        _compile_spent[0] += time.time() - t0
    return eager, compiled


def compare_memory_bound(j, source):
    sh, seed = j["shape"], j.get("data", {}).get("seed", SEED)
    R, D, Fd, V, H, d = sh["rows"], sh["dim"], sh["ffn_dim"], sh["vocab"], sh["heads"], sh["head_dim"]
    bf = torch.bfloat16
    A, W = bench_data.ACTIVATION_STD, bench_data.WEIGHT_STD
    freqs = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=DEVICE, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(R, device=DEVICE, dtype=torch.float32), freqs)
    freqs_cis = torch.polar(torch.ones_like(angles), angles).view(1, R, 1, d // 2)

    def rope(x):  # torchtitan's apply_rotary_emb for one tensor
        xc = torch.view_as_complex(x.float().reshape(1, R, H, d // 2, 2))
        return torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)

    def rms(x, w):
        return F.rms_norm(x, (D,), w, 1e-5)

    cases = {}
    x = data("x", (R, D), A, seed)
    w = torch.ones(D, device=DEVICE, dtype=bf)
    cases["rmsnorm_fwd"] = ("F.rms_norm", lambda: (rms, (x, w)))
    def rms_bwd():
        return rms, (x.clone().requires_grad_(), w.clone().requires_grad_()), data("dy", (R, D), A, seed)
    cases["rmsnorm_bwd"] = ("autograd of F.rms_norm", rms_bwd)
    cases["rope_fwd"] = ("complex multiply (torchtitan)", lambda: (rope, (data("x", (1, R, H, d), A, seed),)))
    def rope_bwd():
        return rope, (data("x", (1, R, H, d), A, seed).requires_grad_(),), data("dy", (1, R, H, d), A, seed)
    cases["rope_bwd"] = ("autograd of the rope", rope_bwd)
    cases["residual_add"] = ("a + b", lambda: (torch.add, (data("a", (R, D), A, seed), data("b", (R, D), A, seed))))
    def swiglu(a, b):
        return F.silu(a) * b
    cases["swiglu_fwd"] = ("F.silu(a) * b", lambda: (swiglu, (data("a", (R, Fd), A, seed), data("b", (R, Fd), A, seed))))
    def swiglu_bwd():
        a, b = data("a", (R, Fd), A, seed).requires_grad_(), data("b", (R, Fd), A, seed).requires_grad_()
        return swiglu, (a, b), data("dy", (R, Fd), A, seed)
    cases["swiglu_bwd"] = ("autograd of F.silu(a) * b", swiglu_bwd)
    targets = torch.randint(0, V, (R,), device=DEVICE)
    def ce(logits):
        return F.cross_entropy(logits.float(), targets)
    cases["ce_row_max"] = ("F.cross_entropy forward (vs row_max + sum_exp)", lambda: (ce, (data("logits", (R, V), A, seed),)))
    def ce_bwd():
        return ce, (data("logits", (R, V), A, seed).requires_grad_(),), torch.tensor(1.0, device=DEVICE)
    cases["ce_backward"] = ("autograd of F.cross_entropy", ce_bwd)
    cases["fp8_amax"] = ("x.abs().max()", lambda: (lambda t: t.abs().max(), (x,)))
    cases["fp8_cast"] = ("(x.float() * m).clamp().to(e4m3), m torchao's scale of x",
                         lambda: (fp8_cast, (x, fp8_multiplier(x))))
    def adamw():
        n = Fd * D
        p = [data("p", (n,), W, seed, torch.float32)]
        g = [data("g", (n,), A, seed, torch.float32)]
        m, v = [torch.zeros_like(p[0])], [torch.full_like(p[0], 1e-4)]
        st = [torch.tensor(1.0, device=DEVICE)]
        def step():
            torch._fused_adamw_(p, g, m, v, [], st, lr=1e-3, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8,
                                amsgrad=False, maximize=False)
        return step, ()
    cases["adamw"] = ("torch._fused_adamw_ (fp32 grads)", adamw)
    tokens = torch.randint(0, V, (R,), device=DEVICE)
    table = data("weight", (V, D), W, seed)
    cases["embedding_fwd"] = ("F.embedding", lambda: (F.embedding, (tokens, table)))
    def emb_bwd():
        return (lambda t: F.embedding(tokens, t)), (table.clone().requires_grad_(),), data("d_out", (R, D), A, seed)
    cases["embedding_bwd"] = ("autograd of F.embedding", emb_bwd)

    rows = []
    for r in j["results"]:
        op = r["op"]
        ours_us = r["time_us"]["median"]
        if op == "ce_row_max":  # torch's forward is one call: compare with our two row passes together
            sum_exp = next((q for q in j["results"] if q["op"] == "ce_sum_exp"), None)
            ours_us += sum_exp["time_us"]["median"] if sum_exp else 0.0
            op = "cross_entropy fwd (row_max + sum_exp)"
        if r["op"] not in cases:
            continue
        call, make = cases[r["op"]]
        try:
            made = make()
            eager, compiled = eager_and_compiled_us(*made)
        except Exception as e:  # noqa: BLE001
            print(f"{r['op']}: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
            eager, compiled = None, None
        bytes_ = r["bytes"] if r["op"] != "ce_row_max" else r["bytes"] + (sum_exp["bytes"] if sum_exp else 0)
        gbps = lambda us: None if not us else bytes_ / us / 1e3  # noqa: E731
        rows.append({"op": op, "source": source, "bytes": bytes_, "tptune_us": ours_us, "tptune_GBps": gbps(ours_us),
                     "percent_of_copy": r["percent_of_copy"], "torch_call": call, "eager_us": eager,
                     "compiled_us": compiled, "eager_GBps": gbps(eager), "compiled_GBps": gbps(compiled),
                     "ratio_eager": eager / ours_us if eager else None,
                     "ratio_compiled": compiled / ours_us if compiled else None})
        if DEVICE != "cpu":
            torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    main()
