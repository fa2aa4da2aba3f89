"""Seed 000's worked numbers recomputed by the engine, each beside the seed's printed value and inputs.

Every value here comes from project code (the bill, the activation rows, the recompute ranking, the state
ledger, the ZeRO sharding); the seed's printed number is a string copied from seed 000 (catalog ids from
../shared/spec/seed-facts.yaml). Where the seed's inputs differ from a preset's (37B vs 37.6B active, one layer
vs the whole model, 125M vs 125.2M parameters, sum of items vs timeline peak), both numbers are shown with the
reason. Units: GiB = 2^30 B, TiB = 2^40 B, KiB = 2^10 B, GB = 1e9 B (ZeRO's figure), TFLOP = 1e12, PFLOP = 1e15.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from stepbill.engine import activations as act
from stepbill.engine import flops as fl
from stepbill.engine import korthikanti as kt
from stepbill.engine.bill import Bill, make_bill
from stepbill.engine.parallel.layout import zero_item_bytes
from stepbill.engine.params import param_inventory
from stepbill.engine.recompute import make_plan, sqrt_l_optimum
from stepbill.engine.recompute.ranking import rank_layer
from stepbill.engine.states import bytes_per_param, cards_needed, checkpoint_lines, lora_adapter_groups, resident_bytes
from stepbill.spec import load_preset
from stepbill.spec.recipe import LoRA, make_recipe, precision
from stepbill.spec.recompute_policy import parse_recompute

KIB, GIB, TIB = 2**10, 2**30, 2**40
GB, TF, PF = 1e9, 1e12, 1e15
V3_SEQ = 131_072  # seed 000 §1.6/§5: one 128K sequence
SMALL_BATCH, SMALL_SEQ = 8, 1024  # seed 000 §5 worked example: micro-batch 8 × seq 1,024


@dataclass(frozen=True)
class Check:
    """One seed number recomputed: `value` is stepbill's (project code), `seed` the seed's printed text."""

    claim: str  # catalog id
    quantity: str
    value: float
    unit: str
    seed: str
    inputs: str
    note: str = ""  # why a preset's exact number differs, where it does
    preset_value: float | None = None  # the same quantity with the preset's exact inputs, where they differ


@cache
def _v3() -> Any:
    return load_preset("deepseek-v3")


@cache
def _small() -> Any:
    return load_preset("gpt3-125m")


@cache
def _bill(model: str, seq: int, micro_batch: int = 1, recompute: str = "none", recipe: str = "mixed-bf16",
          gpu_gib: float | None = None) -> Bill:
    spec = load_preset(model)
    return make_bill(spec, make_recipe(recipe, micro_batch=micro_batch, seq_len=seq, recompute=recompute),
                     gpu_gib * GIB if gpu_gib else None)


def _rows_gib(names: tuple[str, ...], rows: dict[str, Any]) -> float:
    return sum(rows[n].bytes_per_token for n in names) * V3_SEQ / GIB


def v3_activation_table() -> list[Check]:
    """Seed §1.6–1.7: DeepSeek-V3's kept tensors at 128K tokens, bf16, in the seed's grouping (ideal convention)."""
    v3 = _v3()
    rows = {r.name: r for r in act.layer_rows(v3, "moe", 2)}
    inp = "DeepSeek-V3, 131,072 tokens, bf16, ideal convention"
    mla = [
        ("v3-mla-row1", "norm input (layer input)", ("attn.norm_in",), "1.75"),
        ("v3-mla-row2", "norm output", ("attn.norm_out",), "1.75"),
        ("v3-mla-row3", "Q down-proj before + after norm (2 × 1,536)", ("attn.q_down", "attn.q_down_norm"), "0.75"),
        ("v3-mla-row4", "KV down-proj 576 + after norm 512", ("attn.kv_down", "attn.kv_down_norm"), "0.27"),
        ("v3-mla-row5", "Q expanded 128 × 192", ("attn.q_up",), "6.00"),
        ("v3-mla-row6", "K, V decompressed 128 × 256", ("attn.kv_up",), "8.00"),
        ("v3-mla-row7", "attention output 128 × 128", ("attn.core_out",), "4.00"),
        ("v3-mla-row8", "logsumexp (fp32) 128", ("attn.logsumexp",), "0.06"),
    ]
    moe = [
        ("v3-moe-row1", "norm input / output 2 × 7,168", ("moe.norm_in", "moe.norm_out"), "3.50"),
        ("v3-moe-row2", "router scores 256", ("moe.router_scores",), "0.06"),
        ("v3-moe-row3", "dispatched activations 9 × 7,168", ("moe.dispatched", "moe.shared.input"), "15.75"),
        ("v3-moe-row4", "gate / up / product 3 × 9 × 2,048",
         ("moe.gate", "moe.up", "moe.product", "moe.shared.gate", "moe.shared.up", "moe.shared.product"), "13.50"),
        ("v3-moe-row5", "expert outputs before combine 9 × 7,168", ("moe.expert_out", "moe.shared.out"), "15.75"),
    ]
    out = [Check(c, q, _rows_gib(n, rows), "GiB", s, inp) for c, q, n, s in mla + moe]
    mla_sub = sum(r.bytes_per_token for r in rows.values() if r.block == "mla") * V3_SEQ / GIB
    moe_sub = sum(r.bytes_per_token for r in rows.values() if r.block == "moe") * V3_SEQ / GIB
    nine = _rows_gib(("moe.dispatched", "moe.shared.input", "moe.expert_out", "moe.shared.out"), rows)
    dense = act.layer_bytes_per_token(v3, "dense", 2) * V3_SEQ / GIB
    full = _bill("deepseek-v3", V3_SEQ, recompute="full")["memory.activations"].value
    out += [
        Check("v3-act-unit-1.75GiB", "one hidden-width bf16 tensor", v3.hidden_size * 2 * V3_SEQ / GIB, "GiB", "1.75",
              inp),
        Check("v3-mla-subtotal", "MLA block subtotal per layer", mla_sub, "GiB", "22.6", inp),
        Check("v3-moe-subtotal", "MoE block subtotal per layer", moe_sub, "GiB", "48.6", inp),
        Check("v3-moe-nine-copies-31.5", "9 in + 9 out copies (8 routed + 1 shared)", nine, "GiB", "31.5", inp),
        Check("v3-layer-moe-71", "one MoE layer (MLA + MoE)", act.layer_bytes_per_token(v3, "moe", 2) * V3_SEQ / GIB,
              "GiB", "71", inp),
        Check("v3-layer-dense-40", "one dense layer", dense, "GiB", "40", inp,
              "dense FFN output not counted (the seed's reading; catalog: with-assumption)"),
        Check("v3-total-4.15TiB", "58 MoE + 3 dense layers, no recompute",
              _bill("deepseek-v3", V3_SEQ)["memory.activations"].value / TIB, "TiB", "4.15", inp),
        Check("v3-full-recompute-106.75", "full recompute: 61 layer inputs only",
              act.full_recompute_bytes_per_token(v3, 2, with_working_set=False) * V3_SEQ / GIB, "GiB", "106.75", inp,
              "the seed keeps the 61 layer inputs only; `stepbill bill --recompute full` adds one layer's working "
              "set being recomputed (other reading)", full / GIB),
    ]
    return out


def gpt3_small_example() -> list[Check]:
    """Seed §5 worked example: GPT-3 125M, micro-batch 8 × seq 1,024, mixed-bf16 AdamW (P = 125e6 in the seed)."""
    small = _small()
    none = _bill("gpt3-125m", SMALL_SEQ, SMALL_BATCH)
    full = _bill("gpt3-125m", SMALL_SEQ, SMALL_BATCH, recompute="full")
    p_seed, p_preset = 125e6, none["params.total"].value
    table = bytes_per_param(precision("mixed-bf16"), "adamw")
    why_p = (f"seed rounds the model to P = 125e6; the preset counts {p_preset:,.0f} parameters "
             "(GPT-2 layout, tied embeddings, biases, learned positions)")
    per_layer = act.layer_bytes_per_token(small, "dense", 2)
    rows = act.layer_rows(small, "dense", 2)
    a_none, a_full = none["memory.activations"].value, full["memory.activations"].value
    inp = "P = 125e6 (seed), 16 B/param; micro-batch 8 × seq 1,024"

    def res(key: str, per_param: float, claim: str, seed: str, what: str) -> Check:
        return Check(claim, what, resident_bytes(p_seed, per_param) / GIB, "GiB", seed, inp, why_p,
                     none[key].value / GIB)

    seed_none = (resident_bytes(p_seed, 16) + a_none) / GIB
    seed_full = (resident_bytes(p_seed, 16) + a_full) / GIB
    extra_bill = full["flops.step"].value / none["flops.step"].value - 1
    extra_seed = none["flops.forward"].value / none["flops.step"].value  # the whole forward once more: 3 → 4 passes
    return [
        Check("gpt3s-params-consistency", "parameters of 12 × 768 (MLP 3,072)", p_preset / 1e6, "M", "125",
              "gpt3-125m preset (GPT-3 Table 2.1 first row)"),
        res("memory.weights", table["weights"], "gpt3s-weights-0.23", "0.23", "bf16 weights"),
        res("memory.grads", table["grads"], "gpt3s-grads-0.23", "0.23", "bf16 grads"),
        res("memory.optimizer", table["master"] + table["m"] + table["v"], "gpt3s-opt-1.40", "1.40",
            "fp32 master + m + v"),
        res("memory.resident", sum(table.values()), "gpt3s-resident-1.86", "1.86", "resident subtotal"),
        Check("gpt3s-8x", "resident / weights", none["memory.resident"].value / none["memory.weights"].value, "×", "8",
              "16 B / 2 B"),
        Check("gpt3s-act-width-11520", "kept numbers per token per layer", sum(r.width for r in rows), "numbers",
              "11,520", "768 hidden, 3,072 MLP"),
        Check("gpt3s-act-22.5KiB", "kept bytes per token per layer", per_layer / KIB, "KiB", "22.5", "bf16"),
        Check("gpt3s-act-270KiB", "× 12 layers", small.n_layers * per_layer / KIB, "KiB", "270", "12 layers"),
        Check("gpt3s-act-2.11GiB", "activations, 8,192 tokens", a_none / GIB, "GiB", "2.11", inp),
        Check("gpt3s-act-gt-resident", "activations − resident (> 0: activations larger)",
              (a_none - resident_bytes(p_seed, 16)) / GIB, "GiB", "2.11 > 1.86", inp),
        Check("gpt3s-recompute-0.32", "full recompute: 12 layer inputs + one layer's working set", a_full / GIB, "GiB",
              "0.32", inp),
        Check("gpt3s-6.7x", "activations saved by full recompute", a_none / a_full, "×", "6.7", inp),
        Check("gpt3s-totals", "resident + activations, no recompute (seed's sum of items)", seed_none, "GiB", "3.97",
              inp, "the seed adds every item as if all were alive at once; the bill's peak (other reading) is the "
              "largest moment of the step's timeline, where grads are still being produced while activations are "
              "freed, with the preset's 125.2M parameters", none["memory.peak"].value / GIB),
        Check("gpt3s-totals:full-recompute", "resident + activations, full recompute (seed's sum of items)", seed_full, "GiB",
              "2.18", inp, "same two readings: sum of items (seed) vs timeline peak (bill, preset_value)",
              full["memory.peak"].value / GIB),
        Check("gpt3s-totals:compute", "extra compute of full recompute", extra_seed * 100, "%", "33", inp,
              "the seed recomputes the whole forward (3 → 4 passes); the bill recomputes the 12 transformer layers "
              "only — the LM head's forward (29 % of this small model's forward, vocabulary 50,257) is not "
              "recomputed — so the bill's step grows by the other reading, in %", extra_bill * 100),
        Check("gpt3s-5000x", "DeepSeek-V3 / GPT-3 125M parameters",
              param_inventory(_v3()).total / p_preset, "×", "~5,000", "671B / 125M presets"),
    ]


def v3_full_bill() -> list[Check]:
    """Seed §5: the full bill of DeepSeek-V3 at 128K (P = 671e9 and 37e9 active in the seed)."""
    v3 = _v3()
    table = bytes_per_param(precision("mixed-bf16"), "adamw")
    bill = _bill("deepseek-v3", V3_SEQ, gpu_gib=80.0)
    resident = resident_bytes(671e9, sum(table.values()))
    per_seq_full = act.full_recompute_bytes_per_token(v3, 2, with_working_set=False) * V3_SEQ
    seqs = resident / per_seq_full
    active = param_inventory(v3).active
    inp = "P = 671e9, 16 B/param (seed)"
    return [
        Check("bill-resident-9.76TiB", "resident state", resident / TIB, "TiB", "9.76", inp,
              "preset's 671.03B parameters (MTP module not built) give the same 9.76 TiB (other reading)",
              bill["memory.resident"].value / TIB),
        Check("bill-split-1.22-1.22-7.32:weights", "bf16 weights", resident_bytes(671e9, table["weights"]) / TIB, "TiB", "1.22",
              inp),
        Check("bill-split-1.22-1.22-7.32:grads", "bf16 grads", resident_bytes(671e9, table["grads"]) / TIB, "TiB", "1.22", inp),
        Check("bill-split-1.22-1.22-7.32", "fp32 master + m + v",
              resident_bytes(671e9, table["master"] + table["m"] + table["v"]) / TIB, "TiB", "7.32", inp),
        Check("bill-125-cards", "80 GiB cards for the resident state alone", cards_needed(resident, 80 * GIB), "cards",
              "125", inp, "`stepbill bill deepseek-v3 --gpu-mem 80` with the preset's 671.03B parameters gives the "
              "same count (other reading)", bill["cards.resident"].value),
        Check("bill-93.7-sequences", "resident / one sequence's full-recompute activations (106.75 GiB)", seqs,
              "sequences", "93.7", inp),
        Check("bill-94-seqs-12.3M-tokens", "94 sequences × 131,072 tokens", round(seqs) * V3_SEQ / 1e6, "M tokens",
              "12.3", "94 sequences (93.7 rounded up)"),
        Check("bill-6nd-29.1PF", "6·N·D, one 128K sequence", fl.six_nd(37e9, V3_SEQ) / PF, "PFLOP", "29.1",
              "N = 37e9 active (seed)",
              f"the preset counts {active / 1e9:.2f}B active parameters (embedding and LM head included), so "
              "`stepbill bill` prints the other reading", bill["flops.6nd"].value / PF),
        Check("bill-attn-82.1pct", "attention share of one MoE layer's forward (causal-halved)",
              100 * fl.layer_attention_share(v3, "moe", V3_SEQ), "%", "82.1", "one MoE layer (seed)",
              "`stepbill bill` prints the whole model's share (58 MoE + 3 dense layers + LM head): the other reading",
              100 * bill["flops.attention_share"].value),
        Check("bill-6nd-5.6x-160PF", "step FLOPs, every operator counted", bill["flops.step"].value / PF, "PFLOP",
              "~160", "DeepSeek-V3 preset, 128K, causal-halved",
              "step / 6ND with the seed's 37B (other reading, ×): the seed says 5–6×",
              bill["flops.step"].value / fl.six_nd(37e9, V3_SEQ)),
        Check("bill-6nd-short-seq-ok", "attention share of a GPT-3 175B layer at 2,048 tokens",
              100 * fl.layer_attention_share(load_preset("gpt3-175b"), "dense", 2048), "%", "1.x",
              "GPT-3 175B, causal-halved"),
        Check("dp-grad-comm-batch-independent", "bf16 gradients one DP all-reduce moves (any batch)",
              bill["memory.grads"].value / TIB, "TiB", "P × 2 B", "DeepSeek-V3 preset, bf16 grads",
              "a ring all-reduce moves ~2× per link (other reading, TiB, at 1,024 ranks)",
              2 * 1023 / 1024 * bill["memory.grads"].value / TIB),
    ]


def recompute_checks() -> list[Check]:
    """Seed §2.2–2.6 numbers that the `stepbill recompute` table does not print directly."""
    v3 = _v3()
    ranking = rank_layer(v3, "moe", V3_SEQ, grouping="seed", row7="seed")
    rows = ranking.rows
    k, units = sqrt_l_optimum(v3.n_layers)
    executed = ranking.step_flops + ranking.layer_forward_flops
    inp = "DeepSeek-V3 MoE layer, 128K, seed's eight rows"
    gpt3 = load_preset("gpt3-175b")
    megatron = make_plan(v3, parse_recompute("selective:layernorm,moe_act,mla_up_proj"), V3_SEQ, 1, 2).layers["moe"]
    return [
        Check("rc-megatron-modules-map", "Megatron selective:layernorm,moe_act,mla_up_proj drops, per MoE layer",
              megatron.dropped_bytes * V3_SEQ / GIB, "GiB", "rows 2–5: 3.50 + 4.50 + 8.00 + 6.00 = 22.0", inp,
              "rows 1 (dispatch) and 6 (expert outputs) are also below the cut of 3 but no Megatron module names "
              "them (other reading: tensors dropped)", len(megatron.dropped)),
        Check("rc-selective-old-6pct", "selective cost over one layer forward (old denominator)",
              100 * ranking.cost / ranking.layer_forward_flops, "%", "6", inp),
        Check("rc-attn-23x", "attention output TFLOP/GiB over the row before", rows[7].tflop_per_gib
              / rows[6].tflop_per_gib, "×", "23", inp),
        Check("rc-old-cell-39.08", "row 7 (gate/up/router/down inputs) recompute", rows[6].flops / TF, "TFLOP",
              "~70 (old cell: 39.08)", inp, "the old hand-filled 39.08 was wrong; 9.14 GiB × 7.70 = 70"),
        Check("rc-sqrt-L-segments", "best checkpoint spacing k = √L for L = 61", k, "layers", "√L", "L = 61",
              "live layer-units at the optimum, L/k + k = 2√L (other reading)", units),
        Check("rc-full-quarter-of-executed", "full recompute share of executed compute",
              ranking.layer_forward_flops / executed, "fraction", "1/4", inp),
        Check("kort-gpt3-70-2.7", "Korthikanti selective saving, GPT-3 (s 2,048, h 12,288, a 96)",
              100 * kt.selective_saving(2048, 12288, 96), "%", "70", "arXiv 2205.05198",
              "overhead (other reading, %, un-halved attention): seed 2.7", 100 * kt.selective_overhead(2048, 12288)),
        Check("kort-mtnlg-65-1.6", "Korthikanti selective saving, MT-NLG (h 20,480, a 128)",
              100 * kt.selective_saving(2048, 20480, 128), "%", "65", "arXiv 2205.05198",
              "overhead (other reading, %): seed 1.6", 100 * kt.selective_overhead(2048, 20480)),
        Check("kort-gpt3-causal-1.37", "GPT-3 attention share, causal-halved", 100 * kt.selective_overhead(
              2048, 12288, causal=True), "%", "1.37", "s 2,048, h 12,288", "2.7 % is the un-halved convention"),
        Check("att-gpt3-2048-vs-12288", "GPT-3 attention FLOPs/byte at 2,048 (slope × S)",
              fl.attention_slope(gpt3) * 2048, "FLOP/B", "2,048 (< 12,288)", "GPT-3 175B",
              "its widest linear input (other reading) is far above", gpt3.hidden_size),
    ]


def state_checks() -> list[Check]:
    """Seed §3.1–3.4, checkpoint, LoRA and ZeRO Figure 1: bytes per parameter from the engine's ledger."""
    def per_param(recipe: str, optimizer: str = "adamw") -> float:
        return sum(bytes_per_param(precision(recipe), optimizer).values())

    mixed = bytes_per_param(precision("mixed-bf16"), "adamw")
    v3inv = param_inventory(_v3())
    classic = sum(x.value for x in checkpoint_lines(v3inv, make_recipe("mixed-bf16")))
    v3ckpt = sum(x.value for x in checkpoint_lines(v3inv, make_recipe("bf16-moments")))
    llama = load_preset("llama2-7b")
    inv7 = param_inventory(llama)
    adapters = sum(s[0] * s[1] * c for s, c, _ in lora_adapter_groups(inv7, LoRA(16, ("q_proj", "v_proj"))))
    q = next(t for t in inv7.tensors if t.name.endswith("q_proj.weight"))  # one 4096 × 4096 matrix
    q_adapter = sum(s[0] * s[1] for s, _, _ in lora_adapter_groups(inv7, LoRA(16, ("q_proj",))))
    full7 = make_bill(llama, make_recipe(seq_len=512))
    lora7 = make_bill(llama, make_recipe(seq_len=512, lora_rank=16, lora_targets=("q_proj", "v_proj")))
    lora_inp = "Llama-2-7B preset, r = 16 on q_proj, v_proj, micro-batch 1 × seq 512, mixed-bf16"
    psi = 7.5e9  # ZeRO Figure 1: Ψ = 7.5B, K = 12 (the optimizer side of mixed-precision Adam), Nd = 64
    items = {"weights": mixed["weights"] * psi, "grads": mixed["grads"] * psi,
             "optimizer": (mixed["master"] + mixed["m"] + mixed["v"]) * psi}
    zero = [sum(zero_item_bytes(items, s, 64).values()) / GB for s in range(4)]
    b = "B/param"
    return [
        Check("bytes-2-vs-12", "optimizer side over bf16 weight", (mixed["master"] + mixed["m"] + mixed["v"])
              / mixed["weights"], "×", "12 / 2", "mixed-bf16 AdamW"),
        Check("bytes-fp32-adam-16", "fp32 Adam", per_param("fp32"), b, "16", "w 4 + g 4 + m 4 + v 4"),
        Check("bytes-mixed-adam-16", "mixed-precision Adam", per_param("mixed-bf16"), b, "16", "2 + 2 + 4 + 4 + 4"),
        Check("bytes-fp32-grad-accum-18", "with an fp32 gradient accumulator", per_param("fp32-grad-accum"), b, "18",
              "grads 4 B"),
        Check("bytes-zero-16psi", "ZeRO's 2Ψ + 2Ψ + 12Ψ", per_param("mixed-bf16"), b, "16", "K = 12"),
        Check("bytes-v3-bf16-moments", "V3: bf16 m and v, fp32 master and grads", per_param("bf16-moments"), b,
              "≠ 16 (14 inferred)", "catalog: inferred"),
        Check("bytes-muon-12", "Muon (no v)", per_param("mixed-bf16", "muon"), b, "12", "2 + 2 + 4 + 4"),
        Check("bytes-lion-12", "Lion (one momentum)", per_param("mixed-bf16", "lion"), b, "12", "2 + 2 + 4 + 4"),
        Check("bytes-adafactor-8", "Adafactor (factored v, no momentum), 4096² matrix",
              sum(bytes_per_param(precision("mixed-bf16"), "adafactor", (4096, 4096)).values()), b, "8",
              "2 + 2 + 4 + ~0"),
        Check("bytes-8bit-adam-10", "8-bit Adam", per_param("adamw-8bit"), b, "10", "2 + 2 + 4 + 1 + 1"),
        Check("lora-14-of-16-bytes", "bytes only trainable params carry", sum(mixed.values()) - mixed["weights"], b,
              "14", "grad + master + m + v"),
        Check("ckpt-classic-7.3TiB", "checkpoint of DeepSeek-V3 (fp32 master + m + v)", classic / TIB, "TiB", "7.3",
              "preset 671.03B"),
        Check("ckpt-v3-4.9TiB", "checkpoint with bf16 moments (4 + 2 + 2 B)", v3ckpt / TIB, "TiB", "4.9",
              "preset 671.03B", "one third smaller (other reading)", 1 - v3ckpt / classic),
        Check("lora-0.8pct-per-matrix", "rank-16 adapter of one 4096² matrix (Llama-2-7B q_proj)",
              100 * q_adapter / (q.shape[0] * q.shape[1]), "%", "0.8", "2 × 4096 × 16"),
        Check("lora-7b-adapter-8.39M", "LoRA r = 16 on q, v of Llama-2-7B", adapters / 1e6, "M params", "8.39",
              "32 layers × 2 matrices"),
        Check("lora-7b-0.124pct", "adapter share of the model", 100 * adapters / inv7.total, "%", "0.124",
              f"N = {inv7.total:,} (preset)"),
        Check("lora-7b-7.9x", "full fine-tune resident / LoRA resident",
              full7["memory.resident"].value / lora7["memory.resident"].value, "×", "7.9", "Llama-2-7B preset"),
        Check("lora-compute-2x", "LoRA step / forward FLOPs (`bill --lora-rank`: flops.lora_step_over_forward)",
              lora7["flops.lora_step_over_forward"].value, "×", "~2", lora_inp,
              "full fine-tuning's step / forward (other reading, ×): the frozen base skips its weight-gradient GEMMs "
              "under LoRA; above 2 by the attention core and the adapters",
              full7["flops.step"].value / full7["flops.forward"].value),
        Check("lora-compute-2x:saved", "share of full fine-tuning's step FLOPs LoRA saves",
              1 - lora7["flops.step"].value / full7["flops.step"].value, "fraction", "~1/3", lora_inp),
        Check("zero-fig1-baseline", "DP baseline (2 + 2 + 12)Ψ", zero[0], "GB", "120", "Ψ = 7.5e9, Nd = 64"),
        Check("zero-fig1-stage1-os", "P_os", zero[1], "GB", "31.4", "Ψ = 7.5e9, Nd = 64"),
        Check("zero-fig1-stage2-os-g", "P_os+g", zero[2], "GB", "16.6", "Ψ = 7.5e9, Nd = 64"),
        Check("zero-fig1-stage3-os-g-p", "P_os+g+p", zero[3], "GB", "1.9", "Ψ = 7.5e9, Nd = 64"),
    ]


