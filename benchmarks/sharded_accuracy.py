"""Per-rank bill vs PyTorch at realistic sizes: FSDP2 (ZeRO-3 / ZeRO-2), ZeRO-1, tensor and sequence parallelism.

For every family the loader reads, a 1–30B-parameter model from tests/data/hf_configs (layers cut only where
the full model is above 30B or too slow to track on a 2-core machine; the `params` column gives the size
measured), seq 2K–8K, 8–256 ranks. The prediction is the bill's per-rank table: `make_bill(spec, recipe,
convention="eager")` with `recipe.parallel = Parallel(dp=N, zero=Z)` (FSDP2: recipe mixed-bf16, which
measure/sharded.py runs as fp32 shards with bf16 compute; ZeRO-1: pure-bf16, fp32 for DeepSeek), one row per rank class of
`bill.ranks`. The measurement is one rank of that class (its first rank; at most `--max-classes` classes per
case: the one holding rank 0, then the one holding the last rank, then the others) on FAKE tensors with
measure/sharded.py (FSDPMemTracker / MemTracker on a fake process group, iteration 2 of a steady step).
TP/SP cases (`--part tp`): measure/tp.py (torchtitan's Llama plan via DTensor parallelize_module, MemTracker)
against `Parallel(tp=T, sp=...)`'s `bill.ranks[0]`.

Every result is appended to benchmarks/out/sharded_accuracy.jsonl as soon as it is measured (a rerun skips the
cases already there; --fresh starts over) and the markdown table benchmarks/out/sharded_accuracy.md is
rewritten from it: family, params, seq, N, layout, rank class, category, predicted, measured, error %,
and each measurement's wall time in seconds.

Run: python benchmarks/sharded_accuracy.py [--part sharded|tp|all] [--only FAMILY,...] [--max-classes 2]
     [--fresh] [--table-only]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "tests" / "data" / "hf_configs"
OUT = ROOT / "benchmarks" / "out"
JSONL = OUT / "sharded_accuracy.jsonl"
TABLE = OUT / "sharded_accuracy.md"
GIB = 2**30

# (measured key, predicted memory key of bill.ranks[i].memory, label)
CATEGORIES = (
    ("params", "weights", "params"),
    ("grads", "grads", "grads"),
    ("optimizer_states", "optimizer", "optimizer states"),
    ("peak_forward", "peak_forward", "peak of the forward"),
    ("peak_backward", "peak_backward", "peak of the backward"),
    ("peak", "peak", "peak of the step"),
)


@dataclass(frozen=True)
class Model:
    family: str
    source: str  # a tests/data/hf_configs file or a preset name
    seq_len: int
    layouts: tuple[tuple[int, int], ...]  # (N, ZeRO)
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    tag: str = ""  # tells apart two runs of one family (the results' key and the family column)
    zero1_recipe: str = "pure-bf16"


# Worlds rotate over 8, 64 and 256 so that every family meets one small and one large world.
MODELS = (
    Model("gpt2", "gpt3-1.3b", 2048, ((8, 3), (64, 2), (256, 1))),
    Model("gpt_neox", "pythia-1.4b.json", 2048, ((64, 3), (256, 2), (8, 1))),
    Model("llama", "llama-3-8b.json", 4096, ((8, 3), (256, 3), (64, 2), (8, 1))),
    Model("mistral", "mistral-7b.json", 4096, ((256, 3), (8, 2), (64, 1)), {},
          "config as published, sliding_window 4096 = seq: transformers' explicit mask (eager/masks.py)"),
    # At seq >= window transformers builds an explicit sliding-window mask (engine/activations/eager/masks.py);
    # the "no window" row measures the same model with full causal attention.
    Model("mistral", "mistral-7b.json", 4096, ((256, 3),), {"sliding_window": None},
          "sliding_window None (full causal attention, no mask)", tag="no window"),
    Model("mistral", "mistral-7b.json", 8192, ((8, 3), (64, 2)), {},
          "config as published, seq 8192 = 2 × sliding_window: explicit mask on every layer", tag="seq 8192"),
    Model("phi3", "phi-3-mini-4k.json", 4096, ((8, 3),), {},
          "config as published, sliding_window 2047 < seq: explicit mask on every layer"),
    Model("gemma3_text", "gemma-3-4b-text.json", 4096, ((8, 3),), {},
          "config as published, sliding_window 1024 < seq: explicit mask on 29 of 34 layers"),
    Model("qwen2", "qwen2-7b.json", 2048, ((64, 3), (256, 2), (8, 1))),
    Model("qwen3", "qwen3-8b.json", 8192, ((8, 3), (64, 2), (256, 1))),
    Model("mixtral", "mixtral-8x7b.json", 2048, ((64, 3), (8, 2), (256, 1)), {"num_hidden_layers": 16},
          "16 of 32 layers (46.7B → 23.5B)"),
    Model("qwen2_moe", "qwen1.5-moe-a2.7b.json", 4096, ((256, 3), (64, 2), (8, 1))),
    Model("qwen3_moe", "qwen3-30b-a3b.json", 2048, ((8, 3), (256, 2), (64, 1)), {"num_hidden_layers": 24},
          "24 of 48 layers (30.5B → 15.6B), for time"),
    Model("deepseek_v2", "deepseek-v2-lite.json", 4096, ((64, 3), (8, 2), (256, 1)), {},
          "ZeRO-1 in fp32: under pure-bf16 transformers keeps some DeepSeek parameters in fp32 and "
          "ZeroRedundancyOptimizer refuses mixed dtypes", zero1_recipe="fp32"),
    Model("deepseek_v3", "deepseek-v3.json", 2048, ((256, 3), (64, 2), (8, 1)),
          {"num_hidden_layers": 3, "first_k_dense_replace": 1},
          "3 of 61 layers, 1 dense + 2 MoE (671B → 25.5B); ZeRO-1 in fp32 (see deepseek_v2)", zero1_recipe="fp32"),
)


def load_config(model: Model) -> dict[str, Any]:
    from stepbill.spec.hf import to_hf_config
    from stepbill.spec.presets import load_model

    path = CFG / model.source
    cfg = json.loads(path.read_text()) if path.exists() else to_hf_config(load_model(model.source))
    return {**cfg, **model.overrides}


def class_ranks(name: str, world: int) -> list[int]:
    """Ranks of a rank class from its name ("all ranks", "rank 3", "ranks 0–5,7")."""
    if name == "all ranks":
        return list(range(world))
    match = re.fullmatch(r"ranks? ([0-9,–-]+)", name)
    if match is None:
        raise ValueError(f"cannot read the ranks of class {name!r}")
    out: list[int] = []
    for run in match.group(1).split(","):
        lo, _, hi = run.replace("–", "-").partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _chosen(classes: list[tuple[str, list[int], dict[str, float]]], world: int, limit: int) -> list[int]:
    """Class indices to measure: the one holding rank 0, the one holding the last rank, then the rest."""
    order = [next(i for i, c in enumerate(classes) if 0 in c[1]),
             next(i for i, c in enumerate(classes) if world - 1 in c[1])]
    order += range(len(classes))
    return list(dict.fromkeys(order))[:limit]


def _done() -> set[str]:
    if not JSONL.exists():
        return set()
    return {json.loads(line)["key"] for line in JSONL.read_text().splitlines() if line.strip()}


def _append(record: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with JSONL.open("a") as f:
        f.write(json.dumps(record) + "\n")
    write_table()


def case_bill(spec: Any, model: Model, world: int, zero: int) -> Any:
    """The eager bill a case's ranks are compared with: FSDP2 (ZeRO-2/3) under mixed-bf16, which measure/sharded.py
    runs as fp32 shards with bf16 compute; ZeRO-1 under the model's zero1_recipe."""
    from stepbill.engine.bill import make_bill
    from stepbill.spec.parallel import Parallel
    from stepbill.spec.recipe import make_recipe

    recipe_name = "mixed-bf16" if zero in (2, 3) else model.zero1_recipe
    recipe = make_recipe(recipe_name, "adamw", 1, model.seq_len, parallel=Parallel(dp=world, zero=zero))
    return make_bill(spec, recipe, convention="eager")


