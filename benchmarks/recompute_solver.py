"""Time of the exact budget solver (MILP, HiGHS) vs the greedy ranking, and the FLOPs each pays.

    PYTHONPATH=src python benchmarks/recompute_solver.py
"""

from __future__ import annotations

import time

from stepbill.engine.recompute import budget as rb
from stepbill.spec import load_preset

GIB = 2**30
CASES = [("deepseek-v3", 131_072, 1500), ("deepseek-v3", 32_768, 200), ("llama3-70b", 8192, 40),
         ("mixtral-8x7b", 32_768, 60), ("gpt3-125m", 8192, 2)]


def main() -> None:
    print(f"{'model':14} {'seq':>8} {'budget':>9} {'MILP ms':>8} {'greedy ms':>9} {'MILP TFLOP':>11} {'greedy TFLOP':>12}")
    for name, seq, budget in CASES:
        problem = rb.problem_for_spec(load_preset(name), budget * GIB, seq, 1, 2)
        t0 = time.perf_counter()
        exact = rb.solve_milp(problem)
        t1 = time.perf_counter()
        greedy = rb.solve_greedy(problem)
        t2 = time.perf_counter()
        print(f"{name:14} {seq:>8,} {budget:>6} GiB {1e3 * (t1 - t0):8.1f} {1e3 * (t2 - t1):9.1f} "
              f"{exact.flops / 1e12:11.2f} {greedy.flops / 1e12:12.2f}")


if __name__ == "__main__":
    main()
