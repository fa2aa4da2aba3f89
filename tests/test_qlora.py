"""--recipe qlora-nf4 (issue 10 item 2): NF4 codes and double-quantised constants as bitsandbytes stores them, the
bf16 rest of the base, fp32 adapters, the dequantisation transient and its time; --lora-targets all-linear."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stepbill.engine import quant
from stepbill.engine.bill import make_bill
from stepbill.engine.fit import Card, judge
from stepbill.engine.params import ParamTensor, param_inventory
from stepbill.engine.peak_items import peak_items
from stepbill.errors import StepbillError
from stepbill.spec import load_preset
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe
from tests.conftest import run_cli
from tests.test_bill_properties import specs

DATA = Path(__file__).parent / "data" / "bnb_linear4bit_quant_state.json"
LLAMA13 = load_preset("llama2-13b")


def _qlora(spec=LLAMA13, rank=16, targets=None, **kw):  # type: ignore[no-untyped-def]
    return make_bill(spec, make_recipe("qlora-nf4", lora_rank=rank, lora_targets=targets, **kw))


def test_double_quantisation_is_0_127_bits_per_param() -> None:
    """QLoRA §3: blocksize-64 fp32 constants cost 32/64 = 0.5 bits/param; double quantisation (8-bit constants,
    an fp32 constant per 256 of them) 8/64 + 32/(64·256) = 0.127 bits/param."""
    assert quant.constant_bits_per_param(double_quant=False) == 0.5
    assert quant.constant_bits_per_param() == pytest.approx(0.127, abs=5e-4)
    big = 13824 * 5120  # llama2-13b's MLP matrix: the per-tensor tables are lost in the rounding
    assert 8 * quant.constant_bytes(big) / big == pytest.approx(0.127, abs=5e-4)


def test_storage_matches_a_real_bitsandbytes_linear4bit() -> None:
    """Every byte of a real bitsandbytes 0.50.2 Linear4bit (NF4, compress_statistics=True) on CPU, recorded by
    scripts/measure_bnb_quant_state.py: codes, 8-bit absmax, fp32 nested absmax, code tables, offset."""
    data = json.loads(DATA.read_text())
    for row in data["tensors"]:
        n = math.prod(row["shape"])
        assert row["blocksize"] == quant.BLOCKSIZE and row["nested_blocksize"] == quant.NESTED_BLOCKSIZE
        assert quant.code_bytes(n) == row["codes_bytes"]
        measured = (row["absmax_bytes"] + row["nested_absmax_bytes"] + row["nested_code_bytes"]
                    + row["nf4_code_bytes"] + row["offset_bytes"])
        assert quant.constant_bytes(n) == measured, row["shape"]
        t = ParamTensor("mlp.up_proj.weight", "ffn", tuple(row["shape"]), 3, 3, "dense")
        assert quant.row_bytes(t) == (3 * row["codes_bytes"], 3 * measured)  # each copy its own quant_state


def test_matches_a_real_qlora_model() -> None:
    """tiny-llama loaded by transformers 5.24 with BitsAndBytesConfig (NF4, double quantisation, bf16 compute) on
    CPU, then PEFT 0.21 LoRA r 4 on q,v (scripts/measure_qlora_tiny.py): codes, constants, the bf16 rest (embedding,
    norms, LM head: not quantised) and the fp32 adapters, to the byte."""
    import json as _json

    from stepbill.spec.model import ModelSpec

    measured = _json.loads((DATA.parent / "qlora_tiny_llama_measured.json").read_text())
    got = measured["bytes"]
    spec = ModelSpec.from_dict(_json.loads((DATA.parent / "tiny-llama.json").read_text()))
    b = make_bill(spec, make_recipe("qlora-nf4", seq_len=16, lora_rank=4, lora_targets=("q_proj", "v_proj")))
    items = {x.name: x.value for x in b.resident_items}
    assert items["weights.nf4"] == got["codes"]
    assert items["weights.nf4_constants"] == got["constants"]
    assert items["weights.frozen"] == got["bf16_rest"]
    assert items["weights"] == got["adapters"] and got["adapter_dtypes"] == ["torch.float32"]
    assert any(name.endswith("lm_head.weight") for name in got["not_quantised"])


def test_live_linear4bit_if_installed() -> None:
    """The same, on the installed bitsandbytes (skipped where it is not installed)."""
    bnb = pytest.importorskip("bitsandbytes")
    torch = pytest.importorskip("torch")
    layer = bnb.nn.Linear4bit(100, 37, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                              quant_type="nf4").to("cpu")
    st = layer.weight.quant_state
    size = sum(t.numel() * t.element_size() for t in (st.absmax, st.state2.absmax, st.state2.code, st.code, st.offset))
    assert size == quant.constant_bytes(3700)
    assert layer.weight.data.numel() * layer.weight.data.element_size() == quant.code_bytes(3700)


def test_llama2_13b_qlora_every_byte() -> None:
    """bill llama2-13b --recipe qlora-nf4 --lora-rank 16: 280 Linears (40 layers × 7) in NF4, embeddings + LM
    head + norms (2 × 32000 × 5120 + 81 × 5120) in bf16, q,v adapters (40 × 2 × 16 × 10240 = 13,107,200) at
    4 + 4 + 4 + 4 B (fp32 weights, grads, AdamW m and v)."""
    b = _qlora()
    items = {x.name: x.value for x in b.resident_items}
    n_quant = 40 * (4 * 5120 * 5120 + 3 * 13824 * 5120)
    assert items["weights.nf4"] == n_quant // 2
    consts = 40 * (4 * quant.constant_bytes(5120 * 5120) + 3 * quant.constant_bytes(13824 * 5120))
    assert items["weights.nf4_constants"] == consts
    assert items["weights.frozen"] == (2 * 32000 * 5120 + 81 * 5120) * 2
    adapters = 40 * 2 * 16 * (5120 + 5120)
    assert b["params.trainable"].value == adapters == 13_107_200
    for name in ("weights", "grads", "optimizer.m", "optimizer.v"):
        assert items[name] == 4 * adapters
    assert "master" not in items
    assert b["memory.resident"].value == sum(items.values())
    assert b["params.total"].value == n_quant + 2 * 32000 * 5120 + 81 * 5120
    # the transient: the largest Linear (gate/up, 13824 × 5120) dequantised to bf16, alive inside each layer
    assert b["transient.dequant"].value == 13824 * 5120 * 2
    assert b.timeline is not None and b.timeline.peak.items["dequant"] == 13824 * 5120 * 2
    assert sum(x.value for x in peak_items(b)) == b["memory.peak"].value  # the peak's items still add up
    # checkpoint: the adapters and their states only (fp32 weights are their own master)
    assert b["checkpoint.bytes"].value == 3 * 4 * adapters


def test_llama2_13b_qlora_fits_a_4090() -> None:
    """The question of issue 10: a 13B on a 24 GB card. Full LoRA's bf16 base does not fit; QLoRA's does, with
    headroom, on the eager convention's peak the verdict judges."""
    card = Card.from_gpu(load_gpu("rtx-4090"))
    fit_q = judge(_qlora(), card)
    fit_l = judge(make_bill(LLAMA13, make_recipe("mixed-bf16", lora_rank=16)), card)
    assert fit_q.convention == "eager"
    assert fit_q.fits and fit_q.worst.headroom_bytes > 0
    assert not fit_l.fits


