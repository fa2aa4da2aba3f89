"""What a layer's own backward moments hold beyond its live rows and buffers, for the planner's peak floors
(bounds.peak_floor, resting_floor): the Part.LAYER moment's activation change, temporaries and gradients, and a MoE
layer's routed-expert moments (memory/eager_moe.py), each on the rank and each at most what the rank's timeline
holds (memory/timeline.eager_moments), so a floor that adds them stays a lower bound of the judged peak."""

from __future__ import annotations

from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.parallel.rank_share import eager_divisors
from stepbill.spec.parallel import Parallel

#: per layer kind: (the Part.LAYER moment's activation change, its temporaries) and each inner backward moment's
#: (activation change, temporaries + gradients made), on the rank (layer_extra)
LayerExtra = dict[str, tuple[tuple[float, float], ...]]


def layer_extra(eager: EagerTerms | None, par: Parallel, every_policy: bool = False) -> LayerExtra:
    """Per layer kind, what a rank's backward moments of a layer of that kind hold beside its live rows and buffers
    (memory/timeline.eager_moments: the Part.LAYER moment's activation change, temporaries and gradients, and the
    inner moments — a MoE layer's routed experts' (freed rows, token-wide temporaries, the expert bank's gradient
    made at once, the banks' accumulated: memory/eager_moe.py) and MLA's math-path softmax backward
    (memory/eager_mla.py)), each divided as EagerTerms.for_rank divides it on the rank (rank_share.eager_divisors).
    The autocast copies are left out (≥ 0); `beyond` reads the rest. With `every_policy` (resting_floor: one floor
    for every recompute policy of a cell) only what none of them changes: the moments that make an expert bank's
    gradient, without their activation change (their rows, ≥ 0, left out with the freed ones)."""
    if eager is None:
        return {}
    _, width, experts = eager_divisors(par)
    # the gradients a moment makes on top of those held: divided by at most tp (experts: ep × etp) × the ZeRO-2/3
    # shards (rank_eager's divisor: tp × unsharded / held gradients, each held ≥ its unsharded / its group's shards)
    shards = max(par.zero_group, par.expert_zero_group) if par.zero >= 2 else 1
    grads, bank = par.tp * shards, experts * shards
    out: LayerExtra = {}
    for kind in {*eager.layer_temp, *eager.inner_backward}:
        inner = tuple((0.0 if every_policy else x.act / width,
                       x.temps / width + x.weight_temps / experts + x.grads / grads + x.bank_grads / bank)
                      for x in eager.inner_backward.get(kind, ()) if x.weight_temps or not every_policy)
        layer = (0.0, 0.0) if every_policy else (
            eager.layer_act.get(kind, 0) / width,
            eager.layer_temp.get(kind, 0) / width + eager.layer_grad.get(kind, 0) / grads)
        out[kind] = (layer, *inner)
    return out


def beyond(moments: tuple[tuple[float, float], ...], live: float) -> float:
    """The least a layer's backward moments (`layer_extra`'s of its kind: the Part.LAYER moment's, then the inner
    ones) hold beyond `live`, a lower bound of its live rows: the Part.LAYER moment its activation change and
    temporaries; an inner moment its temporaries and its change, never below no row at all (the timeline holds
    max(0, live + change) there: under activation offload fewer of the freed rows are on the GPU)."""
    if not moments:
        return 0.0
    (act, held), *inner = moments
    return max([act + held, *(max(a, -live) + h for a, h in inner)])
