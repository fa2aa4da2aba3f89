"""Median wall time of a bill (make_bill) and of its JSON, per preset; the per-GPU bill at scale; and, in the same
run when it is installed, llm-analysis's `train()` for a comparable (smaller) bill.

Run: python benchmarks/bill_latency.py [--repeat N]. Targets (issue: one bill for every GPU): the one-GPU bill with
JSON on gpt3-1.3b at most 0.5 ms; llama3-70b on 4,096 GPUs (ZeRO-3, eager convention) under 50 ms; the per-GPU cost
flat in the number of ranks. llm-analysis: `pip install llm-analysis` in its own venv (it pins an old transformers).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
from collections.abc import Callable

from stepbill.engine.bill import make_bill
from stepbill.report.bill_json import bill_to_json
from stepbill.spec import load_preset, preset_names
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def presets(repeat: int) -> float:
    recipe = make_recipe(micro_batch=8, seq_len=4096, recompute="full")
    print(f"{'preset':<14} {'bill (µs)':>10} {'bill+json (µs)':>15}")
    worst = 0.0
    for name in preset_names():
        spec = load_preset(name)
        make_bill(spec, recipe)  # warm the parameter-inventory cache, as a long-lived process would
        bill_s = median_seconds(lambda spec=spec: make_bill(spec, recipe), repeat)
        json_s = median_seconds(lambda spec=spec: bill_to_json(make_bill(spec, recipe)), repeat)
        worst = max(worst, bill_s)
        print(f"{name:<14} {bill_s * 1e6:>10.1f} {json_s * 1e6:>15.1f}")
    return worst


def one_gpu_json(repeat: int) -> float:
    spec = load_preset("gpt3-1.3b")
    recipe = make_recipe("mixed-bf16", "adamw", 1, 2048)
    bill_to_json(make_bill(spec, recipe))
    return median_seconds(lambda: bill_to_json(make_bill(spec, recipe)), repeat)


def per_gpu(world: int, repeat: int) -> float:
    spec = load_preset("llama3-70b")
    recipe = make_recipe("mixed-bf16", "adamw", 1, 8192, parallel=Parallel(dp=world, zero=3))
    make_bill(spec, recipe, convention="eager")
    return median_seconds(lambda: make_bill(spec, recipe, convention="eager"), repeat)


def llm_analysis(repeat: int) -> float | None:
    """llm-analysis's train() on its own llama-2-7b preset, one A100 80GB (stdout silenced)."""
    try:
        from llm_analysis.analysis import train  # type: ignore[import-not-found]
    except ImportError:
        return None

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            train(model_name="upstage/llama-2-7b", gpu_name="a100-sxm-80gb", seq_len=2048, batch_size_per_gpu=1,
                  total_num_gpus=1, activation_recomputation=2, flops_efficiency=0.5, log_level="ERROR")

    run()
    return median_seconds(run, max(3, repeat // 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    worst = presets(args.repeat)
    print(f"worst preset bill: {worst * 1e3:.3f} ms")
    one = one_gpu_json(args.repeat)
    print(f"gpt3-1.3b one-GPU bill + JSON: {one * 1e3:.3f} ms (target ≤ 0.5 ms)")
    for world in (64, 1024, 4096):
        t = per_gpu(world, max(5, args.repeat // 20))
        print(f"llama3-70b, {world:>5} GPUs, ZeRO-3, eager: {t * 1e3:8.2f} ms (target < 50 ms)")
    peer = llm_analysis(args.repeat)
    if peer is None:
        print("llm-analysis: not installed (pip install llm-analysis, in its own venv) — no side-by-side figure")
    else:
        print(f"llm-analysis train() (llama-2-7b, 1 GPU): {peer * 1e3:.3f} ms; stepbill one-GPU bill + JSON "
              f"{one * 1e3:.3f} ms ({peer / one:.2f}× faster)")


if __name__ == "__main__":
    main()