def test_qlora_finetunes_llama_65b_on_one_48gb_card() -> None:
    """QLoRA's headline (Dettmers et al., arXiv 2305.14314, abstract: "finetune a 65B parameter model on a single 48GB
    GPU"): LLaMA-65B (huggyllama/llama-65b's config, 65.29 B parameters) with its Guanaco adapters (r 64 on every
    linear layer, §5) at micro-batch 1 × 512 tokens under gradient checkpointing fits a 48 GB card on the eager peak
    the verdict judges; the same LoRA over a bf16 base does not come near."""
    from stepbill.spec.presets import load_model

    spec = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "llama-65b.json"))
    assert param_inventory(spec).total == 65_285_660_672
    card = Card.from_gib(48)
    options = dict(lora_rank=64, lora_targets=("all-linear",), seq_len=512, recompute="full")
    fit_q = judge(make_bill(spec, make_recipe("qlora-nf4", **options)), card)
    assert fit_q.convention == "eager" and fit_q.fits and fit_q.worst.headroom_bytes > 2**30
    assert not judge(make_bill(spec, make_recipe("mixed-bf16", **options)), card).fits


def test_flops_unchanged_by_quantisation() -> None:
    """Dequantising changes bytes and time, never the FLOPs: QLoRA's are plain LoRA's."""
    q, lora = _qlora(), make_bill(LLAMA13, make_recipe("mixed-bf16", lora_rank=16))
    for key in ("flops.step", "flops.forward", "flops.model", "flops.step_noncausal"):
        assert q[key].value == lora[key].value


