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
from stepbill.measure.build import Mode, build_model, hf_patches, new_fake_mode, require_torch
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


def measured_recipe(zero: int, recipe: str | None) -> str:
    """The recipe measured under ZeRO-`zero`: `recipe` when it can be measured there, the stage's default when
    None (fp32; FSDP_RECIPE under ZeRO-2/3); anything else is refused in one line naming what can be measured."""
    choices = MEASURABLE.get(zero)
    if choices is None:
        raise StepbillError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if recipe is None:
        return choices[0]
    if recipe not in choices:
        what = (f"FSDP2's mixed precision only: --recipe {FSDP_RECIPE} (fp32 sharded params, grads and AdamW "
                "states; bf16 compute; fp32 reduce-scatter)" if zero in (2, 3) else "--recipe " + " | ".join(choices))
        where = f" under ZeRO-{zero}" if zero else ""
        raise StepbillError(f"check{where} measures {what}; got --recipe {recipe!r}")
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


@dataclass(frozen=True)
class RankMeasurement:
    """Measured memory of one rank of a sharded step, bytes (fields as StepMeasurement's where they apply).

    ``params`` / ``grads`` / ``optimizer_states``: the rank's resident (sharded under FSDP) parameters at the
    start of iteration 2, gradients when the backward ends, optimizer states after the step.
    ``breakdown`` / ``phase_breakdown``: categories at the step peak / each phase's peak, FSDP's included
    (``unsharded_params``, ``unsharded_grads``, ``all_gather``, ``reduce_scatter``).
    """

    rank: int
    world: int
    zero: int
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


def decoder_layers(model: Any) -> list[Any]:
    """The decoder layers of a transformers causal LM (model.model.layers, or transformer.h / gpt_neox.layers)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return list(obj)
    raise StepbillError(f"cannot find the decoder layers of {type(model).__name__}")


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
) -> RankMeasurement:
    """Measure rank `rank` of `world` (see the module docstring). `recipe`: ZeRO-1 fp32 or pure-bf16 (default
    fp32); ZeRO-2/3 FSDP_RECIPE only (the default); any other is refused, never replaced."""
    require_torch()
    import torch

    _validate(world, zero, rank)
    fsdp = zero in (2, 3)
    recipe = measured_recipe(zero, recipe)
    param_dtype = "bf16" if recipe == "pure-bf16" else "fp32"
    settings: dict[str, Any] = {"world": world, "zero": zero, "rank": rank, "micro_batch": micro_batch,
                                "seq_len": seq_len, "mode": mode, "recipe": recipe}
    if fsdp:
        settings["mixed_precision"] = dict(FSDP_SETUP)
    with contextlib.ExitStack() as stack:
        mesh = stack.enter_context(fake_process_group(rank, world))
        fake_mode = new_fake_mode() if mode == "fake" else None
        model = build_model(config_dict, dtype=param_dtype, fake_mode=fake_mode)
        # FSDP computes in bf16 (grouped_mm's bf16 kernel is fine); fp32 compute needs the fallback.
        stack.enter_context(hf_patches(force_grouped_mm_fallback=not fsdp and param_dtype == "fp32"))
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        if fsdp:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in decoder_layers(model):
                fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
            fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False, fused=False)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr,
                                                foreach=False, fused=False)
        vocab = int(model.config.vocab_size)
        gen = torch.Generator().manual_seed(0) if fake_mode is None else None
        input_ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=gen)

        def iteration(on_phase: Any = lambda p: None) -> None:
            import torch.distributed as dist

            on_phase("forward")
            loss = model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
            on_phase("backward")
            loss.backward()
            del loss
            if not fsdp:
                for p in model.parameters():
                    if p.grad is not None:
                        dist.all_reduce(p.grad)
            on_phase("optimizer")
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        iteration()
        if fsdp:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

            tracker = FSDPMemTracker(model, optimizer)
            tracker.track_inputs((input_ids,))
        else:
            from torch.distributed._tools.mem_tracker import MemTracker

            tracker = MemTracker()
            # ZeroRedundancyOptimizer keeps the states in its local optimizer (`optim`), not in its own `state`
            tracker.track_external(model, optimizer.optim, input_ids)
        phases = PhasePeaks(tracker, flatten=_flatten)
        with tracker:
            iteration(phases)
            phases.close()
    peaks = phases.peaks
    totals = {p: peaks[p]["total"] for p in PHASES}
    peak_phase = max(PHASES, key=lambda p: (totals[p], -PHASES.index(p)))
    start = phases.marks["start:forward"]
    return RankMeasurement(
        rank=rank, world=world, zero=zero,
        params=start["params"], buffers=start["buffers"], inputs=start["inputs"],
        grads=phases.marks["end:backward"]["grads"],
        optimizer_states=phases.marks["end:optimizer"]["optimizer"],
        peak=totals[peak_phase], peak_phase=peak_phase,
        peak_forward=totals["forward"], peak_backward=totals["backward"], peak_optimizer=totals["optimizer"],
        activations=peaks["forward"]["activations"],
        breakdown=dict(peaks[peak_phase]),
        phase_breakdown={p: dict(peaks[p]) for p in PHASES},
        settings=settings,
    )
