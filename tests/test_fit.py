"""Fit verdicts a user can trust (issue 9 item 4; user trial §3 items 3, 12, 13 and W14): usable memory, a reserve,
the headroom, the eager convention's peak, per-GPU advice, and the CLI around them."""

from __future__ import annotations

import json

import pytest

from stepbill.engine.bill import Bill, make_bill
from stepbill.engine.fit import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_SHARE,
    NCCL_PER_COMMUNICATOR_BYTES,
    Card,
    default_reserve,
    fit_verdict,
    judge,
    per_gpu_advice,
    user_reserve,
)
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import make_recipe
from tests.conftest import GIB, run_cli

QWEN = "examples/configs/qwen2.5-7b/config.json"
H100 = Card.from_gpu(load_gpu("h100-sxm"))


def _bill(model: str, convention: str, par: Parallel | None = None, micro_batch: int = 1, seq: int = 4096,
          recompute: str = "none", recipe: str = "mixed-bf16") -> Bill:
    par = par or Parallel()
    the_recipe = make_recipe(recipe, "adamw", micro_batch, seq, recompute, None, None, par, "single")
    return make_bill(load_model(model), the_recipe, None, convention, "sdpa", gpu=load_gpu("h100-sxm"))


MIXTRAL_LAYOUT = Parallel(dp=16, ep=8, zero=1)


def test_default_reserve_parts() -> None:
    """1 GiB CUDA context + driver, 1.5 GiB per NCCL communicator (axes > 1), 2 % of the usable memory."""
    one = default_reserve(H100, Parallel())
    assert one.total_bytes == pytest.approx(CUDA_CONTEXT_BYTES + FRAGMENTATION_SHARE * 81_559 * 2**20)
    assert round(one.total_bytes / GIB, 2) == 2.59
    two_axes = default_reserve(H100, MIXTRAL_LAYOUT)
    assert two_axes.total_bytes - one.total_bytes == pytest.approx(2 * NCCL_PER_COMMUNICATOR_BYTES)
    assert "CUDA context + driver 1.00 GiB + NCCL buffers 3.00 GiB" in two_axes.summary()
    assert "--reserve GiB to change" in two_axes.summary()
    assert all(x.provenance.startswith("cited:") for x in two_axes.items)


def test_mixtral_77_gib_no_longer_fits_on_80gb_with_the_reserve() -> None:
    """User trial task b / W14: dp16 ep8 ZeRO-1 printed "77.10 GiB, fits" on an H100 (77.35 GiB since the per-rank
    rewrite's layout buffers); 79.65 GiB usable minus the default reserve (5.59 GiB) leaves 74.05 GiB, so even the
    ideal peak does not fit."""
    ideal = _bill("mixtral-8x7b", "ideal", MIXTRAL_LAYOUT)
    peak = ideal.worst_rank.memory["peak"]
    assert 77.0 * GIB < peak < H100.usable_bytes  # the user trial's figure, below the card: "fits" without a reserve
    on_ideal = fit_verdict(ideal, None, H100, default_reserve(H100, MIXTRAL_LAYOUT), "test: no eager rows")
    assert not on_ideal.fits
    assert round(on_ideal.budget_bytes / GIB, 2) == 74.05
    assert on_ideal.worst.headroom_bytes == pytest.approx(on_ideal.budget_bytes - peak)
    assert on_ideal.worst.headroom_bytes < 0
    # With no reserve at all, the ideal verdict was "fits" (what the user saw) ...
    assert fit_verdict(ideal, None, H100, user_reserve(0)).fits
    # ... and judged on the eager peak (what PyTorch keeps) it is further off.
    eager = _bill("mixtral-8x7b", "eager", MIXTRAL_LAYOUT)
    on_eager = fit_verdict(ideal, eager, H100, default_reserve(H100, MIXTRAL_LAYOUT))
    assert on_eager.convention == "eager" and not on_eager.fits
    assert on_eager.worst.peak_bytes > ideal.worst_rank.memory["peak"]


