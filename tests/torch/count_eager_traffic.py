#!/usr/bin/env python3
"""Counts the memory traffic of the kernels eager PyTorch runs for torchtitan's RMSNorm, rotary embedding and SwiGLU,
forward and backward, against the fused bytes tptune's Program counts for the same op (plans/lower/layers.cc): the
ratio is the eager traffic factor of sim/cost/cost_param_list.h (norm_traffic_factor, rope_traffic_factor,
activation_traffic_factor).

Optional check, not part of the test command: needs torch (CPU is enough). The modules are written as torchtitan
9dec370 (the tree of its December 2024 H100 benchmark) wrote them: models/norms.py's RMSNorm (`_norm(x.float())
.type_as(x) * weight`, with x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)), models/llama/model.py's
apply_rotary_emb (complex view of x.float(), multiply by freqs_cis, view_as_real, type_as) and FeedForward's
F.silu(w1(x)) * w3(x) on the two projections' outputs. A TorchDispatchMode records every ATen op that the forward and
the autograd backward run; an op that only makes a view (no kernel) is skipped; every other op is one kernel that
reads its tensor inputs and writes its outputs once, and its traffic is the sum of their sizes (a broadcast operand
counts its own size). Sizes: bf16 activations (the mixed-precision compute dtype), bf16 weights.

Usage: python3 tests/torch/count_eager_traffic.py
Prints per module and pass: the kernels launched, bytes per element of the activation, the fused bytes per element
the Program counts, and their ratio.
"""
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

TOKENS, DIM, HEADS = 256, 512, 8  # large enough that the (per-row, per-feature) small tensors are negligible


NO_KERNEL = ("aten::view_as_complex", "aten::view_as_real", "aten::_reshape_alias", "aten::detach", "aten::lift_fresh")


def tensor_bytes(xs):
    return sum(x.numel() * x.element_size() for x in torch.utils._pytree.tree_leaves(xs) if isinstance(x, torch.Tensor))


class Traffic(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.kernels = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and func._schema.name not in NO_KERNEL:
            self.kernels.append((func._schema.name, tensor_bytes((args, kwargs)) + tensor_bytes(out)))
        return out


def measure(name, forward, inputs, elements, fused_fwd, fused_bwd):
    leaves = [x.detach().requires_grad_(True) for x in inputs]
    with Traffic() as fwd:
        out = forward(*leaves)
    grads = [torch.randn_like(o) for o in out]
    with Traffic() as bwd:
        torch.autograd.backward(out, grads)
    for pass_name, mode, fused in (("forward", fwd, fused_fwd), ("backward", bwd, fused_bwd)):
        per_element = sum(b for _, b in mode.kernels) / elements
        print(f"{name:8s} {pass_name:8s} {len(mode.kernels):2d} kernels  {per_element:5.1f} B/element  "
              f"fused {fused:4.1f}  factor {per_element / fused:4.2f}  ({', '.join(k for k, _ in mode.kernels)})")


def rmsnorm(x, weight, eps=1e-6):
    def norm(t):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
    return (norm(x.float()).type_as(x) * weight,)


def rope(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * f).flatten(3)
    xk_out = torch.view_as_real(xk_ * f).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def swiglu(a, b):
    return (F.silu(a) * b,)


def main():
    torch.manual_seed(0)
    bf = torch.bfloat16
    x = torch.randn(1, TOKENS, DIM, dtype=bf)
    w = torch.ones(DIM, dtype=bf)
    n = x.numel()
    # Program (plans/lower/layers.cc): norm reads x, writes y (2 x 2 B); its backward reads x and dy, writes dx.
    measure("rmsnorm", lambda x: rmsnorm(x, w), [x], n, 4.0, 6.0)
    q = torch.randn(1, TOKENS, HEADS, DIM // HEADS, dtype=bf)
    k = torch.randn(1, TOKENS, HEADS, DIM // HEADS, dtype=bf)
    angles = torch.outer(torch.arange(TOKENS, dtype=torch.float32), torch.rand(DIM // HEADS // 2))
    freqs = torch.polar(torch.ones_like(angles), angles)
    # Program: one rope op per tensor reading and writing it (2 x 2 B), forward and backward; q and k together here.
    measure("rope", lambda q, k: rope(q, k, freqs), [q, k], 2 * q.numel(), 4.0, 4.0)
    a, b = torch.randn(1, TOKENS, 4 * DIM, dtype=bf), torch.randn(1, TOKENS, 4 * DIM, dtype=bf)
    # Program: swiglu reads a and b, writes y (3 x 2 B); its backward reads a, b, dy, writes da, db (5 x 2 B).
    measure("swiglu", swiglu, [a, b], a.numel(), 6.0, 10.0)


if __name__ == "__main__":
    main()