GROUPS = {
    "DeepSeek-V3 activations at 128K (seed §1.6–1.7)": v3_activation_table,
    "Recompute (seed §2.2–2.6)": recompute_checks,
    "Bytes per parameter, checkpoint, LoRA, ZeRO Figure 1 (seed §3, §4.2)": state_checks,
    "GPT-3 125M worked example (seed §5)": gpt3_small_example,
    "DeepSeek-V3 full bill at 128K (seed §5)": v3_full_bill,
}

PENDING: dict[str, str] = {}  # seed claims waiting for an engine feature (none left)


def all_checks() -> dict[str, list[Check]]:
    """Every group's checks, in print order."""
    return {title: fn() for title, fn in GROUPS.items()}


def as_dict(check: Check) -> dict[str, Any]:
    return {k: v for k, v in asdict(check).items() if v not in ("", None) or k == "value"}


# The two seed worked examples `stepbill bill` can be asked for, and the checks whose other reading it prints.
_BILL_NOTES = {
    ("gpt3-125m", SMALL_SEQ, SMALL_BATCH, "none"): ("gpt3s-resident-1.86", "gpt3s-totals"),
    ("gpt3-125m", SMALL_SEQ, SMALL_BATCH, "full"): ("gpt3s-resident-1.86", "gpt3s-totals:full-recompute",
                                                   "gpt3s-totals:compute"),
    ("deepseek-v3", V3_SEQ, 1, "none"): ("bill-6nd-29.1PF", "bill-attn-82.1pct"),
    ("deepseek-v3", V3_SEQ, 1, "full"): ("bill-6nd-29.1PF", "bill-attn-82.1pct", "v3-full-recompute-106.75"),
}


def bill_notes(model: str, seq: int, micro_batch: int, recompute: str) -> list[str]:
    """One line per seed number that `stepbill bill` prints differently for the seed's own worked examples:
    the seed's value with its inputs, the bill's, and why. Empty for any other bill."""
    wanted = _BILL_NOTES.get((model, seq, micro_batch, recompute))
    if not wanted:
        return []
    groups = (gpt3_small_example,) if model == "gpt3-125m" else (v3_full_bill, v3_activation_table)
    checks = {c.claim: c for fn in groups for c in fn() if c.claim in wanted}
    return [f"seed 000 prints {c.seed} {c.unit} for {c.quantity} ({c.inputs}); this bill: {c.preset_value:.4g}"
            f"{'' if c.unit in ('%', '×') else ' '}{c.unit} — {c.note}" for c in (checks[w] for w in wanted)]