def test_qwen_micro_batch_24_full_recompute_judged_on_eager() -> None:
    """User trial task d: Qwen2.5-7B pure-bf16, full recompute, micro-batch 24 "fits" one 80 GB card under the
    ideal convention (76.25 GiB, logits left out); the verdict is taken on the eager peak and says so."""
    kw = {"micro_batch": 24, "recompute": "full", "recipe": "pure-bf16"}
    ideal, eager = _bill(QWEN, "ideal", **kw), _bill(QWEN, "eager", **kw)
    reserve = default_reserve(H100, Parallel())
    assert fit_verdict(ideal, None, H100, reserve).fits  # the optimistic answer
    fit = fit_verdict(ideal, eager, H100, reserve)
    assert fit.convention == "eager" and fit.shown_convention == "ideal"
    assert not fit.fits
    assert fit.worst.peak_bytes == eager.lines["memory.peak"].value
    assert "judged on the eager convention" in fit.convention_note()
    assert "ideal figures of this bill leave the logits out" in fit.convention_note()
    # a small micro-batch fits under eager too: the verdict is not "never"
    small = fit_verdict(_bill(QWEN, "ideal", micro_batch=1, recompute="full", recipe="pure-bf16"),
                        _bill(QWEN, "eager", micro_batch=1, recompute="full", recipe="pure-bf16"), H100, reserve)
    assert small.fits and small.worst.headroom_bytes > 0


def test_judge_is_the_python_entry() -> None:
    """`judge(bill, card, reserve_gib)` makes the eager bill itself: what the CLI prints, from Python."""
    ideal = _bill(QWEN, "ideal", micro_batch=24, recompute="full", recipe="pure-bf16")
    fit = judge(ideal, Card.from_gib(80))
    assert fit.convention == "eager" and not fit.fits
    assert fit.card.usable_bytes == 80 * GIB and not fit.reserve.user_given
    assert judge(ideal, H100, reserve_gib=1.5).reserve.total_bytes == 1.5 * GIB


def test_fallback_to_ideal_says_so() -> None:
    ideal = _bill("llama2-7b", "ideal")
    fit = fit_verdict(ideal, None, H100, default_reserve(H100, Parallel()), "eager rows not modelled for X")
    assert fit.convention == "ideal"
    assert "eager rows not modelled for X" in fit.convention_note()
    assert "optimistic" in fit.convention_note()


def test_eager_bill_is_judged_on_itself() -> None:
    eager = _bill("llama2-7b", "eager")
    fit = fit_verdict(eager, None, H100, user_reserve(2))
    assert fit.convention == "eager" and not fit.fallback
    assert fit.budget_bytes == H100.usable_bytes - 2 * GIB
    assert fit.lines["fit.headroom"].value == pytest.approx(fit.budget_bytes - eager.lines["memory.peak"].value)
    assert "MiB × 2^20 B" in fit.lines["fit.usable"].explain()


def test_per_gpu_advice_names_the_per_gpu_item_and_the_next_flag() -> None:
    """User trial §3 item 12: after ZeRO-3 + full recompute, llama3-70b's per-GPU optimizer shard (98.56 GiB) is
    over the card: advise offload or more dp, not "shard them (ZeRO)"."""
    par = Parallel(dp=8, zero=3)
    bill = _bill("llama3-70b", "ideal", par, seq=8192, recompute="full")
    budget = H100.usable_bytes - default_reserve(H100, par).total_bytes
    advice = per_gpu_advice(bill.worst_rank, par, "full", budget)
    assert advice.startswith("per GPU (all ranks): optimizer 98.56 GiB > budget")
    assert "--offload-optimizer" in advice and "more dp" in advice and "--zero" not in advice
    offloaded = Parallel(dp=8, zero=3, offload_optimizer=True)
    advice = per_gpu_advice(_bill("llama3-70b", "ideal", offloaded, seq=8192, recompute="full").worst_rank,
                            offloaded, "full", budget)
    assert "--offload-optimizer" not in advice


def test_cli_mixtral_user_trial_command(capsys: pytest.CaptureFixture[str]) -> None:
    """The exact user-trial command: no longer "fits"; the table says μb in flight and the budget."""
    code, out, _ = run_cli(["bill", "mixtral-8x7b", "--seq", "4096", "--dp", "16", "--ep", "8", "--zero", "1",
                            "--gpus", "16", "--gpu", "h100-sxm"], capsys)
    assert code == 0
    assert "Fits NO" in out and "│ 77." in out
    assert "usable 79.65 GiB − reserve 5.59 GiB = budget 74.05 GiB" in out
    assert "μb in" in out and "flight" in out
    assert "judged on the eager convention" in out
    assert "hint per GPU (all ranks)" in out


