"""The JSON output schemas of `stepbill recompute`, `stepbill models` and `stepbill lab`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, RootModel, model_validator

from stepbill.report.schema_base import Absent, JsonScalar, Strict


class RecomputeUnits(Strict):
    memory: Literal["bytes"] = Field(description="memory numbers are bytes")
    flops: str = Field(description="how FLOPs are counted")
    tflop_per_gib: str = Field(description="the ranking's unit")


class RecomputeRow(Strict):
    label: str = Field(description="the recompute unit (one or more tensors dropped together)")
    tensors: list[str] = Field(description="the kept tensors it drops")
    bytes: int = Field(description="bytes it saves per layer")
    flops: int = Field(description="FLOPs it costs to recompute per layer")
    flops_per_byte: float = Field(description="flops / bytes")
    tflop_per_gib: float = Field(description="the same in TFLOP per GiB")
    input_width: int = Field(description="the width of the input it is recomputed from (0: elementwise)")
    cumulative_bytes: int = Field(description="bytes saved by this row and every cheaper one")
    cumulative_flops: int = Field(description="FLOPs spent by this row and every cheaper one")
    below_cut: bool = Field(description="whether it is cheaper than the threshold (dropped by the cut)")


class RecomputeCut(Strict):
    bytes: int = Field(description="bytes the cut saves per layer")
    flops: int = Field(description="FLOPs the cut costs per layer")
    selective_cost_of_step: float = Field(description="the cut's FLOPs over the layer's step FLOPs")
    selective_saving_excl_input: float = Field(description="the cut's saving over the layer's activations "
                                               "without the kept input")
    selective_saving_of_total: float = Field(description="the cut's saving over all the layer's activations")
    full_cost_of_step: float = Field(description="full recompute's FLOPs over the layer's step FLOPs")
    full_saving_of_total: float = Field(description="full recompute's saving over the layer's activations")


class Crossover(Strict):
    input_width: int = Field(description="a linear row's input width k")
    seq_len: float = Field(description="the sequence length S* = k / slope where attention overtakes it")


class BudgetSolution(Strict):
    flops: int = Field(description="recompute FLOPs per step")
    peak_bytes: int = Field(description="the activation peak under the budget")
    drop: dict[str, list[str]] = Field(description="per layer kind: the tensors dropped")


class RecomputeJson(Strict):
    """`stepbill recompute --json`."""

    schema_: Literal["stepbill.recompute/1"] = Field(alias="schema", description="this schema's name and version")
    units: RecomputeUnits = Field(description="the units of the numbers")
    layer_kind: str = Field(description="the layer ranked: dense or moe")
    rows: list[RecomputeRow] = Field(description="every recompute unit, cheapest FLOPs per byte first")
    threshold_tflop_per_gib: float = Field(description="the cut")
    cut: RecomputeCut = Field(description="what the cut saves and costs")
    layer_bytes: int = Field(description="the layer's kept activations (bytes)")
    layer_input_bytes: int = Field(description="the layer's input (bytes)")
    layer_step_flops: int = Field(description="the layer's step FLOPs (3 × forward, causal)")
    attention_slope: float = Field(description="attention output's FLOPs per byte per token of sequence")
    crossovers: list[Crossover] = Field(description="where attention overtakes each linear row")
    budget: dict[str, BudgetSolution] = Absent("with `--budget`: the exact solution and the greedy one, by method")


class ModelRow(Strict):
    name: str = Field(description="the preset's name (a MODEL argument)")
    family: str = Field(description="the architecture family")
    params_total: int = Field(description="unique parameters")
    params_active: int = Field(description="parameters one token uses")
    layers: int = Field(description="transformer layers")
    hidden: int = Field(description="hidden size")
    attention: str = Field(description="attention kind: mha, gqa, mqa or mla")
    moe: bool = Field(description="whether it has mixture-of-experts layers")


class ModelsJson(RootModel[list[ModelRow]]):
    """`stepbill models --json`: one entry per built-in preset."""


class LabTable(Strict):
    title: str = Field(description="the table's title")
    columns: list[str] = Field(description="column headers")
    rows: list[list[JsonScalar]] = Field(description="rows of cells, as many as columns")
    takeaway: str = Absent("one line: what the table shows")

    @model_validator(mode="after")
    def _rows_match_columns(self) -> LabTable:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"a row of {self.title!r} has {len(row)} cells for {len(self.columns)} columns")
        return self


LAB_TOPICS = ("adam", "decay", "warmup", "schedule", "clip", "formats", "collectives", "backprop", "descent", "memory",
              "torch-defaults", "seed-checks", "megatron-defaults", "citations")


class LabJson(Strict):
    """`stepbill lab TOPIC --json`: the settings, the key values and the tables of one topic."""

    topic: Literal[LAB_TOPICS] = Field(description="the topic")  # type: ignore[valid-type]
    settings: dict[str, Any] = Field(description="the options the topic ran with")
    values: dict[str, Any] = Field(description="the topic's key numbers, by name")
    tables: list[LabTable] = Field(description="what the terminal prints")
    units_note: str = Absent("the units of the topic's numbers, where it prints any")
    pending: dict[str, str] = Absent("seed-checks: reproducible claims not printed yet (claim id: reason)")
