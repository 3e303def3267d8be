#!/usr/bin/env python3
"""Torch's own DTensor collective counts for one block, beside `tp-plan explain` (needs torch; CPU, no GPU).

    python3 tests/torch/dtensor_fake_pg_counts.py

A fake process group of 8 ranks runs one simplified block (attention's core replaced by an elementwise op on local
heads, which issues no collective) under CommDebugMode. Output with torch 2.15.0:
    seed vanilla (DTensor):          fwd {'all_reduce': 2}  bwd {'all_reduce': 5}
    0.3 boundary R->R + fused wqkv:  fwd {'all_reduce': 2}  bwd {'all_reduce': 2}
the counts `tp-plan explain --preset vanilla` gives for the dtensor and the torchtitan-0.3 families. Then torchtitan's
gradient clipping (dist_utils.clip_grad_norm_ -> torch.nn.utils.get_total_norm(foreach=True) -> clip_grads_with_norm_)
on DTensor gradients of a [dp_shard 2, tp 4] mesh: one all_reduce of the stacked per-gradient norms (n_grads fp32) per
sharded mesh dim, dp_shard's then tp's:
    clip_grad_norm_ [dp_shard 2, tp 4], 4 grads: all_reduce (4,) torch.float32 on mesh dim 0; all_reduce (4,)
    torch.float32 on mesh dim 1
the "grad_norm" segment of the torchtitan-0.3 family (plans/lower/lower.cc, grad_norm()).
"""
# Counts torch DTensor's collectives for one block on a fake process group of 8 (CPU), for the seed's vanilla plan
# and for torchtitan 0.3's boundary conversion expressed as PrepareModuleInput(R -> R) with a fused wqkv.
import torch, torch.nn as nn, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, PrepareModuleInput, parallelize_module)
from torch.distributed.tensor.debug import CommDebugMode

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
mesh = init_device_mesh("cpu", (8,))
D, H = 64, 128

class Attn(nn.Module):
    def __init__(s, fused):
        super().__init__(); s.fused = fused
        if fused: s.wqkv = nn.Linear(D, 3 * D, bias=False)
        else: s.wq, s.wk, s.wv = (nn.Linear(D, D, bias=False) for _ in range(3))
        s.wo = nn.Linear(D, D, bias=False)
    def forward(s, x):
        if s.fused:
            q, k, v = s.wqkv(x).chunk(3, dim=-1)
        else:
            q, k, v = s.wq(x), s.wk(x), s.wv(x)
        return s.wo(q * k + v)   # stands in for attention: elementwise on local heads
class FF(nn.Module):
    def __init__(s):
        super().__init__(); s.w1, s.w3 = nn.Linear(D, H, bias=False), nn.Linear(D, H, bias=False); s.w2 = nn.Linear(H, D, bias=False)
    def forward(s, x): return s.w2(torch.nn.functional.silu(s.w1(x)) * s.w3(x))
class Block(nn.Module):
    def __init__(s, fused):
        super().__init__(); s.attention = Attn(fused); s.feed_forward = FF()
    def forward(s, x):
        h = x + s.attention(x)
        return h + s.feed_forward(h)

def count(plan, fused):
    torch.manual_seed(0)
    b = Block(fused)
    parallelize_module(b, mesh, plan)
    x = torch.randn(1, 16, D, requires_grad=True)
    with CommDebugMode() as fwd:
        y = b(x)
    with CommDebugMode() as bwd:
        y.sum().backward()
    f = {str(k).split('.')[-1]: v for k, v in fwd.get_comm_counts().items()}
    g = {str(k).split('.')[-1]: v for k, v in bwd.get_comm_counts().items()}
    return f, g

seed = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(), "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel()}
tt = {"attention": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
      "attention.wqkv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
      "feed_forward": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
      "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()}
print("torch", torch.__version__)
print("seed vanilla (DTensor):          fwd", count(seed, False)[0], " bwd", count(seed, False)[1])
print("0.3 boundary R->R + fused wqkv:  fwd", count(tt, True)[0], " bwd", count(tt, True)[1])

# Gradient clipping as torchtitan runs it, on a 2-D mesh of the same 8 fake ranks: which all-reduces, of what size.
import torch.distributed._functional_collectives as funcol
from torch.distributed.tensor import distribute_tensor
mesh2 = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp_shard", "tp"))
calls, plain_all_reduce = [], funcol.all_reduce
def spy(t, reduceOp, group, *a, **k):
    calls.append(f"all_reduce {tuple(t.shape)} {t.dtype} on mesh dim {group[1] if isinstance(group, tuple) else group}")
    return plain_all_reduce(t, reduceOp, group, *a, **k)
funcol.all_reduce = spy
params = []
for pl in [(Shard(0), Shard(0)), (Shard(0), Shard(1)), (Shard(0), Replicate()), (Shard(0), Shard(0))]:
    p = nn.Parameter(distribute_tensor(torch.randn(16, 16), mesh2, pl))
    p.grad = distribute_tensor(torch.randn(16, 16), mesh2, pl)
    params.append(p)
total = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0, False, True).full_tensor()
torch.nn.utils.clip_grads_with_norm_(params, 1.0, total, True)
funcol.all_reduce = plain_all_reduce
print("clip_grad_norm_ [dp_shard 2, tp 4], 4 grads:", "; ".join(calls))
