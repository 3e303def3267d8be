#!/usr/bin/env python3
"""Prints the sequence-parallel collectives that torchao's Float8ColwiseParallel / Float8RowwiseParallel issue for a
feed-forward pair (w1 colwise with a Shard(1) input, w2 rowwise with a Shard(1) output), forward and backward, with the
dtype each one moves: the check behind tptune's float8 tensorwise lowering (plans/lower/layers.cc: the input cast
before its all-gather, and Layers::cast_gradient_float8, the rowwise output's gradient cast before its all-gather).

Optional check, not part of the test command: needs torch and torchao (CPU is enough). It runs torchao's real
convert_to_float8_training (tensorwise) and parallelize_module on torch's fake process group (one process standing for
rank 0 of 2: collectives move no data, so the numbers are meaningless and only the calls count) and records, with a
TorchDispatchMode, every all_gather_into_tensor and reduce_scatter_tensor that the forward and autograd's backward
call from Python, and the element type of the data a float8 tensor carries. Collectives that DTensor issues inside
its own op dispatch (the amax all-reduces) are not seen by the mode and not printed.

Usage: python3 tests/torch/check_float8_tp_gathers.py
Expected (torch 2.15, torchao 0.18): forward all_gather float8_e4m3fn, reduce_scatter of the (bf16/fp32) output;
backward all_gather float8_e5m2 (w2's output gradient, cast on its shard), reduce_scatter of w1's input gradient.
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_tensor_parallel import Float8ColwiseParallel, Float8RowwiseParallel


class Collectives(TorchDispatchMode):
    def __init__(self, phase):
        super().__init__()
        self.phase = phase

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if "all_gather" in name or "reduce_scatter" in name:
            data = getattr(args[0], "_data", args[0])  # a float8 tensor's payload, else the tensor itself
            print(f"{self.phase:8s} {name.split('::')[-1]:24s} {str(data.dtype):20s} local {tuple(args[0].shape)}")
        return func(*args, **(kwargs or {}))


class FeedForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(64, 128, bias=False)
        self.w2 = torch.nn.Linear(128, 64, bias=False)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def main():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    m = FeedForward()
    convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    parallelize_module(m, mesh, {"w1": Float8ColwiseParallel(input_layouts=Shard(1)),
                                 "w2": Float8RowwiseParallel(output_layouts=Shard(1))})
    x = torch.randn(1, 16, 64, requires_grad=True)
    with Collectives("forward"):
        y = m(x)
    with Collectives("backward"):
        y.sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
