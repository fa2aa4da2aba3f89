"""stepbill: the complete bill of one LLM training step, proved against PyTorch.

    >>> import stepbill
    >>> b = stepbill.bill("llama3-8b", seq=8192, recipe="mixed-bf16", dp=8, zero=3, gpu="h100-sxm")
    >>> b.memory.peak, b.ranks[0].memory.peak, b.flops.step    # bytes, bytes, FLOPs  # doctest: +SKIP

The API is documented in docs/api.md; everything heavy is imported on first use, so `import stepbill` is cheap.
"""

from stepbill import check  # a callable module: stepbill.check(model, ...) measures and compares (needs torch)
from stepbill.api import ModelInfo, RankView, Section, StepBill, bill, gpus, load_model, models
from stepbill.api_fit import fit_max
from stepbill.api_plan import PlanRun, plan
from stepbill.api_sweep import Sweep, sweep
from stepbill.check import CheckResult
from stepbill.errors import StepbillError

__version__ = "0.1.0"
__all__ = [
    "CheckResult",
    "ModelInfo",
    "PlanRun",
    "RankView",
    "Section",
    "StepBill",
    "StepbillError",
    "Sweep",
    "__version__",
    "bill",
    "check",
    "fit_max",
    "gpus",
    "load_model",
    "models",
    "plan",
    "sweep",
]
