"""The bill's numbers do not move when the engine gets faster: every line (value, unit, formula, inputs,
provenance, convention), every rank class (memory, CPU, owned bytes, items, layers), every collective and every
step-time line of ~40 varied bills, compared with tests/data/bill_golden.json, written by this file from the
engine as it was before the speed work (`python tests/test_bill_golden.py --write` rewrites it: only when a number
is meant to change, and say so in the commit).

Floats compare at rel 1e-12 (a cache may sum the same terms in another order); everything else exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from stepbill.engine.bill import Bill, make_bill
from stepbill.engine.bill_parts import rank_peaks, verdict_ranks
from stepbill.engine.line import Line
from stepbill.engine.parallel import RankClass
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import make_recipe

GOLDEN = Path(__file__).parent / "data" / "bill_golden.json"
HF = Path(__file__).parent / "data" / "hf_configs"
REL = 1e-12

# (case id, model, make_recipe keywords, Parallel keywords, convention, attention, gpu name or None)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str, str, str | None]] = [
    ("125m-ideal", "gpt3-125m", {"micro_batch": 2, "seq_len": 1024}, {}, "ideal", "sdpa", None),
    ("125m-eager", "gpt3-125m", {"micro_batch": 2, "seq_len": 1024}, {}, "eager", "sdpa", None),
    ("125m-megatron-full", "gpt3-125m", {"seq_len": 2048, "recompute": "full"}, {}, "megatron", "sdpa", "h100-sxm"),
    ("125m-eager-attn", "gpt3-125m", {"seq_len": 512}, {}, "eager", "eager", None),
    ("125m-dp8-z3-gpu", "gpt3-125m", {"micro_batch": 4}, {"dp": 8, "zero": 3}, "eager", "sdpa", "h100-sxm"),
    ("125m-fp32-sgd", "gpt3-125m", {"recipe": "fp32", "optimizer": "sgd-momentum"}, {}, "eager", "sdpa", "a100-80gb"),
    ("125m-amp-foreach", "gpt3-125m", {"recipe": "amp-bf16", "optimizer_impl": "foreach"}, {}, "eager", "sdpa",
     None),
    ("125m-cuda-fused", "gpt3-125m", {"optimizer_impl": "fused", "device": "cuda"}, {}, "eager", "sdpa", None),
    ("gpt2-eager", str(HF / "gpt2.json"), {"seq_len": 1024}, {}, "eager", "sdpa", None),
    ("1.3b-every2", "gpt3-1.3b", {"seq_len": 2048, "recompute": "every:2"}, {}, "eager", "sdpa", "h100-sxm"),
    ("1.3b-everyauto", "gpt3-1.3b", {"seq_len": 2048, "recompute": "every:auto"}, {}, "ideal", "sdpa", None),
    ("1.3b-budget", "gpt3-1.3b", {"micro_batch": 4, "seq_len": 2048, "recompute": "budget:10GiB"}, {}, "ideal",
     "sdpa", None),
    ("125m-budget-eager", "gpt3-125m", {"micro_batch": 4, "recompute": "budget:2GiB"}, {"dp": 2, "zero": 3}, "eager",
     "sdpa", "h100-sxm"),
    ("7b-lora", "llama2-7b", {"lora_rank": 16}, {}, "eager", "sdpa", None),
    ("7b-lora-all", "llama2-7b", {"lora_rank": 8, "lora_targets": ("all-linear",), "recompute": "full"}, {},
     "ideal", "sdpa", "h100-sxm"),
    ("7b-qlora", "llama2-7b", {"recipe": "qlora-nf4", "lora_rank": 16}, {}, "eager", "sdpa", None),
    ("7b-qlora-ideal", "llama2-7b", {"recipe": "qlora-nf4", "lora_rank": 64, "seq_len": 4096}, {}, "ideal", "sdpa",
     "a100-80gb"),
    ("8b-adamw8bit", "llama3-8b", {"recipe": "adamw-8bit", "seq_len": 8192}, {"dp": 4, "zero": 1}, "eager", "sdpa",
     "h100-sxm"),
    ("8b-fp32accum-lion", "llama3-8b", {"recipe": "fp32-grad-accum", "optimizer": "lion"}, {"dp": 2, "zero": 2},
     "ideal", "sdpa", "h200"),
    ("8b-muon", "llama3-8b", {"optimizer": "muon", "recompute": "selective:core_attn"}, {"tp": 2, "sp": True},
     "eager", "sdpa", None),
    ("2.7b-adafactor", "gpt3-2.7b", {"optimizer": "adafactor", "recipe": "pure-bf16"}, {"tp": 2, "sp": True},
     "megatron", "sdpa", None),
    ("70b-tp8", "llama3-70b", {"seq_len": 8192}, {"tp": 8, "sp": True, "dp": 8, "micro_batches": 16}, "ideal",
     "sdpa", "h100-sxm"),
    ("70b-tp8-eager", "llama3-70b", {"seq_len": 8192}, {"tp": 8, "sp": True, "dp": 8, "micro_batches": 16},
     "eager", "sdpa", None),
    ("70b-pp4-1f1b", "llama3-70b", {"seq_len": 4096, "recompute": "full"},
     {"tp": 4, "pp": 4, "dp": 4, "zero": 1, "micro_batches": 8}, "eager", "sdpa", "h100-sxm"),
    ("70b-interleaved", "llama3-70b", {"seq_len": 4096, "recompute": "selective:core_attn"},
     {"tp": 8, "pp": 4, "dp": 2, "pp_schedule": "interleaved", "vpp": 2, "micro_batches": 8}, "ideal", "sdpa",
     "h100-sxm"),
    ("70b-gpipe", "llama3-70b", {"seq_len": 2048}, {"tp": 8, "pp": 8, "pp_schedule": "gpipe", "micro_batches": 16},
     "eager", "sdpa", "a100-80gb"),
    ("70b-uneven", "llama3-70b", {"seq_len": 4096}, {"tp": 8, "pp": 3, "pp_layers": (26, 27, 27),
                                                      "micro_batches": 6}, "ideal", "sdpa", "h100-sxm"),
    ("70b-cp", "llama3-70b", {"seq_len": 32768, "recompute": "full"}, {"tp": 8, "cp": 4, "dp": 2, "zero": 3},
     "eager", "sdpa", "h100-sxm"),
    ("70b-hsdp", "llama3-70b", {"seq_len": 4096}, {"dp": 64, "zero": 3, "shard_group": 8}, "eager", "sdpa",
     "h100-sxm"),
    ("70b-offload", "llama3-70b", {"seq_len": 4096, "recompute": "full"},
     {"dp": 16, "zero": 3, "offload_optimizer": True, "offload_activations": True}, "ideal", "sdpa", "h100-sxm"),
    ("70b-z2-every", "llama3-70b", {"seq_len": 4096, "recompute": "every:4"}, {"dp": 32, "zero": 2}, "eager",
     "sdpa", None),
    ("mixtral-ep", "mixtral-8x7b", {"seq_len": 4096}, {"dp": 8, "ep": 8, "zero": 1, "micro_batches": 4}, "eager",
     "sdpa", "h100-sxm"),
    ("mixtral-etp", "mixtral-8x7b", {"seq_len": 4096, "recompute": "selective:moe_act"},
     {"tp": 2, "dp": 4, "ep": 4, "etp": 2, "pp": 2, "micro_batches": 8}, "ideal", "sdpa", "h100-sxm"),
    ("mixtral-tp-sp", "mixtral-8x7b", {"seq_len": 4096}, {"tp": 4, "ep": 2, "dp": 2, "sp": True}, "eager",
     "sdpa", None),
    ("v3-bf16moments", "deepseek-v3", {"recipe": "bf16-moments", "seq_len": 4096},
     {"tp": 1, "pp": 16, "ep": 64, "dp": 128, "zero": 1, "micro_batches": 32}, "ideal", "sdpa", "h800"),
    ("v3-fp8-deepseek", "deepseek-v3", {"recipe": "fp8-deepseek", "seq_len": 4096, "recompute": "selective:mla_up_proj"},
     {"tp": 2, "pp": 8, "ep": 32, "dp": 128, "zero": 1, "micro_batches": 16}, "ideal", "sdpa", "h100-sxm"),
    ("v3-eager", "deepseek-v3", {"seq_len": 4096, "recompute": "full"},
     {"tp": 4, "pp": 16, "ep": 8, "dp": 32, "zero": 3, "micro_batches": 16}, "eager", "sdpa", "h100-sxm"),
    ("v3-one-gpu-budget", "deepseek-v3", {"seq_len": 131072, "recompute": "budget:1500GiB"}, {}, "ideal", "sdpa",
     None),
    ("8b-fp8-te", "llama3-8b", {"recipe": "fp8", "seq_len": 4096}, {"dp": 8, "zero": 1}, "ideal", "sdpa", "h100-sxm"),
    ("8b-fp8-eager", "llama3-8b", {"recipe": "fp8", "seq_len": 4096, "recompute": "selective:core_attn,mlp"},
     {"tp": 2}, "eager", "sdpa", "h100-sxm"),
    ("mistral-window", str(HF / "mistral-7b.json"), {"seq_len": 8192}, {}, "eager", "sdpa", None),
    ("gemma3-window", str(HF / "gemma-3-1b.json"), {"seq_len": 2048, "micro_batch": 2}, {}, "eager", "sdpa", None),
    ("gptoss-moe", str(HF / "gpt-oss-20b.json"), {"seq_len": 4096}, {"dp": 4, "ep": 4}, "eager", "sdpa",
     "h100-sxm"),
    ("qwen3moe-ideal", str(HF / "qwen3-30b-a3b.json"), {"seq_len": 4096, "recompute": "full"},
     {"tp": 2, "pp": 2, "ep": 4, "dp": 4, "micro_batches": 4}, "ideal", "sdpa", "b200"),
    ("v2lite-eager", str(HF / "deepseek-v2-lite.json"), {"seq_len": 2048}, {"dp": 2, "zero": 2}, "eager", "sdpa",
     "h100-sxm"),
]


@cache
def _spec(model: str):  # type: ignore[no-untyped-def]
    return load_model(model)


def build(case: tuple) -> Bill:  # type: ignore[type-arg]
    _, model, recipe_kw, parallel_kw, convention, attention, gpu_name = case
    recipe = make_recipe(**recipe_kw, parallel=Parallel(**parallel_kw))
    gpu = load_gpu(gpu_name) if gpu_name else None
    return make_bill(_spec(model), recipe, gpu.usable_bytes if gpu else None, convention, attention, gpu=gpu)


def _plain(value: Any) -> Any:
    """A JSON-ready copy (tuples → lists, objects → str); floats stay floats."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _line(line: Line) -> dict[str, Any]:
    return _plain({"name": line.name, "value": line.value, "unit": line.unit, "formula": line.formula,
                   "inputs": line.inputs, "provenance": line.provenance, "convention": line.convention})


