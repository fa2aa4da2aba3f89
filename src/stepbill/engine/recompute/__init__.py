"""What to recompute and what it costs: the policy applied to a model (`plan`), the exact budget solver
(`budget`, an exact 0-1 program) and the ranking of kept tensors by FLOPs paid per byte saved (`ranking`)."""

from stepbill.engine.activations import layer_order
from stepbill.engine.recompute.plan import (
    NO_RERUN,
    LayerPlan,
    RecomputePlan,
    Rerun,
    best_segment,
    make_plan,
    module_rows,
    op_flops,
    sqrt_l_optimum,
)

__all__ = ["NO_RERUN", "LayerPlan", "RecomputePlan", "Rerun", "best_segment", "layer_order", "make_plan", "module_rows", "op_flops",
           "sqrt_l_optimum"]
