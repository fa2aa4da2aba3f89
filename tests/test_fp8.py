"""--recipe fp8 (Transformer Engine's defaults) and fp8-deepseek (DeepSeek-V3's, arXiv 2412.19437 §3.3): which
tensors are fp8, the memory bill, GEMMs timed at the fp8 peak and the rest at bf16 (issue 10 item 2)."""

from __future__ import annotations

import pytest

from stepbill.engine import fp8
from stepbill.engine.bill import make_bill
from stepbill.errors import StepbillError
from stepbill.spec import load_preset
from stepbill.spec.hardware import load_gpu
from stepbill.spec.recipe import make_recipe, precision
from tests.conftest import run_cli

LLAMA3 = load_preset("llama3-8b")
SEQ = 4096


def _bill(recipe: str, gpu: str | None = "h100-sxm", efficiency: float | None = None,
          **kw):  # type: ignore[no-untyped-def]
    return make_bill(LLAMA3, make_recipe(recipe, seq_len=SEQ, **kw), gpu=load_gpu(gpu) if gpu else None,
                     efficiency=efficiency)


def test_deepseek_v3_stated_choices() -> None:
    """DeepSeek-V3 §3.3: E4M3 on all tensors; 1×128 tiles for activations, 128×128 blocks for weights; master
    weights and gradients kept in fp32, AdamW's first and second moments in bf16; embedding, output head, MoE
    gating, norms and attention operators in their original precision."""
    conv = fp8.CONVENTIONS["deepseek"]
    assert (conv["forward_format"], conv["gradient_format"]) == ("E4M3", "E4M3")
    assert conv["activation_tile"] == (1, 128) and conv["weight_block"] == (128, 128)
    assert conv["moments"] == "bf16"
    for kept in ("embedding", "output head", "MoE gating", "norms", "attention"):
        assert kept in conv["high_precision"]
    p = precision("fp8-deepseek")
    assert (p.weights, p.grads, p.master, p.state, p.compute) == (2, 4, 4, 2, "fp8")


def test_transformer_engine_defaults() -> None:
    """TE's recipe.DelayedScaling(): fp8_format HYBRID (E4M3 forward, E5M2 backward), amax_history_len 1024,
    per-tensor scales; weights bf16 + fp32 master (mixed-bf16's 16 B) plus an fp8 copy and transpose of each GEMM
    weight."""
    conv = fp8.CONVENTIONS["te"]
    assert (conv["forward_format"], conv["gradient_format"]) == ("E4M3", "E5M2")
    assert "1,024" in conv["scaling"] and "per-tensor" in conv["scaling"]
    p = precision("fp8")
    assert (p.weights, p.grads, p.master, p.state, p.compute) == (2, 2, 4, 4, "fp8")


def test_te_memory_adds_the_fp8_weight_copies() -> None:
    """`fp8` = mixed-bf16 + 2 B per GEMM weight: every Linear of the layers (7 per Llama layer), not the
    embedding or the LM head."""
    b, ref = _bill("fp8", None), _bill("mixed-bf16", None)
    items = {x.name: x.value for x in b.resident_items}
    gemm = 32 * (4096 * 4096 * 2 + 1024 * 4096 * 2 + 3 * 14336 * 4096)
    assert items["weights.fp8"] == 2 * gemm
    assert b["memory.resident"].value == ref["memory.resident"].value + 2 * gemm
    assert b["recipe.fp8"].value == gemm
    assert "eager convention" in b["recipe.fp8_activations"].explain()


def test_te_caches_linear_inputs_in_fp8() -> None:
    """Llama-3-8B layer (ideal, bf16: 2 × (4·4096 + 3·14336) = 128 KiB/token): TE stores the QKV and gate/up inputs
    and the down input in fp8 (1 B), keeps the attention output in bf16 for the attention backward and adds the
    output projection's fp8 copy: 128 KiB − 4096 − 4096 − 14336 + 4096 = 110 KiB per token."""
    rows = {r.name: r for r in _bill("fp8", None).layer_rows["dense"]}
    assert {n: rows[n].dtype_bytes for n in ("attn.norm_out", "mlp.norm_out", "mlp.product", "attn.core_out_fp8")} \
        == dict.fromkeys(("attn.norm_out", "mlp.norm_out", "mlp.product", "attn.core_out_fp8"), 1)
    assert rows["attn.core_out"].dtype_bytes == rows["mlp.gate"].dtype_bytes == rows["attn.q"].dtype_bytes == 2
    assert sum(r.bytes_per_token for r in rows.values()) == 128 * 1024 - 4096 - 4096 - 14336 + 4096


