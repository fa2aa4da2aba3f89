"""gloo's reduce-scatter clone (measure/gloo.py) on 2 real ranks: with FSDP2's DefaultReduceScatter MemTracker
still counts the clone after some calls (gloo's worker thread frees it late: 2–5 % of calls seen), with the
settled reduce-scatter never. Starts torchrun: slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("gloo_race.py")


@pytest.mark.slow
def test_settled_reduce_scatter_never_leaves_the_clone_counted() -> None:
    pytest.importorskip("torch")
    from stepbill.measure.distributed import free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--nnodes", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(SCRIPT), "200"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("rank ")]
    late = {(int(r), name): int(n) for _, r, name, n, _ in lines}
    assert set(late) == {(0, "default"), (1, "default"), (0, "settled"), (1, "settled")}
    assert late[(0, "settled")] == late[(1, "settled")] == 0, late
