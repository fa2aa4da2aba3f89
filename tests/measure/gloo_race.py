"""Run under torchrun (2 ranks, gloo): how often gloo's reduce-scatter clone is still counted by MemTracker right
after the call returns, with FSDP2's DefaultReduceScatter and with measure/gloo.py's settled one. Rank 0 prints
one line per rank and reduce-scatter: ``rank <r> <name> <late> <calls>``. Used by tests/measure/test_gloo_settle.py."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

from stepbill.measure.gloo import settled_reduce_scatter


def main(calls: int) -> None:
    dist.init_process_group("gloo")
    group = dist.group.WORLD
    numel = 1 << 16
    lines = []
    for name, comm in (("default", DefaultReduceScatter()), ("settled", settled_reduce_scatter())):
        late = 0
        inp, out = torch.ones(numel), torch.empty(numel // dist.get_world_size())
        tracker = MemTracker()
        tracker.track_external(inp, out)
        with tracker:
            before = sum(d["Total"] for d in tracker.get_tracker_snapshot().values())
            for _ in range(calls):
                comm(out, inp, group, dist.ReduceOp.SUM)
                probe = torch.ones(4)  # the next op of the step (16 B)
                now = sum(d["Total"] for d in tracker.get_tracker_snapshot().values())
                late += now != before + probe.nbytes
                del probe
        lines.append(f"rank {dist.get_rank()} {name} {late} {calls}")
    gathered: list = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(lines, gathered if dist.get_rank() == 0 else None, dst=0)
    if dist.get_rank() == 0:
        print("\n".join(line for rank_lines in gathered for line in rank_lines), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
