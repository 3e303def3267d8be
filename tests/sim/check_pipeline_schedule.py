#!/usr/bin/env python3
"""Print the compute actions torch.distributed.pipelining runs on each pipeline rank, for comparison with
tptune's build_schedule() (sim/pipeline/schedule.h).

Optional: needs PyTorch (CPU is enough); not part of the test command. For each case it starts pp processes
(gloo), builds stages_per_rank tiny Linear stages per rank placed as torchtitan places them
(torchtitan/distributed/pipeline_parallel.py, _get_pp_rank_to_stage_indices_mapping: "loop" or "v"), runs one
step of the schedule class that torch's get_schedule_class() returns for the name, and records the order in which
the stages' forward_one_chunk, backward_one_chunk (full_backward True: B, False: I) and backward_weight_one_chunk
(W) run: what torch executes, not its pipeline_order table.

Output: one line per (case, rank), "NAME pp v m rank: 0F0 0F1 ... " in torch's _Action notation (stage, kind,
microbatch), the format of tests/sim/pipeline_schedule_torch.txt, which tests/sim/pipeline_schedule_test.cc
compares with build_schedule(). Regenerate it with

    python3 tests/sim/check_pipeline_schedule.py > tests/sim/pipeline_schedule_torch.txt
"""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import get_schedule_class
from torch.distributed.pipelining.stage import _PipelineStageBase

# (schedule, pp, stages_per_rank, microbatches): every schedule, the rounds of the interleaved ones (m < pp, m a
# multiple of pp, m = 2 rounds of a non-multiple), ZBV with fewer microbatches than 2pp-1 (actions dropped).
CASES = [
    ("GPipe", 2, 1, 3),
    ("GPipe", 4, 1, 4),
    ("1F1B", 2, 1, 2),
    ("1F1B", 3, 1, 5),
    ("1F1B", 4, 1, 8),
    ("Interleaved1F1B", 2, 2, 4),
    ("Interleaved1F1B", 4, 2, 8),
    ("Interleaved1F1B", 4, 2, 3),
    ("Interleaved1F1B", 4, 2, 10),
    ("Interleaved1F1B", 2, 3, 4),
    ("LoopedBFS", 2, 2, 3),
    ("LoopedBFS", 4, 2, 4),
    ("InterleavedZeroBubble", 2, 2, 4),
    ("InterleavedZeroBubble", 4, 2, 8),
    ("InterleavedZeroBubble", 4, 2, 3),
    ("ZBVZeroBubble", 2, 2, 4),
    ("ZBVZeroBubble", 4, 2, 8),
    ("ZBVZeroBubble", 4, 2, 3),
    ("DualPipeV", 2, 2, 4),
    ("DualPipeV", 2, 2, 6),
    ("DualPipeV", 4, 2, 8),
    ("DualPipeV", 3, 2, 10),
]

DIM = 4


def stage_indices(name, pp, v, rank):
    if get_schedule_class(name).__name__ in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV"):
        return [rank, 2 * pp - 1 - rank]
    return [rank + s * pp for s in range(v)]


def worker(rank, pp, name, v, m, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=pp)
    torch.manual_seed(0)
    log = []
    fwd, bwd, wgt = (
        _PipelineStageBase.forward_one_chunk,
        _PipelineStageBase.backward_one_chunk,
        _PipelineStageBase.backward_weight_one_chunk,
    )

    def forward_one_chunk(self, chunk, *a, **k):
        log.append(f"{self.stage_index}F{chunk}")
        return fwd(self, chunk, *a, **k)

    def backward_one_chunk(self, chunk, loss=None, full_backward=True, last_backward=False):
        log.append(f"{self.stage_index}{'B' if full_backward else 'I'}{chunk}")
        return bwd(self, chunk, loss=loss, full_backward=full_backward, last_backward=last_backward)

    def backward_weight_one_chunk(self, chunk, *a, **k):
        log.append(f"{self.stage_index}W{chunk}")
        return wgt(self, chunk, *a, **k)

    _PipelineStageBase.forward_one_chunk = forward_one_chunk
    _PipelineStageBase.backward_one_chunk = backward_one_chunk
    _PipelineStageBase.backward_weight_one_chunk = backward_weight_one_chunk

    num_stages = pp * v
    stages = [
        PipelineStage(torch.nn.Linear(DIM, DIM), s, num_stages, torch.device("cpu"))
        for s in stage_indices(name, pp, v, rank)
    ]
    cls = get_schedule_class(name)
    loss_fn = lambda out, target: ((out - target) ** 2).sum()  # noqa: E731
    if v == 1 and cls.__name__ in ("ScheduleGPipe", "Schedule1F1B"):
        schedule = cls(stages[0], n_microbatches=m, loss_fn=loss_fn)
    else:
        schedule = cls(stages, n_microbatches=m, loss_fn=loss_fn)
    x = torch.randn(m, DIM)
    target = torch.randn(m, DIM)
    first = any(st.is_first for st in stages)
    last = any(st.is_last for st in stages)
    kwargs = {"target": target} if last else {}
    if first:
        schedule.step(x, **kwargs)
    else:
        schedule.step(**kwargs)
    queue.put((rank, log))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ctx = mp.get_context("spawn")
    print(f"# The compute actions torch {torch.__version__} runs per pipeline rank: tests/sim/check_pipeline_schedule.py")
    print("# schedule pp stages_per_rank microbatches rank: actions (stage, F|B|I|W, microbatch)")
    for name, pp, v, m in CASES:
        queue = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=worker, args=(r, pp, name, v, m, port, queue)) for r in range(pp)]
        for p in procs:
            p.start()
        logs = dict(queue.get(timeout=300) for _ in range(pp))
        for p in procs:
            p.join()
            if p.exitcode != 0:
                sys.exit(f"{name} pp {pp} v {v} m {m}: a rank exited with {p.exitcode}")
        for r in range(pp):
            print(f"{name} {pp} {v} {m} {r}: {' '.join(logs[r])}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