def snapshot(bill: Bill) -> dict[str, Any]:
    """Every number and line of the bill that a faster engine must reproduce."""
    return {
        "lines": {k: _line(x) for k, x in bill.lines.items()},
        "resident_items": [_line(x) for x in bill.resident_items],
        "activation_items": [_line(x) for x in bill.activation_items],
        "checkpoint_items": [_line(x) for x in bill.checkpoint_items],
        "layer_rows": {k: [str(r) for r in rows] for k, rows in bill.layer_rows.items()},
        "ranks": _ranks(bill.ranks),
        "collectives": [_plain({"name": c.name, "axis": c.axis, "op": c.op, "group": c.group, "scope": c.scope,
                               "link": c.link, "calls": c.calls, "bytes": c.bytes, "seconds": c.seconds,
                               "overlap": c.overlap, "line": _line(c.line)}) for c in bill.collectives],
        "time": None if bill.time is None else {k: _line(x) for k, x in bill.time.lines.items()},
        "peak_label": None if bill.timeline is None else bill.timeline.peak.label,
        "moments_sha256": _moments_digest(bill),
    }


def _ranks(ranks: list[RankClass]) -> list[dict[str, Any]]:
    return [_plain({"name": c.name, "stages": c.stages, "ranks": c.ranks, "layers": c.layers,
                    "in_flight": c.in_flight, "memory": c.memory, "cpu": c.cpu, "owned": c.owned,
                    "model": c.model, "notes": c.notes,
                    "resident_items": [_line(x) for x in c.resident_items],
                    "activation_items": [_line(x) for x in c.activation_items],
                    "transient_items": [_line(x) for x in c.transient_items]}) for c in ranks]


