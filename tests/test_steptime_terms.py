"""One model of time: step_time's lines are made from step_terms' numbers, and the numbers-only path the planner's
floors read (bill_step_terms) gives exactly (==, not approx) the values of the bill's time.* lines — dense, MoE,
pipeline, the --efficiency override, offload, fp8 and QLoRA recipes."""

from __future__ import annotations

from typing import Any

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.bill_parts import bill_step_terms, bill_step_time
from stepbill.engine.plan.bounds import EMPTY_RANK
from stepbill.engine.timing.step_terms import StepTerms
from stepbill.spec import load_preset
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe

# (id, model, make_recipe keywords, Parallel keywords, GPU, efficiency)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str, float | None]] = [
    ("dense-tp-dp", "llama3-8b", {"seq_len": 4096}, {"tp": 2, "sp": True, "dp": 4, "zero": 1, "micro_batches": 4},
     "h100-sxm", None),
    ("dense-efficiency", "llama3-8b", {"seq_len": 4096, "recompute": "full"}, {"tp": 2, "dp": 4, "micro_batches": 4},
     "h100-sxm", 0.45),
    ("dense-pipeline", "llama3-70b", {"seq_len": 4096, "recompute": "selective:core_attn"},
     {"tp": 8, "pp": 4, "dp": 2, "pp_schedule": "interleaved", "vpp": 2, "micro_batches": 8}, "h100-sxm", None),
    ("dense-uneven-efficiency", "llama3-70b", {"seq_len": 4096}, {"tp": 8, "pp": 3, "pp_layers": (26, 27, 27),
                                                                   "micro_batches": 6}, "a100-80gb", 0.5),
    ("offload", "llama3-70b", {"seq_len": 4096, "recompute": "full"},
     {"dp": 16, "zero": 3, "offload_optimizer": True, "offload_activations": True}, "h100-sxm", None),
    ("offload-efficiency", "llama3-70b", {"seq_len": 4096, "recompute": "full"},
     {"dp": 16, "zero": 3, "offload_optimizer": True, "offload_activations": True}, "h100-sxm", 0.4),
    ("moe-ep", "mixtral-8x7b", {"seq_len": 4096}, {"dp": 8, "ep": 8, "zero": 1, "micro_batches": 4}, "h100-sxm",
     None),
    ("moe-pipeline", "deepseek-v3", {"recipe": "bf16-moments", "seq_len": 4096, "recompute": "every:2"},
     {"tp": 2, "pp": 16, "ep": 64, "dp": 64, "zero": 1, "micro_batches": 32}, "h100-sxm", None),
    ("moe-cp-efficiency", "deepseek-v3", {"seq_len": 8192, "recompute": "full"},
     {"tp": 4, "cp": 2, "pp": 8, "ep": 8, "dp": 32, "zero": 3, "micro_batches": 16}, "h100-sxm", 0.35),
    ("fp8", "llama3-8b", {"recipe": "fp8", "seq_len": 4096}, {"dp": 8, "zero": 1}, "h100-sxm", None),
    ("fp8-efficiency", "llama3-8b", {"recipe": "fp8", "seq_len": 4096}, {"dp": 8, "zero": 1}, "h100-sxm", 0.5),
    ("qlora", "llama2-7b", {"recipe": "qlora-nf4", "lora_rank": 64, "seq_len": 4096}, {}, "a100-80gb", None),
    ("lora-efficiency", "llama2-7b", {"lora_rank": 8, "lora_targets": ("all-linear",), "recompute": "full"}, {},
     "h100-sxm", 0.5),
]


def _values(t: StepTerms) -> dict[str, float]:
    """The time.* line each number of `t` is (steptime.step_time_lines names them)."""
    off = t.offload
    out = {
        "time.model_flops": t.model_flops, "time.model_flops_causal": t.model_flops_causal,
        "time.rank_flops": t.executed, "time.recompute_flops": t.recompute, "time.peak": t.peak,
        "time.hbm_traffic": t.hbm_bytes, "time.memory": t.t_memory, "time.bubble": t.bubble,
        "time.compute": t.t_compute, "time.roofline": t.t_rank, "time.pipeline": t.t_pipe,
        "time.comm_exposed": t.comm_exposed, "time.comm_hideable": t.comm_hideable, "time.comm_spill": t.spill,
        "time.step": t.t_step, "time.mfu": t.mfu, "time.mfu_causal": t.mfu_causal, "time.hfu": t.hfu,
        "time.tokens_per_s": t.tokens_per_s, "time.tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
        "time.offload_exposed": off.exposed, "time.offload_hideable": off.hideable,
        "time.offload_grads_down": off.grads_down, "time.offload_cpu_optimizer": off.cpu_optimizer,
        "time.offload_weights_up": off.weights_up, "time.offload_activations": off.activations,
        **{x.name: x.value for x in t.precision_lines},
    }
    if t.stage_compute is not None:
        sc = t.stage_compute
        out.update({"time.comm_critical": t.comm_critical, "time.gemm": sc.gemm,
                    "time.gemm_efficiency": sc.gemm_efficiency, "time.attention": sc.attention,
                    "time.memory_bound": sc.memory_bound, "time.optimizer_step": sc.optimizer})
    return out


def _case(case: tuple) -> tuple:  # type: ignore[type-arg]
    _, model, recipe_kw, parallel_kw, gpu_name, efficiency = case
    return load_preset(model), make_recipe(**recipe_kw, parallel=Parallel(**parallel_kw)), load_gpu(gpu_name), \
        efficiency


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_terms_are_the_bills_time_lines(case: tuple) -> None:  # type: ignore[type-arg]
    """bill_step_terms with the bill's judged rank gives every time.* line of make_bill's, value for value (==);
    every line of the bill is one of the terms' numbers."""
    spec, recipe, gpu, efficiency = _case(case)
    bill = make_bill(spec, recipe, gpu.usable_bytes, gpu=gpu, efficiency=efficiency)
    assert bill.time is not None
    terms = bill_step_terms(spec, recipe, bill.worst_rank, gpu, efficiency)
    values = _values(terms)
    assert set(bill.time.lines) <= set(values)
    for name, line in bill.time.lines.items():
        assert line.value == values[name], name
    assert (terms.stage_compute is None) == (efficiency is not None)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_terms_of_an_empty_rank_are_the_lines_of_one(case: tuple) -> None:  # type: ignore[type-arg]
    """The planner's floors read bill_step_terms of bounds.EMPTY_RANK: the same numbers as bill_step_time's lines
    for that rank."""
    spec, recipe, gpu, efficiency = _case(case)
    lines = bill_step_time(spec, recipe, EMPTY_RANK, gpu, efficiency).lines
    values = _values(bill_step_terms(spec, recipe, EMPTY_RANK, gpu, efficiency))
    assert set(lines) <= set(values)
    assert all(line.value == values[name] for name, line in lines.items())


def test_offload_terms_are_zero_without_offload() -> None:
    """Nothing offloaded: no offload line, and the terms' offload seconds are 0."""
    spec, recipe, gpu, _ = _case(CASES[0])
    terms = bill_step_terms(spec, recipe, EMPTY_RANK, gpu)
    assert terms.offload.exposed == terms.offload.hideable == 0.0
    assert not any(name.startswith("time.offload_") and name not in ("time.offload_exposed", "time.offload_hideable")
                   for name in bill_step_time(spec, recipe, EMPTY_RANK, gpu).lines)