def run_sharded(models: tuple[Model, ...], max_classes: int) -> None:
    from stepbill.measure.sharded import measure_rank
    from stepbill.spec.hf import from_hf_config

    done = _done()
    for model in models:
        cfg = load_config(model)
        spec = from_hf_config(cfg, model.source)
        for world, zero in model.layouts:
            start = time.perf_counter()
            bill = case_bill(spec, model, world, zero)
            predict_s = time.perf_counter() - start
            classes = [(c.name, class_ranks(c.name, world), dict(c.memory)) for c in bill.ranks]
            for index in _chosen(classes, world, max_classes):
                name, ranks, memory = classes[index]
                rank = ranks[0]
                key = f"{model.family}|{world}|zero{zero}|{rank}|{model.seq_len}" + (f"|{model.tag}" if model.tag else "")
                if key in done:
                    continue
                print(f"{model.family} N={world} ZeRO-{zero} rank {rank} ({name}) ...", flush=True)
                start = time.perf_counter()
                measured = measure_rank(cfg, world=world, zero=zero, rank=rank, seq_len=model.seq_len, mode="fake",
                                        recipe=model.zero1_recipe if zero == 1 else None)  # None: FSDP2's mixed precision
                wall = time.perf_counter() - start
                family = f"{model.family} ({model.tag})" if model.tag else model.family
                _append({"key": key, "family": family, "source": model.source, "note": model.note,
                         "params_total": bill.lines["params.total"].value, "seq": model.seq_len, "n": world,
                         "layout": f"ZeRO-{zero}", "rank_class": name, "rank": rank, "classes": len(classes),
                         "model": getattr(bill.ranks[index], "model", "measured-exact"),
                         "predicted": {m: memory[p] for m, p, _ in CATEGORIES},
                         "measured": {m: getattr(measured, m) for m, _, _ in CATEGORIES},
                         "measured_phases": measured.phase_breakdown,
                         "wall_s": round(wall, 1), "predict_s": round(predict_s, 2)})


