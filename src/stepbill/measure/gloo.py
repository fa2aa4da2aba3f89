"""FSDP2's reduce-scatter on gloo, measured deterministically.

gloo has no native reduce-scatter. ``ProcessGroupGloo::reduce_scatter_tensor_coalesced`` (what
``dist.reduce_scatter_single`` reaches, torch 2.13) clones the whole input (``buffer = input.clone()``,
the input's size and dtype), all-reduces the clone on a gloo worker thread, and the returned work's
``wait()`` copies this rank's chunk of it into the output (``output.copy_(buffer.chunk(N)[rank])``: the
``aten.split`` / ``aten.copy_`` a tracker sees). The clone is referenced by the main thread's work object and
by the worker thread's in-flight all-reduce work; whichever lets go last frees it. When the worker is last
(a race), the clone's storage is released on the worker thread once it gets the GIL, and MemTracker's
weakref callback only then subtracts it: the clone, one unit's reduce-scatter input (fp32), stays counted
into the next layer's all-gather or the optimizer step, by an amount that changes from run to run
(tiny llama, 2 ranks: the backward peak +6 % or +12 %, the optimizer peak +0 %, +11 % or +14 % above the
bill; docs/accuracy.md "Real ranks").

``SettledReduceScatter`` is FSDP2's own ``DefaultReduceScatter`` (the same ``dist.reduce_scatter_single``
call, the same tensors, the same op) that, after the call returns, waits until every storage the call's
``wait()`` touched besides its input and output (gloo's clone) is freed: the main thread continues exactly
when the worker thread has dropped the clone, the order of events of a run in which the worker is faster.
The training step is unchanged (no tensor, dtype, collective or order of ops changes); only the main thread
waits a few microseconds for gloo's worker. The clone is then counted from the copy-out to the end of the
call on every run, which is what the bill's gloo convention holds (engine/parallel/fsdp2_moments.py).
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from stepbill.measure.build import require_torch

#: How long the main thread waits for gloo's worker to free the clone before it gives up (s); the worker
#: frees it within microseconds of the all-reduce completing, so the limit is only a guard against a hang.
SETTLE_LIMIT_S = 30.0


def settled_reduce_scatter() -> Any:
    """A ``DefaultReduceScatter`` whose call returns once gloo's input clone is freed (module docstring)."""
    require_torch()
    import torch
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class _Touched(TorchDispatchMode):
        """Weak references to the storages of the tensors the ops inside the call read or make."""

        def __init__(self) -> None:
            super().__init__()
            self.own: set[int] = set()
            self.refs: dict[int, Any] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten((args, kwargs, out))[0]:
                if isinstance(t, torch.Tensor):
                    storage = t.untyped_storage()
                    key = storage._cdata
                    if key not in self.own and key not in self.refs:
                        self.refs[key] = weakref.ref(storage)
            return out

    class SettledReduceScatter(DefaultReduceScatter):
        """FSDP2's default reduce-scatter, returning once gloo's worker thread has freed the input's clone."""

        def __init__(self) -> None:
            super().__init__()
            # one mode for every call: a new TorchDispatchMode instance costs about a second on its first op
            self.touched = _Touched()
            self.unsettled = 0  # calls whose clone was still alive after SETTLE_LIMIT_S (reported, never hidden)

        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any,
                     async_op: bool = False) -> Any:
            touched = self.touched
            touched.own = {output_tensor.untyped_storage()._cdata, input_tensor.untyped_storage()._cdata}
            touched.refs = {}
            with touched:
                work = super().__call__(output_tensor, input_tensor, group, op, async_op)
            if async_op:  # FSDP2 calls it synchronously; an async caller waits itself, nothing to settle
                return work
            deadline = time.monotonic() + SETTLE_LIMIT_S
            refs, touched.refs = list(touched.refs.values()), {}
            while any(ref() is not None for ref in refs):
                if time.monotonic() > deadline:
                    self.unsettled += 1
                    break
                time.sleep(1e-4)  # releases the GIL: gloo's worker thread drops its reference
            return work

    return SettledReduceScatter()


def settle_reduce_scatters(modules: Any) -> Any:
    """Give every FSDP2 module in `modules` the settled reduce-scatter (gloo process groups only); returns it
    (its ``unsettled`` counts the calls that gave up waiting)."""
    comm = settled_reduce_scatter()
    for module in modules:
        module.set_custom_reduce_scatter(comm)
    return comm
