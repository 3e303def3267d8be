#!/usr/bin/env python3
"""Counts the tensorwise float8 casts (one amax reduction each: aten.abs feeding a max) that torch.compile's forward
and backward graphs of a SwiGLU feed-forward (w1, w3 colwise-shaped, w2 after silu(w1 x) * w3 x) run, without
activation checkpointing and with full activation checkpointing: the check behind tptune pricing one float8 backward
whatever the torchao version (docs/calibration.md, "torchao's backward casts").

Why it matters: torchao's Float8Linear of December 2024 (eab345c, torchtitan's December 2024 H100 benchmark) saves the
float8 casts of the input and the weight for backward; from January 2025 on (the June 2025 async TP benchmark's
6243040, and torchao 0.18) it saves the high-precision tensors and casts them again in backward. Under torch.compile
the joint graph is common-subexpression-eliminated and the min-cut partitioner chooses what to save, so whether those
recasts cost anything is a property of the compiled graphs, not of the Python source: this script builds them.

Optional check, not part of the test command: needs torch and torchao (CPU is enough; the graphs are captured before
anything runs a float8 GEMM). It compiles with AOTAutograd and min_cut_rematerialization_partition, the partitioner
inductor uses, and prints, per graph, how many amax reductions read a tensor of each shape. Shapes (tokens 96, dim 256,
hidden 640) tell the tensors apart: x and w2's output gradient [96, 256]; w1's and w3's outputs' gradients and w2's
input [96, 640]; w1.t() and w3.t() [256, 640]; w2.t() [640, 256].

Usage: python3 tests/torch/check_float8_backward_casts.py
Read with torch 2.15, torchao 0.18:
  no AC: the backward recasts w2's input [96, 640] and weight [640, 256] that the forward already cast (x is saved as
    float8: its high-precision value is not needed otherwise), beside the three gradient casts;
  full AC: the backward's casts are the recomputed forward's (x twice, w1, w3, w2's input and weight) and the three
    gradient casts, the same set the float8-saving torchao of December 2024 recomputes. Every float8 run of the
    published record but the June 2025 8B runs (per-op SAC) uses full AC, and with FSDP's float8 all-gather the
    weights arrive cast.
"""
import collections

import torch
from functorch.compile import min_cut_rematerialization_partition
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch.utils.checkpoint import checkpoint
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

TOKENS, DIM, HIDDEN = 96, 256, 640


class FeedForward(nn.Module):
    def __init__(self, full_ac):
        super().__init__()
        self.full_ac = full_ac
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)

    def body(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=False) if self.full_ac else self.body(x)


def amax_shapes(full_ac):
    graphs = {}

    def capture(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm
            return gm.forward

        return compiler

    model = FeedForward(full_ac)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    backend = aot_autograd(
        fw_compiler=capture("forward"),
        bw_compiler=capture("backward"),
        partition_fn=min_cut_rematerialization_partition,
    )
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(TOKENS, DIM, requires_grad=True)
    try:
        compiled(x).sum().backward()
    except (RuntimeError, NotImplementedError):
        pass  # a CPU without float8 GEMMs: both graphs were captured before the first one ran
    counts = {}
    for name in ("forward", "backward"):
        counts[name] = collections.Counter(
            tuple(node.args[0].meta["val"].shape)
            for node in graphs[name].graph.nodes
            if node.op == "call_function" and node.target == torch.ops.aten.abs.default
        )
    return counts


def main():
    print(f"torch {torch.__version__}; amax reductions per graph, by the shape they read")
    for full_ac in (False, True):
        counts = amax_shapes(full_ac)
        for name in ("forward", "backward"):
            shapes = ", ".join(f"{list(s)} x{n}" for s, n in sorted(counts[name].items()))
            print(f"  {'full AC' if full_ac else 'no AC':8s} {name:8s} {sum(counts[name].values()):2d}: {shapes}")


if __name__ == "__main__":
    main()
