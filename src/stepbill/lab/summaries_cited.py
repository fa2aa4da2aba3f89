"""Summaries of the cited topics for `stepbill lab`: published figures the seeds quote (`citations`) and Megatron-LM's
defaults (`megatron-defaults`), each value with its source, the seed's arithmetic on it, and the project's own
computation of the same quantity where it has one. Same shape as lab/summaries.py's."""

from __future__ import annotations

import inspect

from stepbill.lab import adam, backprop, cited, clip
from stepbill.lab._summary import Summary, _table


def _default(function: object, name: str) -> object:
    """The default of `function`'s parameter `name` (lab adam's registers, lab clip's trace statistics)."""
    return inspect.signature(function).parameters[name].default  # type: ignore[arg-type]


def citations_summary() -> Summary:
    """Seed 000's pure citations (§1.4, §3.3, §3.4, §3.5, §6.3) as cited values with their sources."""
    y91, y94, y01 = cited.VANISHING_YEARS
    lo, hi = cited.POLYAK_RHO
    adam_beta1 = float(_default(adam.registers, "beta1"))  # type: ignore[arg-type]
    small, large = cited.V3_BATCH_SEQUENCES
    stable, runs, _ = cited.ST_MOE_TABLE4["baseline"]
    values = {
        "vanishing_years": list(cited.VANISHING_YEARS),
        "years_thesis_to_paper": y94 - y91,
        "years_thesis_to_chapter": y01 - y91,
        "rnn_steps": cited.RNN_STEPS,
        "rnn_chain_links": cited.RNN_STEPS,  # one link per unrolled step
        "chain_power_0.8_rnn": backprop.chain_power(0.8, cited.RNN_STEPS),
        "polyak_rho_range": list(cited.POLYAK_RHO),
        "lab_adam_beta1_default": adam_beta1,
        "adam_beta1_in_polyak_range": lo <= adam_beta1 <= hi,
        "years_polyak_to_backprop": cited.BACKPROP_YEAR - cited.POLYAK_YEAR,
        "adagrad_pages": list(cited.ADAGRAD_PAGES),
        "adagrad_page_count": cited.page_count(*cited.ADAGRAD_PAGES),
        "v3_batch_sequences": list(cited.V3_BATCH_SEQUENCES),
        "v3_batch_ramp_ratio": large / small,
        "v3_batch_tokens": [small * cited.V3_PRETRAIN_SEQ, large * cited.V3_PRETRAIN_SEQ],
        "v3_ramp_tokens": cited.V3_RAMP_TOKENS,
        "stmoe_table4": {k: {"stable": s, "runs": n, "quality": q} for k, (s, n, q) in cited.ST_MOE_TABLE4.items()},
        "stmoe_baseline_crashes": cited.crashed_runs(stable, runs),
        "sources": {c.claim: c.source for c in (cited.VANISHING_HISTORY, cited.POLYAK, cited.ADAGRAD,
                                                 cited.V3_BATCH_RAMP, cited.ST_MOE)},
    }
    rows = [
        [cited.VANISHING_HISTORY.claim, "years thesis → paper, thesis → chapter", f"{y91}, {y94}, {y01}",
         f"{y94 - y91} y, {y01 - y91} y", cited.VANISHING_HISTORY.short],
        [cited.VANISHING_HISTORY.claim, "an RNN unrolled 1,000 steps: links of the chain; 0.8^links (lab backprop)",
         f"{cited.RNN_STEPS:,} steps", f"{cited.RNN_STEPS:,} links; {values['chain_power_0.8_rnn']:.3g}",
         "chain_power of lab backprop"],
        [cited.POLYAK.claim, "Polyak's ρ range; lab adam's default β₁ inside it", f"{lo} – {hi}",
         f"β₁ {adam_beta1:g}: {values['adam_beta1_in_polyak_range']}", cited.POLYAK.short],
        [cited.POLYAK.claim, "years from Polyak to backprop's Nature paper", f"{cited.POLYAK_YEAR}, {cited.BACKPROP_YEAR}",
         f"{values['years_polyak_to_backprop']} y", cited.POLYAK.short],
        [cited.ADAGRAD.claim, "pages of the paper (inclusive range)", "2121–2159",
         f"{values['adagrad_page_count']} pages", cited.ADAGRAD.short],
        [cited.V3_BATCH_RAMP.claim, "batch ramp (sequences; tokens at seq 4,096)", f"{small:,} → {large:,}",
         f"×{large / small:g}; {small * cited.V3_PRETRAIN_SEQ / 1e6:.1f}M → {large * cited.V3_PRETRAIN_SEQ / 1e6:.1f}M "
         "tokens", cited.V3_BATCH_RAMP.short],
        *[[cited.ST_MOE.claim, f"Table 4: {k}", f"{s}/{n} stable, quality {q}",
           f"{cited.crashed_runs(s, n)} of {n} crashed", cited.ST_MOE.short]
          for k, (s, n, q) in cited.ST_MOE_TABLE4.items()],
    ]
    return {
        "topic": "citations",
        "settings": {},
        "values": values,
        "tables": [_table("Published figures seed 000 quotes (cited, not computed by stepbill)",
                          ["claim", "quantity", "cited", "arithmetic", "source"], rows,
                          "the cited column is copied from the source; stepbill computes only the arithmetic on it, "
                          "and the batch ramp is not modelled (`bill --global-batch-tokens` takes one batch). Full "
                          "references: --json values/sources.")],
        "units_note": "Units: y = years; tokens decimal (M = 1e6); ρ and β₁ dimensionless.",
    }


