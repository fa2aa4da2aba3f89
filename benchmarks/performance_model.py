"""The step-time model against published MFU of public training runs (docs/performance-model.md).

    python benchmarks/performance_model.py          # prints the markdown table and the error summary

Each run is billed with the layout its paper states, on the catalog GPU, at the default `--efficiency` 0.5
(chosen before these runs were looked at: nothing here is fitted, so every run is held out). Predicted MFU is
`time.mfu` (PaLM appendix B, full attention square), the convention these papers use.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import stepbill
from stepbill.spec.model import ModelSpec

KORTHIKANTI = "Korthikanti et al. 2022, arXiv 2205.05198, Tables 3 and 5 (A100 80GB, seq 2048, SP + selective recompute)"
LLAMA3 = "Llama 3 report, arXiv 2407.21783, Table 4 (H100, BF16 MFU)"


def _gpt(name: str, heads: int, hidden: int, layers: int) -> ModelSpec:
    """A Megatron GPT of the paper's Table 3: GPT-2 block, 4h FFN, vocab 51,200, learned positions, tied embeddings."""
    return ModelSpec.from_dict({
        "name": name, "family": "gpt2", "vocab_size": 51200, "hidden_size": hidden, "n_layers": layers,
        "attention": {"n_heads": heads, "head_dim": hidden // heads, "qkv_bias": True, "out_bias": True},
        "ffn": {"kind": "gelu_mlp", "intermediate_size": 4 * hidden, "bias": True},
        "norm": "layernorm", "positions": "learned", "max_position_embeddings": 2048, "tied_embeddings": True,
        "notes": f"Megatron GPT {name} ({KORTHIKANTI})"})


@dataclass(frozen=True)
class Run:
    """One published run: the model, the layout as `stepbill.bill` keywords, the published MFU and its source."""

    label: str
    model: str | ModelSpec
    options: dict[str, Any]
    published_mfu: float
    source: str
    notes: str = ""
    held_out: bool = True  # nothing is fitted: every run is held out
    extra: dict[str, Any] = field(default_factory=dict)


MEGATRON = {"seq": 2048, "tp": 8, "sp": True, "recompute": "selective:core_attn", "gpu": "a100-80gb", "dp": 1}
RUNS = [
    Run("Megatron GPT 22B, 8 × A100", _gpt("megatron-22b", 64, 6144, 48),
        {**MEGATRON, "pp": 1, "micro_batches": 4}, 0.415, KORTHIKANTI),
    Run("Megatron GPT 175B, 64 × A100", _gpt("megatron-175b", 96, 12288, 96),
        {**MEGATRON, "pp": 8, "micro_batches": 64}, 0.514, KORTHIKANTI),
    Run("Megatron GPT 530B, 280 × A100", _gpt("megatron-530b", 128, 20480, 105),
        {**MEGATRON, "pp": 35, "micro_batches": 280}, 0.560, KORTHIKANTI),
    Run("Megatron GPT 1T, 512 × A100", _gpt("megatron-1t", 160, 25600, 128),
        {**MEGATRON, "pp": 64, "micro_batches": 512}, 0.563, KORTHIKANTI),
    Run("Llama 3 405B, 8,192 × H100, seq 8K", "llama3.1-405b",
        {"seq": 8192, "tp": 8, "sp": True, "pp": 16, "dp": 64, "micro_batches": 32, "zero": 1, "gpu": "h100-sxm"},
        0.43, LLAMA3, "1F1B stand-in for Meta's interleaved schedule; no recompute assumed"),
    Run("Llama 3 405B, 16,384 × H100, seq 8K", "llama3.1-405b",
        {"seq": 8192, "tp": 8, "sp": True, "pp": 16, "dp": 128, "micro_batches": 16, "zero": 1, "gpu": "h100-sxm"},
        0.41, LLAMA3, "as above"),
    Run("Llama 3 405B, 16,384 × H100, seq 128K", "llama3.1-405b",
        {"seq": 131072, "tp": 8, "sp": True, "cp": 16, "pp": 16, "dp": 8, "micro_batches": 16, "zero": 1,
         "gpu": "h100-sxm"}, 0.38, LLAMA3, "as above; CP 16"),
]


def predict(run: Run) -> dict[str, float]:
    """The model's MFU, HFU and step time for `run` at the default efficiency."""
    b = stepbill.bill(run.model, **run.options)
    assert b.time is not None
    return {"mfu": b.time.mfu, "hfu": b.time.hfu, "step_s": b.time.step, "bubble": b.time.bubble}


def table() -> str:
    rows = ["| run | layout | published MFU | predicted MFU | error (points) | step (s) | bubble | source |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    errors = []
    for run in RUNS:
        p = predict(run)
        err = 100 * (p["mfu"] - run.published_mfu)
        errors.append(err)
        o = run.options
        layout = (f"tp {o.get('tp', 1)} · pp {o.get('pp', 1)} · cp {o.get('cp', 1)} · dp {o.get('dp', 1)} · "
                  f"{o.get('micro_batches', 1)} μb")
        rows.append(f"| {run.label} | {layout} | {100 * run.published_mfu:.1f} % | {100 * p['mfu']:.1f} % | "
                    f"{err:+.1f} | {p['step_s']:.2f} | {100 * p['bubble']:.1f} % | {run.source}"
                    + (f"; {run.notes}" if run.notes else "") + " |")
    abs_err = [abs(e) for e in errors]
    rel = [abs(e) / (100 * r.published_mfu) for e, r in zip(errors, RUNS, strict=True)]
    summary = (f"\nHeld out: {len(RUNS)} runs (all; nothing fitted). |MFU error| median {statistics.median(abs_err):.1f} "
               f"points ({100 * statistics.median(rel):.0f} % of the published value), largest {max(abs_err):.1f} "
               f"points ({100 * max(rel):.0f} %). Set used to fit: none.")
    return "\n".join(rows) + "\n" + summary


if __name__ == "__main__":
    print(table())
