"""Median wall time of one bill (make_bill) per preset, and of its JSON rendering.

Run: python benchmarks/bill_latency.py [--repeat N]. Target: well under 1 ms per preset bill.
"""

from __future__ import annotations

import argparse
import statistics
import time

from stepbill.engine.bill import make_bill
from stepbill.report.bill_json import bill_to_json
from stepbill.spec import load_preset, preset_names
from stepbill.spec.recipe import make_recipe


def median_seconds(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    recipe = make_recipe(micro_batch=8, seq_len=4096, recompute="full")
    print(f"{'preset':<14} {'bill (µs)':>10} {'bill+json (µs)':>15}")
    worst = 0.0
    for name in preset_names():
        spec = load_preset(name)
        make_bill(spec, recipe)  # warm the parameter-inventory cache, as a long-lived process would
        bill_s = median_seconds(lambda spec=spec: make_bill(spec, recipe), args.repeat)
        json_s = median_seconds(lambda spec=spec: bill_to_json(make_bill(spec, recipe)), args.repeat)
        worst = max(worst, bill_s)
        print(f"{name:<14} {bill_s * 1e6:>10.1f} {json_s * 1e6:>15.1f}")
    print(f"worst preset bill: {worst * 1e3:.3f} ms (target < 1 ms): {'OK' if worst < 1e-3 else 'SLOW'}")


if __name__ == "__main__":
    main()
