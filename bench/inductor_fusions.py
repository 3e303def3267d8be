#!/usr/bin/env python3
"""Which kernels torch.compile (Inductor) makes of a Llama block's memory-bound work, forward and backward.

tp-run's `--compile` mode is meant to run the fused kernels Inductor generates for a torchtitan Llama block (issue 39,
item 5). Before matching them, read them: this script compiles one block as torchtitan writes it (RMSNorm with the
residual add, rope on q and k as complex multiplication, SDPA, SwiGLU; optionally float8 tensorwise casts as torchao's
dynamic scaling computes them) with torch.compile, runs forward and backward once, and writes

  OUT/inductor-output-code.txt   every generated module's source (what TORCH_LOGS=output_code prints)
  OUT/inductor-fusions.md        one row per generated kernel: graph, kernel, the aten ops its name says it fuses,
                                 and which Program ops of tptune it covers (a guess from those names, for review)

It is an optional check (torch is not a dependency of tptune); bench/gpu-check.sh runs it where torch sees a GPU.
On a CPU-only torch it runs too (Inductor then emits C++ kernels, `cpp_fused_*`: the fusion groups are decided by
the same scheduler, the kernels are not the GPU's).

  python3 bench/inductor_fusions.py --out DIR [--dim 4096 --heads 32 --kv-heads 8 --ffn 14336 --seq 2048]
                                    [--float8] [--device cuda|cpu]
"""
import argparse
import os
import re
import sys


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--float8", action="store_true", help="tensorwise float8 casts of the linear inputs and weights")
    ap.add_argument("--device", default=None, help="cuda when torch sees a GPU, else cpu")
    return ap.parse_args()


# tptune Program ops (plans/program/program.h: ElementwiseOp::Fn, CastFp8Op) a kernel name's aten ops point to.
PROGRAM_OPS = [
    (("rsqrt",), "rmsnorm / rmsnorm_bwd"),
    (("add",), "add (residual) / accumulate"),
    (("view_as_complex", "view_as_real", "complex", "cat", "neg"), "rope / rope_bwd"),
    (("silu", "sigmoid"), "swiglu / swiglu_bwd"),
    (("abs", "amax"), "cast_fp8 amax"),
    (("clamp", "reciprocal"), "cast_fp8 cast"),
]


def kernel_rows(graph, source):
    rows = []
    pattern = re.compile(r"\b((?:triton|cpp)_(?:[a-z]+_)?fused_[A-Za-z0-9_]+?_\d+)\b")
    for name in dict.fromkeys(pattern.findall(source)):  # first occurrence order, no duplicates
        ops = re.sub(r"^(triton|cpp)_(\w+?_)?fused_", "", name)
        ops = re.sub(r"_\d+$", "", ops)
        covered = sorted({what for keys, what in PROGRAM_OPS if any(k in ops for k in keys)})
        rows.append((graph, name, ops.replace("_", " "), ", ".join(covered) or "-"))
    externs = sorted(set(re.findall(r"extern_kernels\.(\w+)", source)))
    return rows, externs