def test_dequant_time_is_its_own_line() -> None:
    """HBM bytes of dequantisation: each use reads codes + constants and writes the bf16 copy; forward and the
    input gradient's backward: 2 uses per micro-batch (more under recompute). Serial with the GEMMs."""
    gpu = load_gpu("rtx-4090")
    b = make_bill(LLAMA13, make_recipe("qlora-nf4", lora_rank=16), gpu=gpu)
    assert b.time is not None
    items = {x.name: x.value for x in b.resident_items}
    n_quant = 40 * (4 * 5120 * 5120 + 3 * 13824 * 5120)
    moved = 2 * (items["weights.nf4"] + items["weights.nf4_constants"] + 2 * n_quant)
    assert b.time["time.dequant"].value == pytest.approx(moved / gpu.hbm_bytes_per_s)
    t = b.time  # per-op model: serial with the rank's kernels
    kernels = t["time.gemm"].value + t["time.attention"].value + t["time.memory_bound"].value
    assert t["time.roofline"].value == pytest.approx(kernels + t["time.dequant"].value)
    over = make_bill(LLAMA13, make_recipe("qlora-nf4", lora_rank=16), gpu=gpu, efficiency=0.5).time
    assert over is not None  # the --efficiency override: after the roofline
    assert over["time.roofline"].value == pytest.approx(max(over["time.compute"].value, over["time.memory"].value)
                                                        + over["time.dequant"].value)
    full = make_bill(LLAMA13, make_recipe("qlora-nf4", lora_rank=16, recompute="full"), gpu=gpu)
    assert full.time is not None and full.time["time.dequant"].value > t["time.dequant"].value  # 3 uses


def test_all_linear_for_lora_and_qlora() -> None:
    """PEFT's all-linear: every Linear but the output layer — Llama-2-7b r 16: 39,976,960 (PEFT's
    print_trainable_parameters); the same adapters under QLoRA. MoE: routers and routed experts are no nn.Linear in
    transformers 5 (TopKRouter modules, 3-D expert parameters): not targeted."""
    from stepbill.inputs import check_bill_inputs

    llama7 = load_preset("llama2-7b")
    for recipe in ("mixed-bf16", "qlora-nf4"):
        r = make_recipe(recipe, lora_rank=16, lora_targets=("all-linear",))
        check_bill_inputs(llama7, r)
        assert make_bill(llama7, r)["params.trainable"].value == 39_976_960
    mixtral = load_preset("mixtral-8x7b")
    r = make_recipe(lora_rank=8, lora_targets=("all-linear",))
    targeted = {t.component for t in param_inventory(mixtral).tensors if r.lora.targets_matrix(t.name, t.component)}
    assert targeted == {"attention"}
    with pytest.raises(StepbillError, match="stands alone"):
        check_bill_inputs(llama7, make_recipe(lora_rank=8, lora_targets=("all-linear", "q_proj")))