TINY_TP_LLAMA = {"num_attention_heads": 8, "num_key_value_heads": 4}  # 8 heads of 16, 4 kv heads: tp 2 and 4


def tp_cases() -> list[tuple[str, dict[str, Any], int, int, bool, str, str, bool]]:
    """(family label, config, seq, tp, sp, recipe, mode, loss_parallel)."""
    from stepbill.measure.tiny import TINY_CONFIGS

    tiny = {**TINY_CONFIGS["llama"], **TINY_TP_LLAMA}
    big = json.loads((CFG / "llama-3-8b.json").read_text())
    out = [("llama (tiny)", tiny, 128, tp, sp, "fp32", "real", lp) for lp in (False, True) for tp in (2, 4)
           for sp in (False, True)]
    out += [("llama (llama-3-8b)", big, 2048, 8, sp, "pure-bf16", "fake", False) for sp in (False, True)]
    out.append(("llama (llama-3-8b)", big, 2048, 8, True, "pure-bf16", "fake", True))
    return out


def run_tp() -> None:
    from stepbill.engine.bill import make_bill
    from stepbill.measure.tp import measure_tp_rank
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.parallel import Parallel
    from stepbill.spec.recipe import make_recipe

    done = _done()
    for label, cfg, seq, tp, sp, recipe_name, mode, lp in tp_cases():
        key = f"{label}|tp{tp}|sp{int(sp)}|{seq}" + ("|loss-parallel" if lp else "")
        if key in done:
            continue
        spec = from_hf_config(cfg)
        bill = make_bill(spec, make_recipe(recipe_name, "adamw", 1, seq, parallel=Parallel(tp=tp, sp=sp)),
                         convention="eager")
        memory = bill.ranks[0].memory
        print(f"{label} tp={tp} sp={sp} loss_parallel={lp} ...", flush=True)
        start = time.perf_counter()
        measured = measure_tp_rank(cfg, tp, sp, 1, seq, recipe_name, mode=mode, loss_parallel=lp)
        wall = time.perf_counter() - start
        _append({"key": key, "family": label, "source": "", "note": f"{recipe_name}, {mode} tensors",
                 "params_total": bill.lines["params.total"].value, "seq": seq, "n": tp,
                 "layout": ("TP+SP" if sp else "TP") + (" loss-parallel" if lp else ""), "rank_class": bill.ranks[0].name, "rank": 0,
                 "classes": len(bill.ranks), "model": getattr(bill.ranks[0], "model", ""),
                 "predicted": {m: memory[p] for m, p, _ in CATEGORIES},
                 "measured": {m: getattr(measured, m) for m, _, _ in CATEGORIES},
                 "measured_phases": measured.phase_breakdown,
                 "wall_s": round(wall, 1), "predict_s": 0.0})