def test_cli_json_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "llama2-7b", "--dp", "2", "--zero", "3", "--gpu", "H100", "--reserve", "3",
                            "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    rank_fit = data["ranks"][0]["fit"]
    assert set(rank_fit) >= {"usable_bytes", "reserve_bytes", "headroom_bytes", "fits", "convention"}
    assert rank_fit["usable_bytes"] == 81_559 * 2**20 and rank_fit["reserve_bytes"] == 3 * GIB
    assert rank_fit["convention"] == "eager"
    assert rank_fit["headroom_bytes"] == rank_fit["usable_bytes"] - rank_fit["reserve_bytes"] - rank_fit["peak_bytes"]
    assert data["ranks"][0]["fits"] == rank_fit["fits"]
    assert data["fit"]["reserve_given"] and data["fit"]["budget_bytes"] == 81_559 * 2**20 - 3 * GIB
    assert data["gpu"]["name"] == "h100-sxm" and data["gpu"]["usable_bytes"] == 81_559 * 2**20


def test_cli_single_gpu_fit_with_gpu_mem(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", QWEN, "--seq", "4096", "--micro-batch", "24", "--recompute", "full",
                            "--recipe", "pure-bf16", "--gpu-mem", "80"], capsys)
    assert code == 0
    assert "Fits NO" in out and "judged on the eager convention" in out
    assert "reserve 2.60 GiB: CUDA context + driver 1.00 GiB + allocator fragmentation 1.60 GiB" in out


def test_cli_eager_missing_falls_back_and_says_so(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import stepbill.engine.fit as fit_module

    real = fit_module.make_bill

    def no_eager(*args, **kwargs):  # type: ignore[no-untyped-def]
        if args[3:4] == ("eager",) or kwargs.get("convention") == "eager":
            raise StepbillError("eager rows not modelled for this family")
        return real(*args, **kwargs)

    monkeypatch.setattr(fit_module, "make_bill", no_eager)
    code, out, _ = run_cli(["bill", "llama2-7b", "--gpu", "h100"], capsys)
    assert code == 0
    assert "judged on the ideal convention" in out and "eager rows not modelled for this family" in out


def test_cli_gpus_alone_sets_dp(capsys: pytest.CaptureFixture[str]) -> None:
    """User trial §3 item 13: `--gpus 8` alone means dp 8 (÷ tp·pp·cp), and the header says so."""
    code, out, _ = run_cli(["bill", "llama2-7b", "--gpus", "8", "--tp", "2", "--json"], capsys)
    assert code == 0
    par = json.loads(out)["parallel"]
    assert (par["dp"], par["world"]) == (4, 8)
    assert par["note"] == "dp 4 = --gpus 8 ÷ tp·pp·cp 2 (no --dp given)"
    code, out, _ = run_cli(["bill", "llama2-7b", "--gpus", "8"], capsys)
    assert "dp 8 = --gpus 8 ÷ tp·pp·cp 1 (no --dp given)" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--gpus", "12", "--tp", "8"], "not a multiple of tp·pp·cp"),
     (["--gpus", "8", "--tp", "0"], "tp"),
     (["--reserve", "2"], "--reserve needs a card"),
     (["--gpu", "h100", "--reserve", "-1"], "--reserve must be >= 0"),
     (["--gpu", "h10x"], "unknown gpu")],
)
def test_cli_bad_fit_input_is_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bill", "llama2-7b", *argv], capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_cli_explain_covers_the_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """--explain adds the fit's reserve parts and the usable / budget / headroom lines with their formulas and
    sources (the per-rank items are the per-GPU table's own --explain)."""
    code, out, _ = run_cli(["bill", "llama2-7b", "--seq", "4096", "--dp", "2", "--tp", "2", "--sp", "--pp", "2",
                            "--micro-batches", "4", "--zero", "3", "--offload-optimizer", "--gpus", "8", "--gpu",
                            "h100", "--explain"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    assert "fit.reserve.nccl = 4.50 GiB: 3 communicators (parallel axes of degree > 1)" in flat
    assert "cited: NVIDIA/nccl#864" in flat
    assert "fit.usable = 79.65 GiB: 81,559 MiB × 2^20 B" in flat
    assert "fit.headroom =" in flat and "of stage 0 (first)" in flat


def test_advice_on_one_gpu_asks_for_dp_before_zero() -> None:
    """ZeRO shards over dp·cp: on one replica the hint says so instead of a bare --zero 1."""
    bill = _bill("llama3-8b", "eager")
    advice = per_gpu_advice(bill.worst_rank, Parallel(), "none", 22 * GIB)
    assert "--dp N with --zero 1" in advice and "--offload-optimizer" in advice
    par = Parallel(dp=8)
    advice = per_gpu_advice(_bill("llama3-8b", "eager", par).worst_rank, par, "none", 22 * GIB)
    assert "→ --zero 1 or" in advice
