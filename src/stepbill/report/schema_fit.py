"""The JSON of `stepbill fit MODEL --max micro-batch|seq --json` (`stepbill schema fit`): the largest value that fits
each rank class on the card, by the bill's own fit verdict. Same conventions as report/schema.py: bytes as
integers, no NaN or Infinity, no undeclared key, keys left out (never null) where they do not apply."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from stepbill.report.schema_base import Absent, Strict


class FitCard(Strict):
    name: str = Field(description="the card: a catalog GPU's name or `N GiB card` (--gpu-mem)")
    usable_bytes: int = Field(description="usable memory as the driver reports it (bytes)")
    source: str = Field(description="where the usable figure comes from")


class FitClass(Strict):
    """One rank class: the largest value that fits it, and the first value above it, which does not."""

    rank_class: str = Field(description="the rank class (e.g. `all ranks`, `stage 0 (first)`)")
    ranks: int = Field(description="GPUs in the class")
    largest: int = Field(description="the largest value (micro-batch in sequences, or seq in tokens) that fits it")
    peak_bytes: int = Field(description="its peak at `largest`, in the judged convention (bytes)")
    headroom_bytes: int = Field(description="budget − peak at `largest` (bytes, >= 0)")
    resident_bytes: int = Field(description="weights + grads + optimizer per GPU (bytes; does not change with the value)")
    next_value: int = Absent("the next value (`largest` + step), which does not fit; absent when `largest` is the limit")
    next_peak_bytes: int = Absent("its peak at `next_value` (bytes), above the budget")


class FitSearch(Strict):
    evaluated: int = Field(description="values at which the bill and its verdict were made")
    method: str = Field(description="how the values were chosen, and the monotonicity check")


class FitHostLimit(Strict):
    value: int = Field(description="the smallest value the host memory rules out")
    summary: str = Field(description="the host-memory verdict there, in one line")


class FitMaxJson(Strict):
    """`stepbill fit MODEL --max micro-batch|seq --json` (and `stepbill.fit_max(...).to_json()`)."""

    schema_: Literal["stepbill.fit/1"] = Field(alias="schema", description="this schema's name and version")
    model: str = Field(description="the model's name")
    axis: Literal["micro_batch", "seq"] = Field(description="what was searched: micro-batch (sequences) or seq (tokens)")
    largest: int = Field(description="the largest value at which every rank class fits (the smallest of `classes[].largest`)")
    limited_by: Literal["memory", "limit"] = Field(
        description="`memory`: the next value does not fit; `limit`: `largest` is the largest value the inputs allow")
    limit: int = Field(description="the largest value the inputs allow (2^20 sequences; 2^24 tokens or the learned positions)")
    limit_reason: str = Field(description="what sets `limit`")
    step: int = Field(description="values are multiples of it (seq: tp under --sp, 2·cp under context parallelism)")
    fixed: dict[str, int] = Field(description="the other axis, held: {\"seq\": tokens} or {\"micro_batch\": sequences}")
    card: FitCard = Field(description="the card judged against")
    reserve_bytes: int = Field(description="memory kept back per GPU (--reserve, or the default reserve)")
    budget_bytes: int = Field(description="usable − reserve (bytes)")
    convention: Literal["eager", "ideal"] = Field(
        description="the convention whose peaks were judged: eager (what PyTorch keeps), ideal only as a fallback")
    classes: list[FitClass] = Field(description="one entry per rank class")
    host_limit: FitHostLimit | None = Field(
        description="under offload: the smallest value at which every rank class fits its card but a node's host "
        "memory cannot hold what its GPUs offload (the answer stays below it); null when the host never limits")
    search: FitSearch = Field(description="the search")
    command: str = Field(description="the `stepbill bill` command of the answer: its fit verdict says it fits")