def repredict_tp() -> None:
    """Recompute the TP rows' predictions with today's engine (the measurements do not depend on it)."""
    from stepbill.engine.bill import make_bill
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.parallel import Parallel
    from stepbill.spec.recipe import make_recipe

    cases = {}
    for label, cfg, seq, tp, sp, recipe_name, _mode, lp in tp_cases():
        cases[f"{label}|tp{tp}|sp{int(sp)}|{seq}" + ("|loss-parallel" if lp else "")] = (cfg, seq, tp, sp, recipe_name)
    rows = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]
    for row in rows:
        if row["key"] in cases:
            cfg, seq, tp, sp, recipe_name = cases[row["key"]]
            bill = make_bill(from_hf_config(cfg), make_recipe(recipe_name, "adamw", 1, seq,
                                                              parallel=Parallel(tp=tp, sp=sp)), convention="eager")
            memory = bill.ranks[0].memory
            row["predicted"] = {m: memory[p] for m, p, _ in CATEGORIES}
            row["model"] = bill.ranks[0].model
    JSONL.write_text("".join(json.dumps(row) + "\n" for row in rows))


def repredict() -> None:
    """Recompute every row's prediction with today's engine (the measurements do not depend on it): the sharded
    cases' rank classes from MODELS, the TP rows (repredict_tp)."""
    rows = repredicted_records()
    JSONL.write_text("".join(json.dumps(row) + "\n" for row in rows))
    repredict_tp()


def repredicted_records() -> list[dict[str, Any]]:
    """The JSONL results with every data-parallel row's prediction recomputed by today's engine (nothing written)."""
    from stepbill.spec.hf import from_hf_config

    predicted: dict[str, tuple[dict[str, float], str]] = {}
    for model in MODELS:
        cfg = load_config(model)
        spec = from_hf_config(cfg, model.source)
        for world, zero in model.layouts:
            for c in case_bill(spec, model, world, zero).ranks:
                for rank in class_ranks(c.name, world):
                    key = f"{model.family}|{world}|zero{zero}|{rank}|{model.seq_len}" + (
                        f"|{model.tag}" if model.tag else "")
                    predicted[key] = ({m: c.memory[p] for m, p, _ in CATEGORIES}, getattr(c, "model", ""))
    rows = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]
    for row in rows:
        if row["key"] in predicted:
            row["predicted"], row["model"] = predicted[row["key"]]
    return rows


def _error(pred: float, meas: float) -> float:
    return 0.0 if pred == meas else ((pred - meas) / meas if meas else float("inf"))


def _shown(err: float) -> str:
    return "exact" if abs(err) < 5e-5 else f"{100 * err:+.2f}%"


def case_table(records: list[dict[str, Any]] | None = None) -> str:
    """docs/accuracy.md's per-rank table: one row per case (model, seq, ranks, layout), the worst error over the rank
    classes measured, from `records` (default: the JSONL results, their predictions as last recorded: `--repredict`
    first)."""
    if records is None:
        records = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]
    notes = {f"{m.family} ({m.tag})" if m.tag else m.family: m.note for m in MODELS}
    cases: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    # the data-parallel cases first, in MODELS' order, then the TP ones
    order = {name: i for i, name in enumerate(notes)}
    for r in sorted(records, key=lambda r: (r["layout"].startswith("TP"), order.get(r["family"], len(order)),
                                            r["family"], r["layout"], r["n"])):
        cases.setdefault((r["family"], r["params_total"], r["seq"], r["n"], r["layout"]), []).append(r)
    lines = ["| family | params | seq | ranks | layout | rank classes measured | `ranks[].model` | params · grads · "
             "states (worst) | peak fwd (worst) | peak bwd (worst) | peak (worst) | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (family, params, seq, n, layout), rs in cases.items():
        def worst(m: str, rs: list[dict[str, Any]] = rs) -> float:
            return max((_error(r["predicted"][m], r["measured"][m]) for r in rs), key=abs)

        states = [worst(m) for m in ("params", "grads", "optimizer_states")]
        resident = "exact" if all(abs(e) < 5e-5 for e in states) else " · ".join(map(_shown, states))
        lines.append(f"| {family} | {params / 1e9:.2f}B | {seq} | {n} | {layout} | {len(rs)} of {rs[0]['classes']} | "
                     f"{rs[0]['model']} | {resident} | {_shown(worst('peak_forward'))} | "
                     f"{_shown(worst('peak_backward'))} | {_shown(worst('peak'))} | "
                     f"{notes.get(family) or rs[0].get('note') or ''} |")
    return "\n".join(lines) + "\n"


DOC = ROOT / "docs" / "accuracy.md"
DOC_BEGIN, DOC_END = "<!-- per-rank:begin -->", "<!-- per-rank:end -->"


def doc_block(text: str) -> str:
    return text.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0].strip("\n") + "\n"