def megatron_defaults_summary() -> Summary:
    """Seed 000 §2.5/§7's Megatron-LM defaults, cited from its source at a pinned commit (Megatron is not a
    dependency: nothing is read at run time), beside the project's values for the same settings."""
    from stepbill.spec.recompute_policy import MEGATRON_MODULES

    clip_grad, rec = cited.MEGATRON_CLIP_GRAD, cited.MEGATRON_RECOMPUTE_MODULES
    lab_clip = float(_default(clip.trace_stats, "threshold"))  # type: ignore[arg-type]
    modelled = [m for m in cited.MEGATRON_RECOMPUTE_CHOICES if m in MEGATRON_MODULES]
    values = {
        "clip_grad_default": clip_grad.value,
        "recompute_modules_default": list(rec.value),  # type: ignore[call-overload]
        "recompute_modules_choices": list(cited.MEGATRON_RECOMPUTE_CHOICES),
        "stepbill_recompute_modules": list(MEGATRON_MODULES),
        "recompute_default_modelled": all(m in MEGATRON_MODULES for m in rec.value),  # type: ignore[attr-defined]
        "lab_clip_threshold_default": lab_clip,
        "commit": cited.MEGATRON_COMMIT,
        "sources": {d.name: f"{cited.MEGATRON_REPO}/blob/{cited.MEGATRON_COMMIT}/{d.file} lines {d.lines}"
                    for d in (clip_grad, rec)},
    }
    rows = [
        [clip_grad.name, f"{clip_grad.value}", f"{clip_grad.file}:{clip_grad.lines}", clip_grad.quoted,
         f"`lab clip` threshold default {lab_clip:g}"],
        [rec.name, ", ".join(rec.value), f"{rec.file}:{rec.lines}", rec.quoted,  # type: ignore[arg-type]
         f"`--recompute selective:core_attn` (stepbill models {len(modelled)} of Megatron's "
         f"{len(cited.MEGATRON_RECOMPUTE_CHOICES)} module names: {', '.join(modelled)})"],
    ]
    return {
        "topic": "megatron-defaults",
        "settings": {},
        "values": values,
        "tables": [_table(f"Megatron-LM defaults the seed quotes (cited from commit {cited.MEGATRON_COMMIT[:12]})",
                          ["setting", "default", "source", "source text", "stepbill's value"], rows,
                          "cited, not read at run time: Megatron-LM is not a dependency; the source lines are "
                          "pinned to one commit.")],
    }
