"""saved_tensors on a tiny llama: what one decoder layer keeps for backward, and its widths."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")

from stepbill.measure.saved import saved_tensors, total_bytes
from stepbill.measure.tiny import TINY_CONFIGS

B, T = 2, 64


def _layer0(rows: list, fp: int) -> dict[str, list[tuple[int, str]]]:
    """module-relative path -> [(bytes per token, first saver)] of layer 0's activations."""
    out: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        if r.kind == "activation" and r.module.startswith("model.layers.0"):
            key = r.module.removeprefix("model.layers.0").lstrip(".")
            out.setdefault(key, []).append((r.bytes // (B * T), f"{r.node}.{r.argument}"))
    return out


def test_llama_layer_rows_fp32() -> None:
    rows = saved_tensors(TINY_CONFIGS["llama"], micro_batch=B, seq_len=T, mode="fake")
    layer = _layer0(rows, 4)
    h, f, q, kvw = 128, 176, 128, 64  # hidden, ffn, q width (4·32), kv width (2·32)
    assert layer["self_attn.q_proj"] == [(4 * h, "MmBackward0.self")]  # normed input, shared by q/k/v
    sdpa = dict((s.split(".")[1], b) for b, s in layer["self_attn"] if s.startswith("ScaledDot"))
    assert sdpa == {"query": 4 * q, "key": 4 * kvw, "value": 4 * kvw, "logsumexp": 4 * 4, "output": 4 * q}
    assert layer["mlp.act_fn"] == [(4 * f, "SiluBackward0.self")]
    assert sorted(b for b, _ in layer["mlp"]) == [4 * f, 4 * f]  # act(gate) and up, for the product
    assert layer["mlp.down_proj"] == [(4 * f, "MmBackward0.self")]
    assert [b for b, _ in layer["input_layernorm"]] == [4 * h, 4, 4 * h]  # x (fp32), 1/rms, x̂
    # RoPE cos/sin: one (T, head_dim) table each, shared by the batch and by every layer.
    rope = [r for r in rows if r.node == "MulBackward0" and r.shape == (1, 1, T, 32)]
    assert len(rope) == 2 and rope[0].module == "model.layers.0.self_attn"


def test_llama_bf16_keeps_fp32_norm_and_loss() -> None:
    rows = saved_tensors(TINY_CONFIGS["llama"], recipe="pure-bf16", micro_batch=B, seq_len=T, mode="fake")
    norm = [r for r in rows if r.module == "model.layers.0.input_layernorm" and r.kind == "activation"]
    assert [r.dtype for r in norm] == ["float32", "float32", "bfloat16"]
    loss = [r for r in rows if r.node == "LogSoftmaxBackward0"]
    assert loss[0].dtype == "float32" and loss[0].bytes == B * T * 320 * 4  # logits upcast for the loss


def test_fake_equals_real_and_recompute_keeps_layer_inputs() -> None:
    kw = {"micro_batch": B, "seq_len": T}
    real = saved_tensors(TINY_CONFIGS["llama"], mode="real", **kw)
    fake = saved_tensors(TINY_CONFIGS["llama"], mode="fake", **kw)
    assert [(r.bytes, r.shape, r.node) for r in real] == [(r.bytes, r.shape, r.node) for r in fake]
    full = saved_tensors(TINY_CONFIGS["llama"], mode="fake", recompute="full", **kw)
    assert total_bytes(full) < total_bytes(fake) / 2
