"""The step's FLOPs as Lines (value, unit, formula, inputs, provenance) for the bill: causal, full square, what
FlopCounterMode counts, recompute, the model FLOPs of PaLM appendix B (for MFU) and 6ND. The arithmetic is
engine/flops.py's; this module names and explains it."""

from __future__ import annotations

from typing import Any

from stepbill.engine.flops import (
    BACKWARD_FACTOR,
    NO_SDPA_FAMILIES,
    attention_backward_rescore,
    attention_flops,
    backward_flops,
    counted_step_flops,
    executed_attention_flops,
    forward_flops,
    lm_head_op,
    masked_layers,
    six_nd,
    step_flops,
    windowed_attention_flops,
)
from stepbill.engine.line import Line
from stepbill.engine.params import ParamInventory
from stepbill.spec.model import ModelSpec

PALM = "cited: PaLM, arXiv 2204.02311 appendix B (model FLOPs 6N + 12·L·H·Q·T per token)"


def matmul_params(spec: ModelSpec, inv: ParamInventory) -> int:
    """N of PaLM appendix B and nanoGPT's `estimate_mfu`: the active parameters a token multiplies — active minus
    the embedding lookups (gathers: 0 FLOPs; GPT's position table too), plus the LM head when it is tied to the
    token embedding (nanoGPT's `get_num_params()` for a tied GPT-2: all but `wpe`)."""
    embedding = inv.by_component().get("embedding", (0, 0))[1]
    tied_head = spec.vocab_size * spec.hidden_size if spec.tied_embeddings else 0
    return inv.active - embedding + tied_head


