"""The recompute ranking: every tensor of a layer by recompute FLOPs per byte saved, and where to cut.

A linear layer's output costs 2·S·k·n FLOPs to rebuild and holds S·n·2 bytes (bf16): k FLOPs per byte, its
input width (rc-closed-form-flops-per-byte-k); in TFLOP per GiB that is k·2^30/1e12 (rc-tflop-per-gib).
The attention output costs S²·H·(d_qk+d_v) causal for S·H·d_v·2 bytes: slope·S per byte, growing with the
sequence (att-slope-*), so it overtakes a linear layer of width k at S* = k/slope (att-crossover-5734).

Rows are recompute units (tensors made by one op are rebuilt together). `grouping="seed"` regroups a
DeepSeek-style MLA + MoE layer into the seed's eight rows (§2.3). Its seventh row ("gate / up / router /
down-proj, input 7,168", 9.14 GiB) only adds up as gate + up of the 9 expert copies + the KV
down-projection; `row7="label"` takes the label literally (adds router scores and Q down-projection:
9.58 GiB / 73.72 TFLOP) — both readings are offered (seed-facts "Assumptions", rc-row7).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepbill.engine import activations as act
from stepbill.engine import flops as fl
from stepbill.engine.activations import ActTensor
from stepbill.engine.recompute.plan import op_flops
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

GIB = 2**30
TFLOP = 1e12
SEED_THRESHOLD = 3.0  # TFLOP per GiB: the seed's cut, between 2.20 and 7.70 (rc-threshold-3)


@dataclass(frozen=True)
class RankRow:
    """One recompute unit of one layer over a micro-batch: bytes saved if dropped, FLOPs to rebuild."""

    label: str
    tensors: tuple[str, ...]
    bytes: float
    flops: float  # causal-halved attention
    input_width: int  # k of a linear row (its FLOPs per bf16 byte); 0 otherwise

    @property
    def flops_per_byte(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def tflop_per_gib(self) -> float:
        return self.flops_per_byte * GIB / TFLOP


@dataclass(frozen=True)
class Ranking:
    """Rows sorted by FLOPs per byte, the cut, and its shares of the step and of the layer's activations."""

    layer_kind: str
    rows: tuple[RankRow, ...]
    threshold: float  # TFLOP per GiB
    layer_bytes: float  # all tensors of the layer, micro-batch
    input_bytes: float  # the layer input (kept by any checkpoint)
    step_flops: float  # one step of this layer: 3 × forward, causal (rc-step-2571)
    layer_forward_flops: float

    @property
    def cut(self) -> tuple[RankRow, ...]:
        return tuple(r for r in self.rows if r.tflop_per_gib < self.threshold)

    @property
    def saved(self) -> float:
        return sum(r.bytes for r in self.cut)

    @property
    def cost(self) -> float:
        return sum(r.flops for r in self.cut)

    def cumulative(self) -> list[tuple[float, float]]:
        out, b, f = [], 0.0, 0.0
        for r in self.rows:
            b, f = b + r.bytes, f + r.flops
            out.append((b, f))
        return out

    def shares(self) -> dict[str, float]:
        """The seed's percentages: selective cost / step (1.9 %), saving / (layer − input) (77 %, its
        denominator) and / layer (75.2 %); full recompute +1/3 and (layer − input) / layer (97 %)."""
        return {
            "selective_cost_of_step": self.cost / self.step_flops,
            "selective_saving_excl_input": self.saved / (self.layer_bytes - self.input_bytes),
            "selective_saving_of_total": self.saved / self.layer_bytes,
            "full_cost_of_step": self.layer_forward_flops / self.step_flops,
            "full_saving_of_total": (self.layer_bytes - self.input_bytes) / self.layer_bytes,
        }


def _row(label: str, tensors: list[ActTensor], seq_len: int, tokens: int) -> RankRow:
    widths = {t.recompute.k for t in tensors if t.recompute.kind == "linear"}
    return RankRow(label, tuple(t.name for t in tensors), sum(t.bytes_at(seq_len) for t in tensors) * tokens,
                   op_flops(tensors, seq_len) * tokens, widths.pop() if len(widths) == 1 else 0)


