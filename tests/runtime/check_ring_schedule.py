#!/usr/bin/env python3
"""Records which attention block torch's ring attention computes at each step of each cp rank, for the comparison with
runtime/ring/schedule.h in tests/runtime/ring_schedule_test.cc (tests/runtime/ring_schedule_torch.txt).

Optional check, not part of the test command: needs torch (CPU is enough). It runs
torch.distributed.tensor.experimental._context_parallel._attention._templated_ring_attention itself on a gloo group of
cp processes, with an attention op that computes causal/full attention in float64 on the CPU and records each call:
the step, whether it is causal, which query rows (first, count) and which key rows (first, count) of the local
shards it was given. Rows are identified by the values of a position channel carried in q and k (the global sequence
position of every row), so the record does not depend on how torch slices. Layouts: torch's default head-tail load
balancing (enable_load_balance=True; inputs sharded with its _HeadTailLoadBalancer order) and no load balancing
(contiguous shards), each for cp 2, 3 and 4, with both rotate methods (they must record the same blocks).

Usage: python3 tests/runtime/check_ring_schedule.py > tests/runtime/ring_schedule_torch.txt
Each line: "cp N layout LAYOUT rank R step I source S q_begin QB q_len QL kv_begin KB kv_len KL causal C" for every
block computed (S: the rank whose key/value shard the block reads); a skipped step prints "skip" instead.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SEQ_PER_RANK = 8  # local rows (even: two head-tail chunks of 4)


def positions(cp, rank, balance):
    local = SEQ_PER_RANK
    if not balance:
        return list(range(rank * local, (rank + 1) * local))
    chunk = local // 2
    tail = 2 * cp - 1 - rank
    return list(range(rank * chunk, (rank + 1) * chunk)) + list(range(tail * chunk, (tail + 1) * chunk))


def worker(rank, cp, balance, rotate, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=cp)
    from torch.distributed.tensor.experimental._context_parallel import _attention as A

    A._cp_options.enable_load_balance = balance
    A._cp_options.rotate_method = A._RotateMethod.ALL_TO_ALL if rotate == "alltoall" else A._RotateMethod.ALL_GATHER
    pos = positions(cp, rank, balance)
    # (batch 1, heads 1, seq, dim 1): the single channel is the row's global position.
    q = torch.tensor(pos, dtype=torch.float64).reshape(1, 1, -1, 1)
    k = q.clone()
    v = q.clone()
    local_pos = {p: i for i, p in enumerate(pos)}
    step = [0]
    records = []

    def op(query, key, value, is_causal=False, **kwargs):
        qp = [int(x) for x in query.reshape(-1).tolist()]
        kp = [int(x) for x in key.reshape(-1).tolist()]
        q_begin = local_pos[qp[0]]
        # key rows: their index in the holder's local order is the same layout rule as ours
        records.append((step[0], q_begin, len(qp), kp, is_causal))
        s, n = query.shape[2], key.shape[2]
        scores = query @ key.transpose(-1, -2)
        if is_causal:
            mask = torch.ones(s, n, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        out = torch.softmax(scores, dim=-1) @ value
        return out, lse.to(torch.float32)

    group = dist.group.WORLD
    # _templated_ring_attention calls op once per computed step; count steps by wrapping the causal-behaviour helper.
    orig = A._is_causal_behavior

    def behavior(rank, world_size, i, is_causal):
        step[0] = i
        return orig(rank=rank, world_size=world_size, i=i, is_causal=is_causal)

    A._is_causal_behavior = behavior
    A._templated_ring_attention(group, 2, op, q, k, v, is_causal=True)
    lines = []
    computed = {r[0] for r in records}
    for i in range(cp):
        if i not in computed:
            lines.append(f"cp {cp} layout {'head_tail' if balance else 'contiguous'} rank {rank} step {i} skip")
    for i, qb, ql, kp, causal in records:
        # The rank whose shard holds these keys, and where they start in it.
        source = next(r for r in range(cp) if kp[0] in positions(cp, r, balance))
        kb = positions(cp, source, balance).index(kp[0])
        lines.append(
            f"cp {cp} layout {'head_tail' if balance else 'contiguous'} rank {rank} step {i} source {source} "
            f"q_begin {qb} q_len {ql} kv_begin {kb} kv_len {len(kp)} causal {int(causal)}"
        )
    with open(f"{out}.{rotate}.{rank}", "w") as f:
        f.write("\n".join(sorted(lines, key=lambda l: int(l.split(' step ')[1].split()[0]))) + "\n")
    dist.destroy_process_group()


def main():
    out = "/tmp/ring_schedule_record"
    port = 29611
    all_lines = []
    for balance in (True, False):
        for cp in (2, 3, 4):
            per_rotate = {}
            for rotate in ("allgather", "alltoall"):
                port += 1
                mp.spawn(worker, args=(cp, balance, rotate, port, out), nprocs=cp, join=True)
                per_rotate[rotate] = [open(f"{out}.{rotate}.{r}").read() for r in range(cp)]
            if per_rotate["allgather"] != per_rotate["alltoall"]:
                sys.exit(f"cp {cp} balance {balance}: the rotate methods computed different blocks")
            for text in per_rotate["allgather"]:
                all_lines.extend(l for l in text.splitlines() if l)
    print(f"# torch {torch.__version__}: _templated_ring_attention's blocks per (cp, layout, rank, step)")
    print("\n".join(all_lines))


if __name__ == "__main__":
    main()