def _moments_digest(bill: Bill) -> str:
    """A digest of every moment (label, items, 12 significant digits) of the bill's and each rank's timeline: the
    whole curve stays, not only its peaks, at a few bytes per bill in the golden file."""
    timelines = [bill.timeline, *(c.timeline for c in bill.ranks)]
    text = json.dumps([[(m.label, {k: f"{v:.12g}" for k, v in m.items.items()}) for m in tl.moments]
                       for tl in timelines if tl is not None])
    return hashlib.sha256(text.encode()).hexdigest()


def _diff(path: str, got: Any, want: Any, out: list[str]) -> None:
    if isinstance(want, float) or isinstance(got, float):
        if not (isinstance(got, (int, float)) and isinstance(want, (int, float))
                and math.isclose(got, want, rel_tol=REL, abs_tol=0.0)):
            out.append(f"{path}: {got!r} != {want!r}")
    elif isinstance(want, dict) and isinstance(got, dict):
        if list(got) != list(want):
            out.append(f"{path}: keys {list(got)} != {list(want)}")
        for k in want:
            if k in got:
                _diff(f"{path}.{k}", got[k], want[k], out)
    elif isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            out.append(f"{path}: {len(got)} items != {len(want)}")
        for i, (g, w) in enumerate(zip(got, want, strict=False)):
            _diff(f"{path}[{i}]", g, w, out)
    elif got != want:
        out.append(f"{path}: {got!r} != {want!r}")


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def test_golden_covers_every_case(golden: dict[str, Any]) -> None:
    assert sorted(golden) == sorted(c[0] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bill_matches_golden(case: tuple, golden: dict[str, Any]) -> None:  # type: ignore[type-arg]
    got = json.loads(json.dumps(snapshot(build(case))))  # the same float → JSON → float round trip
    problems: list[str] = []
    _diff(case[0], got, golden[case[0]], problems)
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_verdict_ranks_are_the_bills(case: tuple, golden: dict[str, Any]) -> None:  # type: ignore[type-arg]
    """verdict_ranks (what the planner's fit verdict reads) gives make_bill's rank classes, every number and line."""
    _, model, recipe_kw, parallel_kw, convention, attention, _ = case
    recipe = make_recipe(**recipe_kw, parallel=Parallel(**parallel_kw))
    ranks = verdict_ranks(_spec(model), recipe, convention, attention)
    problems: list[str] = []
    _diff(case[0], json.loads(json.dumps(_ranks(ranks))), golden[case[0]]["ranks"], problems)
    assert not problems, "\n".join(problems[:20])
    assert rank_peaks(_spec(model), recipe, convention, attention) == [c.memory["peak"] for c in ranks]


def test_bill_twice_is_the_same() -> None:
    """A cached engine gives the same bill on a second call (no cache hands back a mutated object)."""
    case = next(c for c in CASES if c[0] == "70b-pp4-1f1b")
    assert snapshot(build(case)) == snapshot(build(case))


def test_memoised_parts_are_copied_per_bill() -> None:
    """A caller that edits one bill's containers leaves the next bill of the same recipe untouched."""
    case = next(c for c in CASES if c[0] == "70b-tp8")
    first = build(case)
    want = snapshot(build(case))
    first.lines.clear()
    first.resident_items.clear()
    first.activation_items.clear()
    first.ranks[0].resident_items.clear()
    assert snapshot(build(case)) == want


if __name__ == "__main__" and "--write" in sys.argv:
    cases = (f"{json.dumps(c[0])}: {json.dumps(snapshot(build(c)), ensure_ascii=False)}" for c in CASES)
    GOLDEN.write_text("{\n" + ",\n".join(cases) + "\n}\n")  # one bill per line: diffs name the case
    print(f"wrote {GOLDEN} ({len(CASES)} bills)")
