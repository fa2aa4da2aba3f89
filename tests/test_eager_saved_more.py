"""Eager rows for the supported families measure/tiny.py has no config for (mistral, qwen2, qwen3_moe,
deepseek_v2), against saved_tensors_hooks; and the eager API's one-line errors."""

from __future__ import annotations

import pytest

from stepbill.engine.activations.eager import EagerBytes, saved_bytes
from stepbill.errors import StepbillError
from stepbill.spec.hf import from_hf_config
from stepbill.spec.presets import load_model

BYTES = {"fp32": EagerBytes(4, 4), "pure-bf16": EagerBytes(2, 2), "amp-bf16": EagerBytes(2, 4)}


def _configs() -> dict[str, dict]:
    tiny = pytest.importorskip("stepbill.measure.tiny")
    llama, qwen3, v3 = (tiny.TINY_CONFIGS[k] for k in ("llama", "qwen3", "deepseek_v3"))
    return {
        "mistral": {**llama, "model_type": "mistral", "sliding_window": None},
        "qwen2": {**llama, "model_type": "qwen2"},  # q/k/v biases: addmm saves the same input as mm
        "qwen3_moe": {**qwen3, "model_type": "qwen3_moe", "moe_intermediate_size": 48, "num_experts": 4,
                      "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": []},
        # softmax router with an fp32 upcast, complex RoPE (one complex64 table)
        "deepseek_v2": {**v3, "model_type": "deepseek_v2", "topk_method": "greedy", "n_group": 1, "topk_group": 1},
    }


@pytest.mark.parametrize("family", ["mistral", "qwen2", "qwen3_moe", "deepseek_v2"])
@pytest.mark.parametrize(("recipe", "micro_batch", "seq_len"), [("fp32", 2, 64), ("pure-bf16", 1, 96),
                                                                ("amp-bf16", 2, 48)])
def test_eager_saved_bytes_more_families(family: str, recipe: str, micro_batch: int, seq_len: int) -> None:
    saved = pytest.importorskip("stepbill.measure.saved", reason="measure/saved.py not present")
    config = _configs()[family]
    measured = saved.total_bytes(saved.saved_tensors(config, recipe=recipe, micro_batch=micro_batch, seq_len=seq_len))
    predicted = saved_bytes(from_hf_config(config, family), BYTES[recipe], seq_len, micro_batch)
    assert predicted == pytest.approx(measured, rel=0.01)


def test_eager_saved_bytes_rejects_other_recompute() -> None:
    with pytest.raises(StepbillError, match="recompute none or full") as err:
        saved_bytes(load_model("llama2-7b"), 2, 4096, 1, "selective")
    assert "\n" not in str(err.value)


def test_eager_bytes_is_the_compute_int() -> None:
    amp = EagerBytes(2, 4)
    assert amp == 2 and amp * 3 == 6 and amp.param == 4
    assert EagerBytes(4).param == 4


def test_mla_on_cuda_takes_the_memory_efficient_kernel() -> None:
    """MLA's unequal q·k and v head widths: CPU's SDPA runs its math path (B·H·S² fp32 P kept, what `check` measures),
    CUDA's the memory-efficient kernel (PyTorch's sdp_utils: flash needs equal widths, mem-efficient only q's and
    k's), which keeps the flash path's rows and no S² tensor — the eager rows follow `--device`."""
    import json as _json
    from pathlib import Path as _Path

    from stepbill.engine.activations import layer_rows
    from stepbill.engine.bill import activation_width
    from stepbill.spec.recipe import make_recipe

    spec = from_hf_config(_json.loads((_Path(__file__).parent / "data" / "hf_configs" / "deepseek-v2-lite.json")
                                      .read_text()))
    names = {}
    for device in ("cpu", "cuda"):
        recipe = make_recipe("pure-bf16", seq_len=1024, device=device)
        width = activation_width(recipe.precision, recipe.device, "eager")
        names[device] = {r.name for r in layer_rows(spec, "dense", width, "eager")}
    assert {"attn.probs", "attn.q_scaled"} <= names["cpu"]
    assert not {"attn.probs", "attn.q_scaled"} & names["cuda"] and "attn.logsumexp" in names["cuda"]
