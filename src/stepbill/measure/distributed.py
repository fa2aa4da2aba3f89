"""`check` on real ranks: this process is one rank of a run started by torchrun (RANK / WORLD_SIZE set).

The process group is the launched one (gloo on CPU, nccl on CUDA, rendezvous from torchrun's MASTER_ADDR /
MASTER_PORT); every rank builds the model, runs the step of its ZeRO stage (``sharded.measure_on_mesh``: DDP,
ZeRO-1, FSDP2 ZeRO-2/3), measures itself (MemTracker / FSDPMemTracker on CPU, the caching allocator's
statistics on CUDA), and rank 0 gathers every rank's RankMeasurement. A rank that fails still joins the gather
with its error, so that no rank waits forever and rank 0 reports the first error in one line.

``stepbill check --launch N`` starts such a run: measure/launch.py.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from stepbill.errors import StepbillError
from stepbill.measure.build import Mode, require_torch
from stepbill.measure.sharded import RankMeasurement, measure_on_mesh


def launched_world() -> tuple[int, int] | None:
    """(rank, world size) when torchrun (or any launcher setting RANK and WORLD_SIZE) started this process."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        return int(rank), int(world)
    except ValueError:
        raise StepbillError(f"RANK={rank!r} and WORLD_SIZE={world!r} must be integers") from None


@contextlib.contextmanager
def launched_group(device: str) -> Iterator[tuple[int, int, Any, str]]:
    """Initialise the launched process group; yields (rank, world, 1-D device mesh, this rank's device)."""
    require_torch()
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    cuda = device.startswith("cuda")
    if cuda:
        if not torch.cuda.is_available():
            raise StepbillError("--device cuda: no CUDA device is visible to this process")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        yield rank, world, init_device_mesh("cuda" if cuda else "cpu", (world,)), device
    finally:
        dist.destroy_process_group()


def measure_launched(
    config_dict: dict[str, Any],
    *,
    zero: int,
    micro_batch: int = 1,
    seq_len: int = 128,
    recipe: str | None = None,
    device: str = "cpu",
    mode: Mode = "real",
    optimizer_impl: str = "single",
) -> tuple[int, list[RankMeasurement] | None]:
    """Measure this rank (AdamW on `optimizer_impl`'s path); returns (rank, every rank's measurement on rank 0, None
    on the others)."""
    import torch.distributed as dist

    with launched_group(device) as (rank, world, mesh, here):
        result: RankMeasurement | str
        try:
            result = measure_on_mesh(config_dict, mesh, world=world, zero=zero, rank=rank, micro_batch=micro_batch,
                                     seq_len=seq_len, mode=mode, recipe=recipe, device=here,
                                     optimizer_impl=optimizer_impl)
        except Exception as exc:  # joins the gather anyway: the others would wait for this rank forever
            result = f"rank {rank}: {exc}"
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
    if isinstance(result, str):
        raise StepbillError(result)
    if gathered is not None:
        for item in gathered:
            if isinstance(item, str):
                raise StepbillError(item)
    return rank, gathered


def leave_rank(exit_code: int) -> NoReturn:
    """End this launched rank with `exit_code` once its output is flushed, skipping the interpreter's and the C++
    libraries' teardown (``os._exit``).

    Why: on torch 2.13 with gloo on CPU, a rank whose work was done, gathered and printed sometimes aborted while
    its process exited — "terminate called without an active exception" (a C++ object destroyed at exit while it
    still owned a running thread), SIGABRT, faulthandler showing the main thread with no Python frame left. Caught
    once in about 70 launches under load (rank 3 of a 4-rank DDP check; the SIGABRT of 2 of 3 full CI runs had no
    stderr kept, likely the same); torchrun then reports the whole run failed although every figure had been
    measured and printed. Nothing of the check is left for that teardown to do: the process group is destroyed and
    every result is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound and released; whoever binds it next may find it taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

