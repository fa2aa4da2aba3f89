"""Size of the planner's space (engine/plan/space.py): candidates, how many the stated rules cut, the groups and
variants left, and the CPU seconds enumerating and counting them takes (no bill is made).

Run: python benchmarks/plan_space_size.py. The cases are the issue's: Llama-3-70B on 64 H100s and DeepSeek-V3 on
2,048 H100s (seq 4,096, 15,728,640-token batch), plus the Llama-3-70B case benchmarks/plan_speed.py times.
"""

from __future__ import annotations

import time

from stepbill.engine.plan.space import PlanRequest, Rejections, enumerate_space
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_model

CASES = (("llama3-70b", 64, 4096, 15728640), ("llama3-70b", 64, 8192, 4194304), ("deepseek-v3", 2048, 4096, 15728640))


def main() -> None:
    for model, gpus, seq, batch in CASES:
        req = PlanRequest(load_model(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                          global_batch_tokens=batch)
        rejected, start = Rejections(), time.process_time()
        groups = list(enumerate_space(req, rejected))
        cpu = time.process_time() - start
        left = sum(len(g.variants) for g in groups)
        ruled = sum(rejected.counts.values())
        print(f"{model:>12} × {gpus:>5,} H100, seq {seq:,}, batch {batch:,} tokens: {ruled + left:>11,} candidates, "
              f"{ruled:>11,} cut by the rules, {left:>10,} left in {len(groups):>6,} groups; enumerated in "
              f"{cpu:.2f} CPU-s")


if __name__ == "__main__":
    main()
