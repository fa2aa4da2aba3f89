"""measure_step: fake equals real to the byte, closed forms of params/grads/states, recompute."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")

from stepbill.errors import StepbillError  # noqa: E402
from stepbill.measure.step import StepMeasurement, measure_step  # noqa: E402
from stepbill.measure.tiny import TINY_CONFIGS  # noqa: E402

LLAMA = TINY_CONFIGS["llama"]
SHAPE = {"micro_batch": 2, "seq_len": 64}


def _bytes_fields(m: StepMeasurement) -> dict[str, object]:
    return {k: v for k, v in m.__dict__.items() if k != "settings"}


@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16", "amp-bf16"])
def test_fake_equals_real_to_the_byte(recipe: str) -> None:
    real = measure_step(LLAMA, recipe=recipe, mode="real", **SHAPE)
    fake = measure_step(LLAMA, recipe=recipe, mode="fake", **SHAPE)
    assert _bytes_fields(fake) == _bytes_fields(real)


@pytest.mark.parametrize("family", ["mixtral", "deepseek_v3"])
def test_fake_equals_real_moe_and_mla(family: str) -> None:
    kw = {"recipe": "fp32", "flops": False, **SHAPE}
    real = measure_step(TINY_CONFIGS[family], mode="real", **kw)
    fake = measure_step(TINY_CONFIGS[family], mode="fake", **kw)
    assert _bytes_fields(fake) == _bytes_fields(real)


def _param_bytes(recipe: str) -> tuple[int, int]:
    """(bytes of parameters, number of parameter tensors) of tiny llama, counted from the config."""
    h, f, v, heads, kv = 128, 176, 320, 4, 2
    d = h // heads
    per_layer = [h * h, h * kv * d, h * kv * d, h * h, h * f, h * f, f * h, h, h]
    tensors = [v * h, *per_layer * 2, h, v * h]  # embed, 2 layers, final norm, lm_head (untied)
    width = 2 if recipe == "pure-bf16" else 4
    return sum(tensors) * width, len(tensors)


@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16"])
@pytest.mark.parametrize("impl", ["single", "foreach", "fused"])
def test_params_grads_states_closed_form(recipe: str, impl: str) -> None:
    m = measure_step(LLAMA, recipe=recipe, optimizer_impl=impl, mode="fake", flops=False, **SHAPE)
    pbytes, ntensors = _param_bytes(recipe)
    assert m.params == pbytes
    assert m.grads == pbytes  # grads in the parameter dtype
    # AdamW: exp_avg and exp_avg_sq in the parameter dtype, plus one fp32 `step` scalar per tensor.
    assert m.optimizer_states == 2 * pbytes + 4 * ntensors
    assert m.inputs == 2 * 64 * 8  # int64 input ids (labels share the storage)
    # The optimizer phase holds params + grads + states at least; fused adds no per-tensor temporaries.
    floor = m.params + m.buffers + m.inputs + m.grads + m.optimizer_states
    assert m.peak_optimizer >= floor
    if impl == "fused":
        assert m.peak_optimizer - floor < 1024
    if impl == "foreach":  # foreach keeps a whole-model temporary (≈ one more copy of the params)
        assert m.peak_optimizer - floor >= pbytes


def test_peak_is_max_of_phases_and_breakdown_sums() -> None:
    m = measure_step(LLAMA, mode="fake", flops=False, **SHAPE)
    assert m.peak == max(m.peak_forward, m.peak_backward, m.peak_optimizer)
    assert m.peak == getattr(m, f"peak_{m.peak_phase}")
    parts = {k: v for k, v in m.breakdown.items() if k != "total"}
    assert sum(parts.values()) == m.breakdown["total"] == m.peak
    fwd = m.phase_breakdown["forward"]
    assert fwd["activations"] == m.activations and fwd["grads"] == 0


def test_recompute_full_lowers_forward_peak() -> None:
    none = measure_step(LLAMA, mode="fake", flops=False, **SHAPE)
    full = measure_step(LLAMA, mode="fake", recompute="full", flops=False, **SHAPE)
    assert full.peak_forward < none.peak_forward
    assert full.activations < none.activations
    assert full.params == none.params and full.optimizer_states == none.optimizer_states


def test_amp_keeps_fp32_params_and_caches_bf16_weights() -> None:
    fp32 = measure_step(LLAMA, recipe="fp32", mode="fake", flops=False, **SHAPE)
    amp = measure_step(LLAMA, recipe="amp-bf16", mode="fake", flops=False, **SHAPE)
    assert amp.params == fp32.params and amp.optimizer_states == fp32.optimizer_states
    assert amp.activations != fp32.activations


def test_bad_choice_is_one_clear_error() -> None:
    with pytest.raises(StepbillError, match="recipe"):
        measure_step(LLAMA, recipe="fp8", mode="fake")  # type: ignore[arg-type]
    with pytest.raises(StepbillError, match="model_type"):
        measure_step({"hidden_size": 8}, mode="fake")
