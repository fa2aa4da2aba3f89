"""The bill as one JSON object (schema documented in docs/json.md)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from stepbill.engine.bill import Bill
from stepbill.engine.fit import Fit
from stepbill.engine.line import Line
from stepbill.engine.peak_items import peak_items, peak_phase
from stepbill.engine.unmodelled import unmodelled
from stepbill.report.notes import attention_unmodelled
from stepbill.report.parallel_json import parallel_to_json
from stepbill.spec.model import ModelSpec


@lru_cache(maxsize=64)  # the spec is frozen; its dict is read-only output
def _spec_dict(spec: ModelSpec) -> dict[str, Any]:
    return spec.to_dict()


def _int(line: Line) -> int:
    return round(line.value)


def bill_to_json(bill: Bill, fit: Fit | None = None, layout_note: str = "") -> dict[str, Any]:
    """Plain JSON-ready dict: bytes, params and FLOPs as integers; every line with its formula; `fit` (engine/fit.py)
    adds the fit verdict (`fit`, `ranks[].fit`)."""
    spec, recipe, lines = bill.model, bill.recipe, bill.lines
    memory_items = [x.to_json() for x in peak_items(bill)]
    assert bill.timeline is not None
    timeline = bill.timeline
    out: dict[str, Any] = {
        "schema": "stepbill.bill/1",
        "units": {"memory": "bytes", "params": "count", "text_output": "binary units: GiB = 2^30 B"},
        "convention": bill.convention,
        "attention": bill.attention,
        "model": {
            "name": spec.name,
            "family": spec.family,
            "params_total": _int(lines["params.total"]),
            "params_active": _int(lines["params.active"]),
            "params_trainable": _int(lines["params.trainable"]),
            "params_by_component": {
                comp: {"total": total, "active": active}
                for comp, (total, active) in bill.inventory.by_component().items()
            },
            "spec": _spec_dict(spec),
        },
        "recipe": {
            "precision": recipe.precision.name,
            "bytes_per_param": {
                "weights": recipe.precision.weights,
                "grads": recipe.precision.grads,
                "master": recipe.precision.master,
                "optimizer_state": recipe.precision.state,
                "activation": recipe.precision.activation,
            },
            "optimizer": recipe.optimizer,
            "micro_batch": recipe.micro_batch,
            "seq_len": recipe.seq_len,
            "tokens": recipe.tokens,
            "recompute": recipe.recompute,
            "lora": None if recipe.lora is None else {"rank": recipe.lora.rank, "targets": list(recipe.lora.targets)},
        },
        "memory": {
            key: _int(lines[f"memory.{key}"])
            for key in ("weights", "grads", "optimizer", "model", "resident", "activations", "peak", "peak_forward",
                        "peak_backward")
        },
        "flops": {
            "step": _int(lines["flops.step"]),
            "step_noncausal": _int(lines["flops.step_noncausal"]),
            "forward": _int(lines["flops.forward"]),
            "forward_noncausal": _int(lines["flops.forward_noncausal"]),
            "attention": _int(lines["flops.attention"]),
            "lm_head": _int(lines["flops.lm_head"]),
            "recompute": _int(lines["flops.recompute"]),
            "six_nd": _int(lines["flops.6nd"]),
            "attention_share": lines["flops.attention_share"].value,
            "step_over_6nd": lines["flops.6nd_ratio"].value,
            "convention": "2 FLOPs per multiply-add, matmuls only; step = 3 × forward + recompute"
            + ("" if recipe.lora is None else " − the frozen base's weight-gradient GEMMs − the first layer's unneeded "
               "input gradients + 3 × the adapters' forward (LoRA: about 2 × forward, lines/flops.lora_step_over_forward)")
            + "; flops.step causal-halved attention, step_noncausal full square (FlopCounterMode's)",
        },
        "timeline": [
            {"phase": m.phase, "moment": m.label, "total": m.total, **m.items} for m in timeline.moments
        ],
        "activations": {
            "convention_note": lines["memory.activations"].convention,
            "layer_rows": {
                kind: [
                    {"name": r.name, "width_per_token": r.width, "dtype_bytes": r.dtype_bytes,
                     "bytes_per_token": r.bytes_per_token, "saved_for": r.saved_for,
                     "recompute": r.recompute.kind}
                    for r in rows
                ]
                for kind, rows in bill.layer_rows.items()
            },
        },
        "checkpoint": {"bytes": _int(lines["checkpoint.bytes"]), "items": [x.to_json() for x in bill.checkpoint_items],
                       "weights_export": lines["checkpoint.weights_export"].to_json()},
        # configured fields the bill does not model yet (engine/unmodelled.py), and --attention eager's gap
        "unmodelled": unmodelled(spec) + attention_unmodelled(bill, fit),
        "lines": {name: line.to_json() for name, line in lines.items()},
    }
    out["memory"]["peak_phase"] = peak_phase(bill)
    out["memory"]["peak_moment"] = timeline.peak.label
    out["memory"]["peak_dominant"] = timeline.peak.dominant
    out["memory"]["advice"] = timeline.advice
    out["memory"]["activation_items"] = [x.to_json() for x in bill.activation_items]
    out["memory"]["items"] = memory_items
    cards = {k.split(".", 1)[1]: _int(v) for k, v in lines.items() if k.startswith("cards.")}
    if cards:
        out["cards"] = cards
    out.update(parallel_to_json(bill, fit, layout_note))
    out["run"] = {name.removeprefix("run."): {"value": line.value, "unit": line.unit, "explain": line.explain(),
                                              "provenance": line.provenance, "convention": line.convention}
                  for name, line in bill.run.items()}
    return out