def main():
    args = parse()
    import torch
    import torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    head_dim = args.dim // args.heads
    n_rep = args.heads // args.kv_heads

    def rms_norm(x, w, eps=1e-5):  # torchtitan's RMSNorm (nn.RMSNorm / F.rms_norm behave alike under compile)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w

    def rope(x, freqs_cis):  # torchtitan's apply_rotary_emb for one tensor
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)

    def cast_fp8(t, fp8=torch.float8_e4m3fn):  # torchao tensorwise dynamic scaling: amax -> scale -> saturated cast
        amax = t.abs().max().to(torch.float64)
        fmax = torch.finfo(fp8).max
        scale = (fmax / torch.clamp(amax, min=1e-12)).to(torch.float32)
        q = (t.float() * scale).clamp(-fmax, fmax).to(fp8)
        return q, scale.reciprocal()

    def col_major(t):  # the layout torch._scaled_mm wants of its second operand
        return t.t().contiguous().t()

    class Float8Matmul(torch.autograd.Function):
        """x @ w.t() as torchao's Float8Linear computes it with tensorwise scaling (float8_linear.py,
        matmul_with_hp_or_float8_args): forward casts x and w to e4m3; backward casts the output gradient to e5m2 and
        x and w to e4m3 again, for grad_input = g @ w and grad_weight = g.t() @ x (torch._scaled_mm has no autograd
        formula of its own)."""

        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            (xq, xs), (wq, ws) = cast_fp8(x), cast_fp8(w)
            return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=dtype)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            (gq, gs), (wq, ws), (xq, xs) = cast_fp8(g, torch.float8_e5m2), cast_fp8(w), cast_fp8(x)
            grad_x = torch._scaled_mm(gq, col_major(wq), scale_a=gs, scale_b=ws, out_dtype=dtype)
            grad_w = torch._scaled_mm(gq.t().contiguous(), col_major(xq), scale_a=gs, scale_b=xs, out_dtype=dtype)
            return grad_x, grad_w

    def linear(x, w):
        if not args.float8:
            return x @ w.t()
        y = Float8Matmul.apply(x.reshape(-1, x.shape[-1]), w)
        return y.reshape(*x.shape[:-1], -1)

    def block(h, p, freqs_cis):
        b, s, _ = h.shape
        x = rms_norm(h, p["attention_norm"])
        q = linear(x, p["wq"]).view(b, s, args.heads, head_dim)
        k = linear(x, p["wk"]).view(b, s, args.kv_heads, head_dim)
        v = linear(x, p["wv"]).view(b, s, args.kv_heads, head_dim)
        q, k = rope(q, freqs_cis), rope(k, freqs_cis)
        k = k.repeat_interleave(n_rep, dim=2)
        v = v.repeat_interleave(n_rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = h + linear(o.transpose(1, 2).reshape(b, s, -1), p["wo"])
        x = rms_norm(h, p["ffn_norm"])
        return h + linear(F.silu(linear(x, p["w1"])) * linear(x, p["w3"]), p["w2"])

    def param(*shape):
        return (torch.randn(*shape, device=device, dtype=torch.float32) * 0.02).to(dtype).requires_grad_()

    p = {"attention_norm": torch.ones(args.dim, device=device, dtype=dtype, requires_grad=True),
         "ffn_norm": torch.ones(args.dim, device=device, dtype=dtype, requires_grad=True),
         "wq": param(args.dim, args.dim), "wk": param(args.kv_heads * head_dim, args.dim),
         "wv": param(args.kv_heads * head_dim, args.dim), "wo": param(args.dim, args.dim),
         "w1": param(args.ffn, args.dim), "w3": param(args.ffn, args.dim), "w2": param(args.dim, args.ffn)}
    freqs = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(args.seq, device=device, dtype=torch.float32), freqs)
    freqs_cis = torch.polar(torch.ones_like(angles), angles).view(1, args.seq, 1, head_dim // 2)
    h = torch.randn(1, args.seq, args.dim, device=device, dtype=dtype, requires_grad=True)
    compiled = torch.compile(block)

    def step():
        out = compiled(h, p, freqs_cis)
        out.float().pow(2).mean().backward()
        return out

    _, sources = run_and_get_code(step)
    with open(os.path.join(args.out, "inductor-output-code.txt"), "w") as f:
        for i, src in enumerate(sources):
            f.write(f"# ===== generated module {i} =====\n{src}\n")
    lines = [f"# Inductor's kernels for one torchtitan Llama block (torch {torch.__version__}, {device}, bf16"
             f"{', float8 tensorwise' if args.float8 else ''}; dim {args.dim}, heads {args.heads}/{args.kv_heads}, "
             f"ffn {args.ffn}, seq {args.seq})", "",
             "Graph 0 is the forward, later graphs the backward (AOTAutograd compiles them apart). The aten ops "
             "are the ones Inductor names each kernel after; the tptune column is a reading of those names.", "",
             "| graph | kernel | aten ops fused | tptune Program ops it covers |", "| --- | --- | --- | --- |"]
    for i, src in enumerate(sources):
        graph = "forward" if i == 0 else f"backward ({i})"
        rows, externs = kernel_rows(graph, src)
        lines += [f"| {g} | `{k}` | {ops} | {cov} |" for g, k, ops, cov in rows]
        if externs:
            lines.append(f"| {graph} | library calls | {', '.join(externs)} | gemm / attention |")
    with open(os.path.join(args.out, "inductor-fusions.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