def test_deepseek_caches_fp8_with_1x128_scales() -> None:
    """DeepSeek-V3: Linear inputs in fp8 with an fp32 scale per 1×128 tile; in MoE layers the SwiGLU's gate and
    up cached in fp8 and its output recomputed; the router's input (gating) stays bf16."""
    rows = {r.name: r for r in _bill("fp8-deepseek", None).layer_rows["dense"]}
    assert rows["mlp.product"].dtype_bytes == 1 and rows["mlp.product_scales"].width == 14336 // 128
    assert rows["mlp.product_scales"].dtype_bytes == 4
    v3 = make_bill(load_preset("deepseek-v3"), make_recipe("fp8-deepseek", seq_len=SEQ))
    moe = {r.name: r for r in v3.layer_rows["moe"]}
    assert "moe.product" not in moe
    assert moe["moe.gate"].dtype_bytes == moe["moe.up"].dtype_bytes == moe["moe.dispatched"].dtype_bytes == 1
    assert moe["moe.norm_out"].dtype_bytes == 2  # the router reads it: MoE gating in its original precision
    bf16 = make_bill(load_preset("deepseek-v3"), make_recipe("bf16-moments", seq_len=SEQ))
    assert v3["memory.activations"].value < bf16["memory.activations"].value


def test_deepseek_memory_is_bf16_moments() -> None:
    """fp8-deepseek's resident bill: bf16 weights 2, fp32 grads 4 and master 4, bf16 moments 2 + 2 = 14 B/param,
    the bf16-moments recipe's; no resident fp8 weight copy."""
    b, ref = _bill("fp8-deepseek", None), _bill("bf16-moments", None)
    assert b["memory.resident"].value == ref["memory.resident"].value == 14 * b["params.total"].value
    assert "weights.fp8" not in {x.name for x in b.resident_items}


@pytest.mark.parametrize("recipe", ["fp8", "fp8-deepseek"])
def test_flops_unchanged_by_precision(recipe: str) -> None:
    b, ref = _bill(recipe, None), _bill("mixed-bf16", None)
    for key in ("flops.step", "flops.forward", "flops.model", "flops.step_noncausal", "flops.recompute"):
        assert b[key].value == ref[key].value


def test_time_uses_the_fp8_peak() -> None:
    """H100 SXM dense fp8 1,978.9 TFLOP/s (2× bf16): every FLOP over the fp8 peak, plus the attention core and LM
    head's FLOPs (fwd + 2× bwd) paying the difference to the bf16 peak."""
    gpu = load_gpu("h100-sxm")
    b, ref = _bill("fp8", efficiency=0.5), _bill("mixed-bf16", efficiency=0.5)  # the override's closed forms
    assert b.time is not None and ref.time is not None
    t = b.time
    assert t["time.peak"].value == gpu.fp8_flops == 1978.9e12
    assert t["time.compute"].value == pytest.approx(t["time.rank_flops"].value / (1978.9e12 * 0.5))
    bf16_flops = 3 * (b["flops.attention"].value + b["flops.lm_head"].value)
    share = bf16_flops * (1 / 989.4e12 - 1 / 1978.9e12) / 0.5
    assert t["time.fp8_bf16_share"].value == pytest.approx(share)
    assert t["time.roofline"].value == pytest.approx(max(t["time.compute"].value, t["time.memory"].value) + share)
    assert t["time.step"].value < ref.time["time.step"].value
    # the GEMM part alone at fp8 (all FLOPs at fp8 + the bf16 share) equals GEMMs / fp8 + rest / bf16
    gemm = t["time.rank_flops"].value - bf16_flops
    assert t["time.compute"].value + share == pytest.approx((gemm / 1978.9e12 + bf16_flops / 989.4e12) / 0.5)


def test_gpu_without_fp8_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(StepbillError, match="fp8 tensor cores"):
        _bill("fp8", "a100-80gb")
    code, out, err = run_cli(["bill", "llama3-8b", "--recipe", "fp8-deepseek", "--gpu", "a100"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["bill", "llama3-8b", "--recipe", "fp8", "--gpu", "h800"], capsys)
    assert code == 0 and "recipe.fp8" in out and "fp8 peak" in out, err


def test_per_op_model_adds_the_bf16_share_to_the_kernels() -> None:
    """Under the per-op model the attention kernels run at the bf16 peak at their own efficiency — the bf16 bill's
    time.attention exactly (both recipes keep the attention core in bf16) — the GEMMs at the fp8 peak (half the bf16
    bill's here, the same shapes), and the bf16 share is the LM head's GEMM alone, serial with the kernels at the
    GEMMs' achieved efficiency; fp8 is faster than bf16 there too."""
    b, ref = _bill("fp8"), _bill("mixed-bf16")
    assert b.time is not None and ref.time is not None
    t = b.time
    assert t["time.attention"].value == ref.time["time.attention"].value
    assert t["time.gemm"].value == pytest.approx(ref.time["time.gemm"].value / 2, rel=0.05)
    kernels = t["time.gemm"].value + t["time.attention"].value + t["time.memory_bound"].value
    assert t["time.roofline"].value == pytest.approx(kernels + t["time.fp8_bf16_share"].value)
    share = t["time.fp8_bf16_share"]
    assert share.inputs["eff"] == pytest.approx(t["time.gemm_efficiency"].value)
    assert share.inputs["flops"] == pytest.approx(3 * b["flops.lm_head"].value)  # forward, input and weight grads
    assert t["time.step"].value < ref.time["time.step"].value
