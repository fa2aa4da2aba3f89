"""Measure one rank of N under data-parallel sharding, in one process: FSDP2 (ZeRO-3 / ZeRO-2) or ZeRO-1.

A fake process group (``FakeStore``, backend ``fake``: every collective returns at once and moves no data)
with ``init_device_mesh("cpu", (N,))`` makes this process rank ``r`` of ``N``; the model, its shards and the
step are exactly what rank r would allocate. Fake tensors for large models, real ones for tiny.

- ``zero=3`` / ``zero=2``: ``fully_shard`` on every decoder layer, then the root, with
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: the sharded parameters (and so the sharded
  gradients and AdamW states) are fp32, each layer is all-gathered in bf16 for compute and its bf16 gradients
  are reduce-scattered in fp32. ``reshard_after_forward`` True (ZeRO-3, FSDP2's default) or False (ZeRO-2:
  unsharded bf16 parameters stay from the forward to the backward). Tracked with ``FSDPMemTracker``.
- ``zero=1``: a plain (unwrapped) model with ``ZeroRedundancyOptimizer(AdamW)``: every rank keeps all
  parameters and gradients and the AdamW states of its own partition (greedy by parameter size). Gradients
  are all-reduced by hand, in place, one ``all_reduce`` per parameter after the backward: DDP would add its
  25 MiB bucket views (``gradient_as_bucket_view`` changes which tensors own the grads) and hook-driven
  buckets whose allocation depends on bucket order, which is DDP's implementation and not ZeRO-1's bill;
  in-place all-reduces allocate nothing, so what is measured is exactly ZeRO-1's resident state plus the
  single-rank step. Tracked with ``MemTracker``. Precision as the single-rank recipes (fp32, pure-bf16).

Iteration 1 warms up (optimizer states created); iteration 2 is measured (``PhasePeaks`` as in step.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stepbill.errors import StepbillError
from stepbill.measure.build import Mode, build_model, decoder_layers, hf_patches, new_fake_mode, require_torch
from stepbill.measure.session import adamw_flags
from stepbill.measure.step import PhasePeaks

PHASES = ("forward", "backward", "optimizer")

#: The one recipe measured under FSDP2 (ZeRO-2/3): FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16,
#: reduce_dtype=fp32)`` on fp32 parameters.
FSDP_RECIPE = "fsdp-mixed-bf16"
#: What FSDP_RECIPE holds, for the header and JSON of `check`.
FSDP_SETUP: dict[str, str] = {
    "sharded_params": "fp32",
    "grads": "fp32, sharded",
    "optimizer_states": "fp32 AdamW, sharded",
    "compute_params": "bf16 (all-gathered per layer: MixedPrecisionPolicy.param_dtype)",
    "reduce_dtype": "fp32 (reduce-scatter: MixedPrecisionPolicy.reduce_dtype)",
}
#: Recipes each ZeRO stage can measure (0: the single-rank step, DDP under --dp).
MEASURABLE: dict[int, tuple[str, ...]] = {
    0: ("fp32", "pure-bf16", "amp-bf16"),
    1: ("fp32", "pure-bf16"),
    2: (FSDP_RECIPE,),
    3: (FSDP_RECIPE,),
}


def recipe_header(recipe: str) -> str:
    """One line naming the measured recipe (FSDP's mixed-precision setup spelled out)."""
    if recipe != FSDP_RECIPE:
        return f"recipe {recipe} (measured as named)"
    return (f"recipe {FSDP_RECIPE}: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) on fp32 sharded "
            "params; grads and AdamW states fp32, sharded; each layer all-gathered in bf16 for compute, its "
            "gradients reduce-scattered in fp32")


def measured_recipe(zero: int, recipe: str | None, flag: str = "--recipe") -> str:
    """The recipe measured under ZeRO-`zero`: `recipe` when it can be measured there, the stage's default when
    None (fp32; FSDP_RECIPE under ZeRO-2/3); anything else is refused in one line naming what can be measured.
    `flag` spells the option in the message (``recipe`` for the Python API)."""
    choices = MEASURABLE.get(zero)
    if choices is None:
        raise StepbillError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if recipe is None:
        return choices[0]
    if recipe not in choices:
        what = (f"FSDP2's mixed precision only: {flag} {FSDP_RECIPE} (fp32 sharded params, grads and AdamW "
                "states; bf16 compute; fp32 reduce-scatter)" if zero in (2, 3) else f"{flag} " + " | ".join(choices))
        where = f" under ZeRO-{zero}" if zero else ""
        raise StepbillError(f"check{where} measures {what}; got {flag} {recipe!r}")
    return recipe

# FSDPMemTracker's / MemTracker's category names -> ours.
CATEGORY_NAMES: dict[str, str] = {
    "Sharded Param": "params",
    "Parameter": "params",
    "Unsharded Param": "unsharded_params",
    "Buffer": "buffers",
    "Sharded Grad": "grads",
    "Gradient": "grads",
    "Unsharded Grad": "unsharded_grads",
    "Activation": "activations",
    "Temp": "temp",
    "All Gather": "all_gather",
    "Reduce Scatter": "reduce_scatter",
    "OptState": "optimizer",
    "Optstate": "optimizer",
    "Inputs": "inputs",
    "Other": "inputs",
    "Total": "total",
}
CATEGORIES = tuple(dict.fromkeys(CATEGORY_NAMES.values()))


@dataclass(frozen=True, kw_only=True)
class MeasuredMemory:
    """What one rank's measured step holds, bytes (fields as StepMeasurement's where they apply), read off its
    phase peaks by `measured_fields`.

    ``params`` / ``grads`` / ``optimizer_states``: the rank's resident parameters at the start of iteration 2,
    gradients when the backward ends, optimizer states after the step. ``breakdown`` / ``phase_breakdown``: the
    tracker's categories at the step peak / each phase's peak.
    """

    params: int
    buffers: int
    inputs: int
    grads: int
    optimizer_states: int
    peak: int
    peak_phase: str
    peak_forward: int
    peak_backward: int
    peak_optimizer: int
    activations: int
    breakdown: dict[str, int] = field(default_factory=dict)
    phase_breakdown: dict[str, dict[str, int]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RankMeasurement(MeasuredMemory):
    """One rank of a sharded step (FSDP2 / ZeRO-1 / DDP): resident state sharded under FSDP; the breakdowns hold
    FSDP's categories too (``unsharded_params``, ``unsharded_grads``, ``all_gather``, ``reduce_scatter``)."""

    rank: int
    world: int
    zero: int
    #: bytes outside the categories: ``ddp_buckets`` (DDP's gradient buckets, in every total), ``reserved_peak``
    #: (CUDA: the caching allocator's reserved bytes at their peak); and one count, ``gloo_unsettled_reduce_scatters``
    #: (FSDP2 on gloo: reduce-scatters whose input clone outlived measure/gloo.py's wait; absent when none).
    extra: dict[str, int] = field(default_factory=dict)


def _flatten(snapshot: dict[Any, dict[Any, int]]) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    for dev_snap in snapshot.values():
        for key, value in dev_snap.items():
            name = CATEGORY_NAMES.get(str(getattr(key, "value", key)))
            if name is not None:
                out[name] += int(value)
    return out


@contextlib.contextmanager
def fake_process_group(rank: int, world: int) -> Iterator[Any]:
    """This process as rank `rank` of `world` on a fake process group; yields the 1-D CPU device mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world,))
    finally:
        dist.destroy_process_group()


def _validate(world: int, zero: int, rank: int) -> None:
    if zero not in (1, 2, 3):
        raise StepbillError(f"sharded measurement needs --zero 1, 2 or 3, got {zero!r}")
    if world < 2:
        raise StepbillError(f"sharded measurement needs --dp >= 2, got {world}")
    if not 0 <= rank < world:
        raise StepbillError(f"--rank must be in 0..{world - 1}, got {rank}")


def measure_rank(
    config_dict: dict[str, Any],
    *,
    world: int,
    zero: int,
    rank: int = 0,
    micro_batch: int = 1,
    seq_len: int = 128,
    mode: Mode = "real",
    recipe: str | None = None,
    lr: float = 1e-4,
    optimizer_impl: str = "single",
) -> RankMeasurement:
    """Measure rank `rank` of `world` on a fake process group (see the module docstring). `recipe`: ZeRO-1 fp32
    or pure-bf16 (default fp32); ZeRO-2/3 FSDP_RECIPE only (the default); any other is refused, never replaced.
    `optimizer_impl`: AdamW's path, single (foreach=False) | foreach | fused."""
    require_torch()
    _validate(world, zero, rank)
    with fake_process_group(rank, world) as mesh:
        return measure_on_mesh(config_dict, mesh, world=world, zero=zero, rank=rank, micro_batch=micro_batch,
                               seq_len=seq_len, mode=mode, recipe=recipe, lr=lr, optimizer_impl=optimizer_impl)


def _local_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages of `tensors` (a DTensor counts its local shard)."""
    seen: dict[int, int] = {}
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        storage = local.untyped_storage()
        seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


class CudaPhasePeaks:
    """PhasePeaks' interface on the CUDA caching allocator: per phase, ``max_memory_allocated`` (``total``) and
    ``max_memory_reserved`` (``reserved``), the peak statistics reset at each phase boundary."""

    def __init__(self, device: Any, grads_bytes: Any = lambda: 0) -> None:
        self.device = device
        self.grads_bytes = grads_bytes  # called when a phase starts: the gradients alive then
        self.current: str | None = None
        self.peaks: dict[str, dict[str, int]] = {}
        self.marks: dict[str, dict[str, int]] = {}

    def _now(self) -> dict[str, int]:
        import torch

        torch.cuda.synchronize(self.device)
        return {"total": torch.cuda.memory_allocated(self.device), "reserved": torch.cuda.memory_reserved(self.device)}

    def close(self) -> None:
        import torch

        if self.current is not None:
            torch.cuda.synchronize(self.device)
            self.peaks[self.current] = {"total": torch.cuda.max_memory_allocated(self.device),
                                        "reserved": torch.cuda.max_memory_reserved(self.device)}
            self.marks[f"end:{self.current}"] = self._now()
        self.current = None

    def __call__(self, phase: str) -> None:
        import torch

        self.close()
        self.marks[f"start:{phase}"] = {**self._now(), "grads": self.grads_bytes()}
        torch.cuda.reset_peak_memory_stats(self.device)
        self.current = phase


def _bucket_capturing_hook(seen: dict[int, Any]) -> Any:
    """A DDP comm hook that records each bucket's flat buffer, then runs torch's default all-reduce hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects any annotation but dist.GradBucket
        seen[bucket.index()] = bucket.buffer()
        return allreduce_hook(state, bucket)

    return hook


def measure_on_mesh(
    config_dict: dict[str, Any],
    mesh: Any,
    *,
    world: int,
    zero: int,
    rank: int,
    micro_batch: int = 1,
    seq_len: int = 128,
    mode: Mode = "real",
    recipe: str | None = None,
    lr: float = 1e-4,
    device: str = "cpu",
    optimizer_impl: str = "single",
) -> RankMeasurement:
    """Measure this process's rank on `mesh` (a fake group's or a launched one's; see the module docstring).

    ``zero=0`` is DDP (launched runs only): ``DistributedDataParallel`` with its defaults (25 MiB buckets, the
    first 1 MiB, ``gradient_as_bucket_view=False``). Its flat gradient buckets are allocated outside the
    tracked iteration (at construction, and once more when DDP rebuilds them in the order gradients arrived,
    in iteration 2) and kept for the run; the allocator sees no bucket allocation in a steady-state step.
    MemTracker would count them only from their first touch in the backward, as new Temp: so they are captured
    by a comm hook running torch's own ``default_hooks.allreduce_hook`` (the Python twin of DDP's built-in
    all-reduce: divide and all-reduce the bucket in place) and registered with the tracker before the measured
    iteration; ``extra["ddp_buckets"]`` holds their bytes. DDP warms up two iterations and the third is
    measured. ``device="cuda"`` measures with the
    caching allocator's statistics instead of the trackers (``extra["reserved_peak"]`` beside the peak).
    """
    require_torch()
    import torch
    import torch.distributed as dist

    fsdp = zero in (2, 3)
    recipe = measured_recipe(zero, recipe)
    adamw = adamw_flags(optimizer_impl)
    cuda = device.startswith("cuda")
    if cuda and mode != "real":
        raise StepbillError("--device cuda measures real tensors only")
    param_dtype = "bf16" if recipe == "pure-bf16" else "fp32"
    settings: dict[str, Any] = {"world": world, "zero": zero, "rank": rank, "micro_batch": micro_batch,
                                "seq_len": seq_len, "mode": mode, "recipe": recipe, "device": device}
    if fsdp:
        settings["mixed_precision"] = dict(FSDP_SETUP)
    extra: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        fake_mode = new_fake_mode() if mode == "fake" else None
        model = build_model(config_dict, dtype=param_dtype, fake_mode=fake_mode, device=device)
        # FSDP computes in bf16 (grouped_mm's bf16 kernel is fine); fp32 compute needs the fallback.
        stack.enter_context(hf_patches(force_grouped_mm_fallback=not fsdp and param_dtype == "fp32"))
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        ddp = None
        ddp_buckets: dict[int, Any] = {}
        settled = None
        if fsdp:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in decoder_layers(model):
                fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
            fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
            if not cuda and dist.get_backend(mesh.get_group()) == "gloo":
                from stepbill.measure.gloo import settle_reduce_scatters

                # gloo's reduce-scatter clones its input; the clone is freed on gloo's worker thread at a time
                # that races the main thread: wait for it, so every run measures the same (measure/gloo.py)
                settled = settle_reduce_scatters([*decoder_layers(model), model])
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr, **adamw)
            states_of = optimizer
        elif zero == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr,
                                                **adamw)
            # ZeroRedundancyOptimizer keeps the states in its local optimizer (`optim`), not in its own `state`
            states_of = optimizer.optim
        else:
            from torch.nn.parallel import DistributedDataParallel

            ddp = DistributedDataParallel(model, device_ids=[torch.device(device).index or 0] if cuda else None)
            ddp.register_comm_hook(None, _bucket_capturing_hook(ddp_buckets))
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr, **adamw)
            states_of = optimizer
        runner = ddp if ddp is not None else model
        vocab = int(model.config.vocab_size)
        gen = torch.Generator().manual_seed(0) if fake_mode is None else None
        input_ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=gen).to(device)

        def autocast() -> Any:
            if recipe == "amp-bf16":
                return torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16)
            return contextlib.nullcontext()

        def iteration(on_phase: Any = lambda p: None) -> None:
            runner.train()  # the HF Trainer's step, as session.StepSession.iteration
            on_phase("forward")
            with autocast():  # amp-bf16 (DDP): bf16 compute on fp32 parameters, as session.StepSession
                loss = runner(input_ids=input_ids, labels=input_ids, use_cache=False).loss
            on_phase("backward")
            loss.backward()
            del loss
            if zero == 1:
                for p in model.parameters():
                    if p.grad is not None:
                        dist.all_reduce(p.grad)
            on_phase("optimizer")
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for _ in range(2 if ddp is not None else 1):
            iteration()
        buckets = list(ddp_buckets.values())  # the rebuilt ones: iteration 2 ran on them
        if ddp is not None:
            extra["ddp_buckets"] = _local_bytes(buckets)
        phases: Any
        if cuda:
            phases = CudaPhasePeaks(torch.device(device), lambda: _local_bytes(
                p.grad for p in model.parameters() if p.grad is not None))
            iteration(phases)
            phases.close()
        else:
            if fsdp:
                from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

                tracker: Any = FSDPMemTracker(model, optimizer)
                tracker.track_inputs((input_ids,))
            else:
                from torch.distributed._tools.mem_tracker import MemTracker

                tracker = MemTracker()
                # DDP's buckets exist before the tracked iteration: registered here (as Other), MemTracker
                # counts them from the start instead of as new Temp when backward first touches them.
                tracker.track_external(model, states_of, input_ids, *buckets)
            phases = PhasePeaks(tracker, flatten=_flatten)
            with tracker:
                iteration(phases)
                phases.close()
        if cuda:  # the allocator has no categories: count the resident tensors themselves
            states = [v for st in states_of.state.values() for v in st.values() if torch.is_tensor(v)]
            resident = {"params": _local_bytes(model.parameters()), "buffers": _local_bytes(model.buffers()),
                        "inputs": _local_bytes([input_ids]), "optimizer": _local_bytes(states)}
            for key in ("start:forward", "end:backward", "end:optimizer"):
                phases.marks[key] = {**resident, **phases.marks[key]}
            phases.marks["end:backward"]["grads"] = phases.marks["start:optimizer"]["grads"]
            activations = phases.marks["end:forward"]["total"] - phases.marks["start:forward"]["total"]
            extra["reserved_peak"] = max(p["reserved"] for p in phases.peaks.values())
            for p in PHASES:
                phases.peaks[p]["activations"] = activations
    if settled is not None and settled.unsettled:  # a gloo clone outlived the wait: this rank's peak may be high
        extra["gloo_unsettled_reduce_scatters"] = settled.unsettled
    if ddp is not None:  # resident all step: tracked as Other (inputs) on CPU, counted by the allocator on CUDA
        for snap in [*phases.peaks.values(), *phases.marks.values()]:
            if not cuda:
                snap["inputs"] = snap.get("inputs", 0) - extra["ddp_buckets"]
            snap["ddp_buckets"] = extra["ddp_buckets"]
    return RankMeasurement(rank=rank, world=world, zero=zero, **measured_fields(phases), settings=settings,
                           extra=extra)


def measured_fields(phases: Any) -> dict[str, Any]:
    """What every rank measurement reads off its PhasePeaks: resident state at the start of iteration 2, grads
    when the backward ends, optimizer states after the step, each phase's peak and its breakdown."""
    peaks = phases.peaks
    totals = {p: peaks[p]["total"] for p in PHASES}
    peak_phase = max(PHASES, key=lambda p: (totals[p], -PHASES.index(p)))
    start = phases.marks["start:forward"]
    return {
        "params": start["params"], "buffers": start["buffers"], "inputs": start["inputs"],
        "grads": phases.marks["end:backward"].get("grads", 0),
        "optimizer_states": phases.marks["end:optimizer"].get("optimizer", 0),
        "peak": totals[peak_phase], "peak_phase": peak_phase,
        "peak_forward": totals["forward"], "peak_backward": totals["backward"], "peak_optimizer": totals["optimizer"],
        "activations": peaks["forward"]["activations"],
        "breakdown": dict(peaks[peak_phase]),
        "phase_breakdown": {p: dict(peaks[p]) for p in PHASES},
    }