def palm_flops_per_token(spec: ModelSpec, n_matmul: Any, seq_len: Any, causal: bool = False,
                         n_adapters: int | None = None) -> Any:
    """Model FLOPs of one token of one step (forward + backward), PaLM appendix B: 6·N + 12·L·H·Q·T, with the
    attention term written 6·L·H·(d_qk + d_v)·T so that MLA's unequal head widths fit (= 12·L·H·Q·T when
    d_qk = d_v = Q). PaLM counts the full S×S square (`causal` False); causal halves the attention term.
    With LoRA (`n_adapters`: adapter parameters a token passes) the frozen N needs no weight gradient:
    4·N + 6·N_adapters (our extension of PaLM's count: the FLOPs the step needs, nothing more)."""
    a = spec.attention
    attn = 6 * spec.n_layers * a.n_heads * (a.qk_head_dim + a.v_dim) * seq_len
    weights = 6 * n_matmul if n_adapters is None else 4 * n_matmul + 6 * n_adapters
    return weights + (attn // 2 if causal else attn)


def _kernel(spec: ModelSpec, attention: str) -> str:
    if attention == "sdpa-efficient":
        return "memory-efficient kernel on CUDA: q/k and v heads differ in width"
    if attention_backward_rescore(spec, attention):
        return "fused SDPA"
    if attention == "sdpa-math":  # engine/bill.py: CPU SDPA with attention dropout (eager/dropout.py)
        return "math path: SDPA with attention dropout on CPU"
    return "math path: eager attention" if attention != "sdpa" else "math path: q/k and v heads differ in width"


def flops_lines(spec: ModelSpec, seq_len: int, micro_batch: int, n_active: int,
                recompute_causal: float = 0, recompute_full: float = 0, attention: str = "sdpa",
                recompute_square: float | None = None, n_matmul: int | None = None,
                lora: dict[str, int] | None = None) -> dict[str, Line]:
    """The FLOPs lines of the bill, one micro-batch (decimal units on output; TFLOP = 1e12). `recompute_causal`
    is in the seed's convention (whole layer forwards, causal-halved attention); `recompute_full` in
    FlopCounterMode's (full square; full recompute's early stop); `recompute_square` the causal figure's rebuild
    with the attention as a full square (defaults to `recompute_full`), as `RecomputePlan` gives them. With
    `n_matmul` (matmul_params) the PaLM model FLOPs lines `flops.model` / `flops.model_causal` are added. With
    `lora` (lora_step_terms) every step figure drops the frozen weight-gradient GEMMs and adds the adapters."""
    tokens = seq_len * micro_batch
    if recompute_square is None:
        recompute_square = recompute_full
    fwd = forward_flops(spec, seq_len, micro_batch, True)
    fwd_full = forward_flops(spec, seq_len, micro_batch, False)
    attn = attention_flops(spec, seq_len, micro_batch, True)
    head = tokens * lm_head_op(spec).flops_per_token
    step = step_flops(spec, seq_len, micro_batch, True, recompute_causal)
    bwd_full = backward_flops(spec, seq_len, micro_batch, False, attention)
    rescore = bwd_full - BACKWARD_FACTOR * fwd_full
    step_full = counted_step_flops(spec, seq_len, micro_batch, recompute_full, attention)
    nd = six_nd(n_active, tokens)
    causal_note = "causal-halved attention (the seed's convention)"
    square_note = "full-square attention (what FlopCounterMode counts)"
    counted_note = ("FlopCounterMode's: full-square attention, fused SDPA backward rebuilds QKᵀ, full recompute "
                    "stops before each layer's trailing down projection (non-reentrant checkpoint's early stop)")
    step_square = step_flops(spec, seq_len, micro_batch, False, recompute_square)
    delta = 0 if lora is None else lora["adapters"] - lora["frozen_wgrad"] - lora["first_layer_dgrad"]
    step, step_square, bwd_full, step_full = step + delta, step_square + delta, bwd_full + delta, step_full + delta
    extra: dict[str, Line] = {}
    lora_terms, lora_inputs = "", {}
    if lora is not None:
        lora_terms = " − frozen weight grads {wgrad} − first layer's input grads {dgrad} + LoRA adapters {adapters}"
        lora_inputs = {"wgrad": lora["frozen_wgrad"], "dgrad": lora["first_layer_dgrad"], "adapters": lora["adapters"]}
        extra["flops.lora_frozen_wgrad"] = Line(
            "flops.lora_frozen_wgrad", lora["frozen_wgrad"], "FLOPs",
            "weight-gradient GEMMs the frozen base skips: = the forward's matmuls with weights", {},
            convention="subtracted from every step figure")
        extra["flops.lora_first_layer_dgrad"] = Line(
            "flops.lora_first_layer_dgrad", lora["first_layer_dgrad"], "FLOPs",
            "input-gradient GEMMs of the first layer's q/k/v (and their adapters' A) that nothing needs: the frozen "
            "embedding's output needs no gradient", {}, convention="subtracted from every step figure")
        extra["flops.lora_adapters"] = Line(
            "flops.lora_adapters", lora["adapters"], "FLOPs", "3 × 2·r·(k + n) per targeted matrix per token × tokens",
            {}, convention="added to every step figure (forward + backward of A and B)")
        # seed 000 (LoRA): "compute ~2× instead of 3× (frozen layers skip the weight-grad matmul): saves ~1/3"
        extra["flops.lora_step_over_forward"] = Line(
            "flops.lora_step_over_forward", step / fwd, "1", "{step} step / {forward} forward (causal-halved)",
            {"step": step, "forward": fwd},
            convention="LoRA: the frozen base skips its weight-gradient GEMMs, so the step is about 2× the forward, "
            "not full fine-tuning's 3× (seed 000: ~2× instead of 3×, ~1/3 saved); above 2 by the attention core "
            "(its backward is 2× its forward either way) and the adapters")
    extra |= {
        "flops.step_full_square": Line("flops.step_full_square", step_square, "FLOPs",
                                       "3 × {forward} + recompute {recompute}" + lora_terms,
                                       {"forward": fwd_full, "recompute": recompute_square, **lora_inputs},
                                       convention="full-square attention, every rebuilt op rerun: flops.step's "
                                       "count with the whole S×S attention square (never below flops.step)"),
        "flops.recompute_full_square": Line("flops.recompute_full_square", recompute_square, "FLOPs",
                                            "flops.recompute with the attention core as a full square", {},
                                            convention=square_note),
    }
    if spec.sliding_window is not None:
        extra |= window_lines(spec, seq_len, micro_batch, attention)
    if n_matmul is not None:
        a = spec.attention
        n_ad = None if lora is None else lora["adapter_params_active"]
        for name, causal in (("flops.model", False), ("flops.model_causal", True)):
            per_token = palm_flops_per_token(spec, n_matmul, seq_len, causal, n_ad)
            extra[name] = Line(name, per_token * tokens, "FLOPs",
                               ("(6 × {n} matmul params" if n_ad is None else
                                "(4 × {n} frozen matmul params + 6 × {adapters} adapter params") +
                               " + {attn} × 6 × {layers} × {heads} × ({d_qk} + {d_v}) × {seq}) × {tokens} tokens",
                               {"n": n_matmul, "adapters": n_ad or 0, "attn": 0.5 if causal else 1, "layers": spec.n_layers,
                                "heads": a.n_heads, "d_qk": a.qk_head_dim, "d_v": a.v_dim, "seq": seq_len,
                                "tokens": tokens}, PALM,
                               convention="causal: attention term halved" if causal else
                               "PaLM's: full S×S attention square (what MFU divides)")
    return extra | {
        "flops.forward": Line("flops.forward", fwd, "FLOPs", "Σ layers (B·S·Σ 2kn + attention core) + LM head {head}",
                              {"head": head}, convention=causal_note),
        "flops.forward_noncausal": Line("flops.forward_noncausal", fwd_full, "FLOPs", "as flops.forward, attention "
                                        "core as a full square", {}, convention=square_note),
        "flops.attention": Line("flops.attention", attn, "FLOPs", "{layers} layers × B × S²·H·(d_qk+d_v)",
                                {"layers": spec.n_layers}, convention=causal_note),
        "flops.lm_head": Line("flops.lm_head", head, "FLOPs", "2 × {tokens} tokens × {d} × {vocab}",
                              {"tokens": tokens, "d": spec.hidden_size, "vocab": spec.vocab_size}),
        "flops.recompute": Line("flops.recompute", recompute_causal, "FLOPs",
                                "FLOPs of the tensors the recompute policy rebuilds", {}, convention=causal_note),
        "flops.step": Line("flops.step", step, "FLOPs", "3 × {forward} + recompute {recompute}" + lora_terms,
                           {"forward": fwd, "recompute": recompute_causal, **lora_inputs}, convention=causal_note),
        "flops.backward_noncausal": Line("flops.backward_noncausal", bwd_full, "FLOPs",
                                         "2 × flops.forward_noncausal + {rescore} QKᵀ rebuilt by a fused SDPA "
                                         "backward ({kernel})",
                                         {"rescore": rescore, "kernel": _kernel(spec, attention)},
                                         convention=counted_note),
        "flops.recompute_noncausal": Line("flops.recompute_noncausal", recompute_full, "FLOPs",
                                          "FLOPs of what the recompute policy reruns (full: each layer's forward "
                                          "less its trailing down projection)", {}, convention=counted_note),
        "flops.step_noncausal": Line("flops.step_noncausal", step_full, "FLOPs",
                                     "{forward} forward + {backward} backward + recompute {recompute}",
                                     {"forward": fwd_full, "backward": bwd_full, "recompute": recompute_full},
                                     convention=counted_note),
        "flops.6nd": Line("flops.6nd", nd, "FLOPs", "6 × {n_active} active params × {tokens} tokens",
                          {"n_active": n_active, "tokens": tokens},
                          "cited: Kaplan et al., arXiv 2001.08361 (C ≈ 6ND)"),
        "flops.attention_share": Line("flops.attention_share", attn / fwd, "1", "flops.attention / flops.forward",
                                      {}, convention=causal_note),
        "flops.6nd_ratio": Line("flops.6nd_ratio", (step - recompute_causal) / nd, "1",
                                "3 × flops.forward / flops.6nd (how far 6ND undercounts)", {}),
    }


def window_lines(spec: ModelSpec, seq_len: int, micro_batch: int, attention: str = "sdpa") -> dict[str, Line]:
    """A sliding-window model's attention FLOPs two ways, one forward: the model's (each query's attended keys)
    and the kernel's (SDPA with an explicit mask computes the whole square; engine/flops.py)."""
    a = spec.attention
    masked = len(masked_layers(spec, seq_len))
    eager_attn = attention not in ("sdpa", "sdpa-efficient") or spec.family in NO_SDPA_FAMILIES
    model = windowed_attention_flops(spec, seq_len, micro_batch)
    executed = executed_attention_flops(spec, seq_len, micro_batch, masked, eager_attn)
    kernel = ("eager attention (matmul, softmax, matmul)" if eager_attn else
              "SDPA with an explicit mask where seq ≥ window (CPU: its flash kernel; CUDA: memory-efficient), "
              "is_causal elsewhere")
    return {
        "flops.attention_windowed": Line(
            "flops.attention_windowed", model, "FLOPs",
            "flops.attention − {sliding} sliding layers × B × (S − {window})₊² × H·(d_qk+d_v)",
            {"sliding": len(a.sliding_layers), "window": a.sliding_window},
            convention="model FLOPs: causal, within the window on the sliding layers (what a kernel told the "
            "window executes: flash-attn window_size)"),
        "flops.attention_executed": Line(
            "flops.attention_executed", executed, "FLOPs",
            "{masked} masked layers × B × 2·S²·H·(d_qk+d_v) (full square) + the other layers causal-halved",
            {"masked": masked, "kernel": kernel},
            convention=f"executed FLOPs of the forward's attention cores: {kernel}; a mask never skips blocks"),
    }