def write_doc() -> None:
    text = DOC.read_text()
    head, rest = text.split(DOC_BEGIN, 1)
    DOC.write_text(f"{head}{DOC_BEGIN}\n{case_table()}{DOC_END}{rest.split(DOC_END, 1)[1]}")


def _bytes(v: float) -> str:
    return f"{v / GIB:.4f} GiB" if v >= 2**24 else f"{v:,.0f} B"


def write_table() -> str:
    """Rewrite benchmarks/out/sharded_accuracy.md from the JSONL results; returns the markdown."""
    records = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()] if JSONL.exists() else []
    lines = [
        "# Per-rank bill vs PyTorch: FSDP2 / ZeRO-1 / TP / SP",
        "",
        "Produced by `python benchmarks/sharded_accuracy.py` (torch 2.13 CPU, transformers 5.24, fake tensors for "
        "every sharded case). Predicted: `make_bill(..., convention=\"eager\").ranks` for `Parallel(dp=N, "
        "zero=Z)` (FSDP2: mixed-bf16 = fp32 shards, bf16 compute; ZeRO-1: pure-bf16, fp32 for DeepSeek) or "
        "`Parallel(tp=T, sp=...)`. "
        "Measured: one rank of the class (measure/sharded.py: FSDPMemTracker for ZeRO-3/2, MemTracker with "
        "ZeroRedundancyOptimizer for ZeRO-1; measure/tp.py: MemTracker on torchtitan's Llama TP plan). "
        "error = (predicted − measured) / measured. `s`: wall time of the measurement (warm-up + tracked "
        "iteration), 2 shared CPU cores.",
        "",
        "| family | params | seq | N | layout | rank class (measured rank) | category | predicted | measured | "
        "error | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = {f"{m.family} ({m.tag})" if m.tag else m.family: m.note for m in MODELS if m.note}
    for r in records:
        if r.get("note"):
            notes[r["family"]] = r["note"]
        for m, _, label in CATEGORIES:
            pred, meas = r["predicted"][m], r["measured"][m]
            err = "exact" if pred == meas else (f"{100 * (pred - meas) / meas:+.2f}%" if meas else "n/a")
            lines.append(f"| {r['family']} | {r['params_total'] / 1e9:.2f}B | {r['seq']} | {r['n']} | {r['layout']} | "
                         f"{r['rank_class']} ({r['rank']}) of {r['classes']} | {label} | {_bytes(pred)} | "
                         f"{_bytes(meas)} | {err} | {r['wall_s']:.0f} |")
    if notes:
        lines += ["", "Notes: " + "; ".join(f"{k}: {v}" for k, v in notes.items()) + "."]
    text = "\n".join(lines) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("sharded", "tp", "all"), default="all")
    parser.add_argument("--only", default="", help="comma-separated families (sharded part)")
    parser.add_argument("--max-classes", type=int, default=2, help="rank classes measured per case")
    parser.add_argument("--fresh", action="store_true", help="forget the results already in the JSONL file")
    parser.add_argument("--table-only", action="store_true", help="rewrite the table from the JSONL file")
    parser.add_argument("--repredict-tp", action="store_true",
                        help="recompute the TP rows' predictions with today's engine, then rewrite the table")
    parser.add_argument("--repredict", action="store_true",
                        help="recompute every row's prediction with today's engine, then rewrite the tables")
    parser.add_argument("--doc", action="store_true", help="rewrite docs/accuracy.md's per-rank table too")
    args = parser.parse_args()
    if args.fresh and JSONL.exists():
        JSONL.unlink()
    if args.repredict:
        repredict()
    elif args.repredict_tp:
        repredict_tp()
    elif not args.table_only:
        only = {s for s in args.only.split(",") if s}
        if args.part in ("tp", "all"):
            run_tp()
        if args.part in ("sharded", "all"):
            run_sharded(tuple(m for m in MODELS if not only or m.family in only), args.max_classes)
    print(write_table())
    if args.doc:
        write_doc()


if __name__ == "__main__":
    main()