def seed_groups(spec: ModelSpec, row7: str = "seed") -> list[tuple[str, list[str]]]:
    """The seed's eight rows for an MLA + MoE layer (§2.3), as tensor names."""
    a, moe, d = spec.attention, spec.moe, spec.hidden_size
    if a.kind != "mla" or moe is None or a.q_lora_rank is None:
        raise StepbillError("the seed's eight-row grouping needs an MLA + MoE model (e.g. deepseek-v3)")
    if row7 not in ("seed", "label"):
        raise StepbillError(f"row7 reading must be 'seed' or 'label', got {row7!r}")
    copies = moe.top_k + (1 if moe.shared_intermediate_size else 0)
    wide = ["moe.gate", "moe.up", "moe.shared.gate", "moe.shared.up", "attn.kv_down"]
    if row7 == "label":
        wide += ["moe.router_scores", "attn.q_down"]
    return [
        (f"MoE dispatch ({copies} copies)", ["moe.dispatched", "moe.shared.input"]),
        ("RMSNorm outputs (2 per layer)", ["attn.norm_out", "moe.norm_out"]),
        (f"SwiGLU product ({copies} copies, elementwise)", ["moe.product", "moe.shared.product"]),
        (f"K/V up-projection (input {a.kv_lora_rank:,})", ["attn.kv_up"]),
        (f"Q up-projection (input {a.q_lora_rank:,})", ["attn.q_up"]),
        (f"expert outputs ({copies} copies, input {moe.expert_intermediate_size:,})",
         ["moe.expert_out", "moe.shared.out"]),
        (f"gate / up / router / down-proj (input {d:,})", wide),
        ("attention output", ["attn.core_out"]),
    ]


def rank_layer(spec: ModelSpec, layer_kind: str, seq_len: int, micro_batch: int = 1, activation_bytes: int = 2,
               convention: str = "ideal", attention: str = "sdpa", grouping: str = "op", row7: str = "seed",
               threshold: float = SEED_THRESHOLD) -> Ranking:
    """The ranking table of one layer kind ("dense" or "moe") over a micro-batch."""
    if seq_len <= 0 or micro_batch <= 0:
        raise StepbillError(f"sequence and micro-batch must be positive, got {seq_len} and {micro_batch}")
    kinds = act.layer_kinds(spec)
    if layer_kind not in kinds:
        raise StepbillError(f"{spec.name} has no {layer_kind!r} layers (it has: {', '.join(kinds)})")
    tokens = seq_len * micro_batch
    rows = act.layer_rows(spec, layer_kind, activation_bytes, convention, attention)
    by_name = {t.name: t for t in rows}
    if grouping == "seed":
        groups = [(label, [by_name[n] for n in names if n in by_name]) for label, names in seed_groups(spec, row7)]
    elif grouping == "op":
        ops: dict[str, list[ActTensor]] = {}
        for t in rows:
            if t.recompute.droppable:
                ops.setdefault(t.op_id, []).append(t)
        groups = [(" + ".join(t.name for t in ts), ts) for ts in ops.values()]
    else:
        raise StepbillError(f"grouping must be 'op' or 'seed', got {grouping!r}")
    ranked = [_row(label, ts, seq_len, tokens) for label, ts in groups if ts]
    ranked.sort(key=lambda r: r.flops_per_byte)  # stable: ties keep forward order
    forward = fl.layer_forward_flops(spec, layer_kind, seq_len, micro_batch, True)
    return Ranking(layer_kind, tuple(ranked), threshold, sum(t.bytes_at(seq_len) for t in rows) * tokens,
                   spec.hidden_size * activation_bytes * tokens, 3 * forward, forward)


@dataclass(frozen=True)
class Crossover:
    input_width: int
    seq_len: float  # S* where the attention output costs as much per byte as this linear row


def attention_crossovers(spec: ModelSpec, ranking: Ranking, causal: bool = True) -> list[Crossover]:
    """For each distinct linear input width k in the ranking: S* = k / slope (att-crossovers-four-lines)."""
    slope = fl.attention_slope(spec, causal)
    widths = sorted({r.input_width for r in ranking.rows if r.input_width})
    return [Crossover(k, fl.crossover_seq_len(k, slope)) for k in widths]
