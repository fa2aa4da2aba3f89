"""Step time on one rank: a roofline of compute and HBM traffic, the pipeline bubble, exposed communication,
and the MFU / HFU that result. Every result is a Line with its derivation; seconds and FLOP/s are SI.

Model:  t_rank   = max(FLOPs_rank / (peak × efficiency), HBM bytes_rank / HBM bandwidth)   (roofline)
        t_pipe   = t_rank / (1 − bubble),  bubble = (p − 1)/(v·m + p − 1)                   (GPipe / 1F1B / interleaved)
        t_step   = t_pipe + exposed comm + max(0, hideable comm − t_rank)
        MFU      = model FLOPs_rank / (t_step × peak);  HFU counts recomputed forwards too (PaLM appendix B).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepbill.engine import comm
from stepbill.engine.line import Line
from stepbill.engine.parallel import RankClass
from stepbill.engine.parallel.collectives import Collective, rank_param_elements
from stepbill.engine.params import ParamInventory
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

DEFAULT_EFFICIENCY = 0.5  # achieved share of dense peak on the GEMMs; 40–60 % is typical of large-model training


def model_flops_per_step(spec: ModelSpec, inv: ParamInventory, recipe: Recipe) -> Line:
    """Model FLOPs of one optimizer step: 6 · N_matmul_active · D + causal attention (fwd + bwd = 3 × fwd).

    Stand-in until engine/flops.py lands: swap this one function. N_matmul_active = active params minus the
    embedding lookup (not a matmul), plus the tied LM head; attention forward per token per layer is
    2 · (S/2) · heads · (d_qk + d_v) (causal: each query sees S/2 keys on average). 2 FLOPs per multiply-add.
    """
    comps = inv.by_component()
    embedding = comps.get("embedding", (0, 0))[1]
    tied_head = spec.vocab_size * spec.hidden_size if spec.tied_embeddings else 0
    n_matmul = inv.active - embedding + tied_head
    tokens = recipe.tokens_per_step
    a = spec.attention
    attn_fwd_per_token = 2 * (recipe.seq_len / 2) * a.n_heads * (a.qk_head_dim + a.v_dim) * spec.n_layers
    value = 6 * n_matmul * tokens + 3 * attn_fwd_per_token * tokens
    return Line("time.model_flops", value, "FLOPs",
                "6 × {n_matmul} params × {tokens} tokens + 3 × {attn_fwd} attention FLOPs/token × {tokens} tokens",
                {"n_matmul": n_matmul, "tokens": tokens, "attn_fwd": attn_fwd_per_token},
                convention="causal-halved attention; 6ND with embedding lookups excluded")


@dataclass(frozen=True)
class StepTime:
    """Lines of the step-time estimate, by name (time.*)."""

    lines: dict[str, Line]

    def __getitem__(self, name: str) -> Line:
        return self.lines[name]


def _hbm_traffic(recipe: Recipe, worst: RankClass, unsharded_weight_bytes: float) -> tuple[float, dict[str, float]]:
    """HBM bytes one rank moves per step: its (ZeRO-unsharded) weights read in forward, backward and any
    recompute, activations written once and read once per micro-batch, optimizer shard read and written once."""
    m = recipe.parallel.micro_batches
    mem = worst.memory
    reads = 4 if recipe.recompute == "full" else 3
    parts = {
        "weights": reads * m * unsharded_weight_bytes,
        "activations": 2 * m * mem["activations"] / max(worst.in_flight, 1.0),
        "optimizer": 2 * mem["optimizer"] + mem["grads"] + mem["weights"],
    }
    return sum(parts.values()), parts


def step_time(spec: ModelSpec, inv: ParamInventory, recipe: Recipe, worst: RankClass, collectives: list[Collective],
              gpu: GPU, efficiency: float = DEFAULT_EFFICIENCY, dtype: str = "bf16") -> StepTime:
    """Step time, bubble, MFU and HFU for the worst rank on `gpu` at `efficiency` of dense peak."""
    par = recipe.parallel
    peak = gpu.peak_flops(dtype)
    flops = model_flops_per_step(spec, inv, recipe)
    rank_flops = flops.value / par.world
    hw_factor = 4 / 3 if recipe.recompute == "full" else 1.0  # full recompute re-runs the forward: (1+2+1)/(1+2)
    t_compute = rank_flops * hw_factor / (peak * efficiency)
    held = rank_param_elements(spec, recipe, inv)
    unsharded = (held["dense_weights"] + held["expert_weights"]) * recipe.precision.weights
    traffic, parts = _hbm_traffic(recipe, worst, unsharded)
    t_memory = traffic / gpu.hbm_bytes_per_s
    t_rank = max(t_compute, t_memory)
    bubble = float(comm.pipeline_bubble(par.pp, par.micro_batches * par.vpp))
    t_pipe = t_rank / (1 - bubble)
    timed = [c for c in collectives if c.seconds is not None]
    exposed = sum(c.seconds for c in timed if c.overlap != "yes")  # type: ignore[misc]
    hideable = sum(c.seconds for c in timed if c.overlap == "yes")  # type: ignore[misc]
    spill = max(0.0, hideable - t_rank)
    t_step = t_pipe + exposed + spill
    L = Line
    lines = [
        flops,
        L("time.rank_flops", rank_flops, "FLOPs", "{flops} / {world} GPUs", {"flops": flops.value, "world": par.world}),
        L("time.compute", t_compute, "s", "{flops} FLOPs × {hw} / ({peak} FLOP/s × {eff})",
          {"flops": rank_flops, "hw": hw_factor, "peak": peak, "eff": efficiency},
          convention=f"dense {dtype} peak of {gpu.display}"),
        L("time.hbm_traffic", traffic, "bytes", "weights {weights} + activations {activations} + optimizer {optimizer}",
          parts),
        L("time.memory", t_memory, "s", "{bytes} B / {bw} B/s", {"bytes": traffic, "bw": gpu.hbm_bytes_per_s}),
        L("time.roofline", t_rank, "s", "max(compute {c} s, memory {m} s)", {"c": t_compute, "m": t_memory}),
        L("time.bubble", bubble, "1", "(p − 1)/(v·m + p − 1), p={p} v={v} m={m}",
          {"p": par.pp, "v": par.vpp, "m": par.micro_batches}, "cited: GPipe, arXiv 1811.06965; seed §07"),
        L("time.pipeline", t_pipe, "s", "{t} s / (1 − {b})", {"t": t_rank, "b": bubble}),
        L("time.comm_exposed", exposed, "s", "sum of collectives that cannot hide (overlap no / partly)", {}),
        L("time.comm_hideable", hideable, "s", "sum of collectives that overlap compute", {}),
        L("time.comm_spill", spill, "s", "max(0, hideable {h} s − compute {t} s)", {"h": hideable, "t": t_rank}),
        L("time.step", t_step, "s", "pipeline {p} s + exposed {e} s + spill {s} s",
          {"p": t_pipe, "e": exposed, "s": spill}),
        L("time.mfu", rank_flops / (t_step * peak), "1", "{flops} / ({t} s × {peak} FLOP/s)",
          {"flops": rank_flops, "t": t_step, "peak": peak}, "cited: PaLM, arXiv 2204.02311 appendix B"),
        L("time.hfu", rank_flops * hw_factor / (t_step * peak), "1", "MFU × {hw} (recomputed forwards)",
          {"hw": hw_factor}),
        L("time.tokens_per_s", recipe.tokens_per_step / t_step, "tokens/s", "{tokens} tokens / {t} s",
          {"tokens": recipe.tokens_per_step, "t": t_step}),
    ]
    return StepTime({x.name: x for x in lines})