def test_refusals_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --lora-rank, on a MoE model, with a parallel layout: one line, exit 2."""
    with pytest.raises(StepbillError, match="--lora-rank"):
        make_recipe("qlora-nf4")
    with pytest.raises(StepbillError, match="not modelled yet"):
        make_recipe("qlora-nf4", lora_rank=8, parallel=Parallel(dp=2))
    with pytest.raises(StepbillError, match="MoE"):
        make_bill(load_preset("mixtral-8x7b"), make_recipe("qlora-nf4", lora_rank=8))
    for argv in (["bill", "llama2-13b", "--recipe", "qlora-nf4"],
                 ["bill", "llama2-7b", "--recipe", "qlora-nf4", "--lora-rank", "8", "--dp", "2"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_cli_answers_the_4090_question_with_every_byte(capsys: pytest.CaptureFixture[str]) -> None:
    """`bill llama2-13b --recipe qlora-nf4 --lora-rank 16 --gpu rtx-4090 --explain`: the verdict with its headroom,
    and a formula for every resident byte, the transient and the dequantisation time."""
    code, out, err = run_cli(["bill", "llama2-13b", "--recipe", "qlora-nf4", "--lora-rank", "16", "--gpu",
                              "rtx-4090", "--explain"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    for needed in ("weights.nf4", "4-bit NF4 codes", "weights.nf4_constants", "8-bit absmax", "weights.frozen",
                   "transient.dequant", "time.dequant", "Fits yes", "headroom", "prepare_model_for_kbit_training"):
        assert needed in text, needed
    code, out, _ = run_cli(["bill", "llama2-13b", "--recipe", "qlora-nf4", "--lora-rank", "16", "--gpu",
                            "rtx-4090", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["fit"]["fits"] is True
    assert {"weights.nf4", "weights.nf4_constants", "weights.frozen"} <= {x["name"] for x in data["memory"]["items"]}


@settings(max_examples=25, deadline=None)
@given(specs(), st.integers(1, 8), st.sampled_from(["ideal", "eager"]), st.integers(1, 2048))
def test_qlora_bill_adds_up_on_random_dense_models(spec, rank: int, convention: str, seq: int) -> None:  # type: ignore[no-untyped-def]
    """Random dense models: the items add up to the totals and the peak, the codes are half a byte per quantised
    weight, and the 4-bit base is always smaller than plain LoRA's bf16 one."""
    assume(spec.moe is None)
    recipe = make_recipe("qlora-nf4", seq_len=seq, lora_rank=rank, lora_targets=("all-linear",))
    try:
        b = make_bill(spec, recipe, convention=convention)
    except StepbillError:
        assume(False)
        raise
    items = {x.name: x.value for x in b.resident_items}
    quantised = [t for t in param_inventory(spec).tensors if quant.is_quantised(t)]
    assert items["weights.nf4"] == sum(math.ceil(t.numel / 2) * t.copies for t in quantised)
    assert b["memory.peak"].value == sum(x.value for x in peak_items(b))
    assert b["memory.model"].value + b["memory.optimizer"].value == b["memory.resident"].value
    plain = make_bill(spec, make_recipe("mixed-bf16", seq_len=seq, lora_rank=rank, lora_targets=("all-linear",)),
                      convention=convention)
    base = items["weights.nf4"] + items["weights.nf4_constants"] + items["weights.frozen"]
    assert base < plain["memory.weights"].value - plain["params.trainable"].value * 2


def test_lora_that_does_not_fit_one_card_is_pointed_at_qlora() -> None:
    """The user trial's task c: LoRA r = 16 on Llama-2-13B does not fit a 24 GB card, its frozen bf16 base alone
    over the budget; the hint names `--recipe qlora-nf4` first, and that bill fits (the trial's 20.96 GiB)."""
    import stepbill

    lora = stepbill.bill("llama2-13b", lora_rank=16, seq=2048, gpu="rtx-4090").fit
    assert not lora.fits and "→ --recipe qlora-nf4" in lora.advice
    assert stepbill.bill("llama2-13b", lora_rank=16, seq=2048, gpu="rtx-4090", recipe="qlora-nf4").fit.fits
    full = stepbill.bill("llama2-13b", seq=2048, gpu="rtx-4090").fit  # no LoRA: no QLoRA hint
    assert "qlora" not in full.advice
