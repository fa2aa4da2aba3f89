"""Tables of what eager PyTorch + transformers saves per decoder layer (docs/eager-saved-tensors.md).

Run ``python -m stepbill.measure.saved_doc [family ...]``; docs/eager-saved-tensors.md embeds the output. Each row's scaling is measured, not assumed: the same model is traced at (B, T), (B, 2T)
and (B/2, T) and the byte ratios give "per token", "per token·T" (score matrices), "per position"
(RoPE tables, shared by the batch) or "constant".
"""

from __future__ import annotations

import re
import sys
from typing import Any

from stepbill.measure.saved import SavedTensor, saved_tensors
from stepbill.measure.tiny import TINY_CONFIGS

B, T = 2, 64

# Which backward needs the tensor, by "Node.argument" of its first saver.
WHY: dict[str, str] = {
    "EmbeddingBackward0.indices": "token/position ids: embedding backward scatter-adds dY rows by id",
    "PowBackward0.self": "RMSNorm input in fp32 (x): d(x²) = 2x·dy, and x·rsqrt(·) needs x",
    "RsqrtBackward0.result": "RMSNorm 1/rms per token (fp32): rsqrt' uses its result; x·r needs r",
    "MulBackward0.other": "right factor of an elementwise product (other factor's grad = dy·other)",
    "MulBackward0.self": "left factor of an elementwise product (other factor's grad = dy·self)",
    "MmBackward0.self": "input of a bias-free linear: dW = xᵀ·dY",
    "MmBackward0.mat2": "weight of a linear: dX = dY·W (parameter, or autocast's bf16 copy)",
    "AddmmBackward0.mat1": "input of a linear with bias: dW = xᵀ·dY",
    "AddmmBackward0.mat2": "weight of a linear with bias: dX = dY·W",
    "BmmBackward0.self": "left operand of a batched matmul (math SDPA: q·scale or probabilities)",
    "BmmBackward0.mat2": "right operand of a batched matmul (math SDPA: kᵀ or v)",
    "SafeSoftmaxBackward0.result": "attention probabilities (math SDPA path): softmax' uses its output",
    "SoftmaxBackward0.result": "softmax output (router probabilities / eager attention probs)",
    "LogSoftmaxBackward0.result": "log-probabilities in fp32 for cross-entropy: dlogits = softmax - onehot",
    "NllLossBackward0.target": "shifted labels (int64) for the NLL gradient",
    "NllLossBackward0.total_weight": "count of non-ignored tokens (scalar)",
    "NativeLayerNormBackward0.input": "LayerNorm input: the norm backward recomputes x̂ from x",
    "NativeLayerNormBackward0.result1": "LayerNorm mean per token (fp32)",
    "NativeLayerNormBackward0.result2": "LayerNorm 1/std per token (fp32)",
    "SiluBackward0.self": "SiLU input (gate projection output): silu'(x) needs x",
    "GeluBackward0.self": "GELU input (up projection output): gelu'(x) needs x",
    "TanhBackward0.result": "tanh output of GELU-tanh: tanh' = 1 - t²",
    "TopkBackward0.indices": "router top-k expert ids: top-k backward scatters grads to them",
    "IndexBackward0.indices": "token↔expert permutation (int64): index backward scatters dY back",
    "GroupedMmBackward0.self": "expert-sorted tokens (aten._grouped_mm, bf16): dW_e = x_eᵀ·dY_e",
    "GroupedMmBackward0.mat2": "expert weights (parameter)",
    "GroupedMmBackward0.offs": "per-expert row offsets (int32, one per expert)",
    "GatherBackward0.index": "routing indices gathered from the router scores",
    "SigmoidBackward0.result": "sigmoid output (DeepSeek router scores; Qwen2-MoE shared-expert gate)",
    "DivBackward0.self": "top-k weights before renormalisation",
    "DivBackward0.other": "sum of top-k weights (renormalisation denominator)",
}
_SDPA_WHY = {
    "query": "SDPA: flash backward recomputes the scores from q and k",
    "key": "SDPA: flash backward recomputes the scores from q and k",
    "value": "SDPA: dP = dO·vᵀ needs v",
    "output": "SDPA output: the softmax grad uses rowsum(dO∘O); also input of o_proj",
    "logsumexp": "SDPA logsumexp per (head, token) in fp32: rebuilds P without storing it",
}

_LAYER = re.compile(r"\.(layers|h)\.(\d+)(\.|$)")


def why(t: SavedTensor) -> str:
    """Explanation of a saved row (which backward needs it)."""
    if t.node.startswith("ScaledDotProductFlashAttention"):
        return _SDPA_WHY.get(t.argument, "SDPA")
    if "grouped_mm_fallback" in t.node:
        return "grouped expert matmul (transformers fallback): saves input and expert weights"
    if t.node == "PowBackward0" and "norm" not in t.module:
        return "GELU-tanh input x: d(x³) = 3x²·dy"
    return WHY.get(f"{t.node}.{t.argument}", "")


def layer_of(module: str) -> int | None:
    """Decoder layer index of a module path, None outside the layers."""
    match = _LAYER.search("." + module)
    return int(match.group(2)) if match else None


def scaling(small: int, long: int, half_batch: int) -> str:
    """Name of the growth law from bytes at (B, T), (B, 2T), (B/2, T)."""
    rt, rb = long / small, small / half_batch if half_batch else 0.0
    # 5 % tolerance: the shifted labels hold B·(T+1) ids when the shift needs no copy (B=1).
    laws = {(2, 2): "token", (4, 2): "token·T", (2, 1): "position", (1, 1): "constant"}
    for (et, eb), law in laws.items():
        if abs(rt / et - 1) < 0.05 and abs(rb / eb - 1) < 0.05:
            return law
    return f"T×{rt:g} B×{rb:g}"


def rows(config: dict[str, Any], recipe: str) -> list[tuple[SavedTensor, str]]:
    """Saved activations of one forward at (B, T) with their measured scaling."""
    base = saved_tensors(config, recipe=recipe, micro_batch=B, seq_len=T)  # type: ignore[arg-type]
    long = saved_tensors(config, recipe=recipe, micro_batch=B, seq_len=2 * T)  # type: ignore[arg-type]
    half = saved_tensors(config, recipe=recipe, micro_batch=B // 2, seq_len=T)  # type: ignore[arg-type]
    if not (len(base) == len(long) == len(half)):
        return [(t, "?") for t in base if t.kind in ("activation", "input")]
    return [(t, scaling(t.bytes, lt.bytes, ht.bytes)) for t, lt, ht in zip(base, long, half, strict=True)
            if t.kind in ("activation", "input")]


def per_unit(t: SavedTensor, law: str) -> str:
    """Bytes per unit of its scaling law (per token, per token·T, per position)."""
    div = {"token": B * T, "token·T": B * T * T, "position": T}.get(law, 1)
    value = t.bytes / div
    return f"{value:g}"


def table(config: dict[str, Any], recipe: str, layers: tuple[int, ...]) -> list[str]:
    """Markdown rows for the given layers and for what lives outside the layers."""
    out = ["| where | saving op.arg (all savers) | shape at B=2,T=64 | dtype | grows per | bytes per unit "
           "| backward that needs it |", "|---|---|---|---|---|---|---|"]
    sums: dict[str, dict[str, float]] = {}
    for t, law in rows(config, recipe):
        layer = layer_of(t.module)
        if layer is not None and layer not in layers:
            continue
        where = t.module if layer is None else _LAYER.sub(".L.", "." + t.module).lstrip(".")
        where = f"L{layer}: {where}" if layer is not None else f"outside: {where or '(loss)'}"
        savers = ", ".join(t.savers)
        out.append(f"| {where} | {savers} | {t.shape} | {t.dtype} | {law} | {per_unit(t, law)} | {why(t)} |")
        key = f"L{layer}" if layer is not None else "outside"
        sums.setdefault(key, {}).setdefault(law, 0.0)
        sums[key][law] += float(per_unit(t, law))
    out.append("")
    for key, laws in sums.items():
        text = ", ".join(f"{v:g} B per {law}" for law, v in laws.items())
        out.append(f"- **{key} total**: {text}")
    return out


SECTIONS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("llama", (0,)), ("gpt2", (0,)), ("gpt_neox", (0,)), ("qwen3", (0,)), ("mixtral", (0,)),
    ("qwen2_moe", (0,)), ("deepseek_v3", (0, 1)),
)


def main(argv: list[str]) -> int:
    """Print the tables of every family and recipe (fp32, pure-bf16, amp-bf16) as markdown."""
    families = argv or [name for name, _ in SECTIONS]
    for name, layers in SECTIONS:
        if name not in families:
            continue
        config = TINY_CONFIGS[name]
        shown = {k: v for k, v in config.items() if k not in ("max_position_embeddings",)}
        print(f"### {name}\n\nconfig: `{shown}`\n")
        for recipe in ("fp32", "pure-bf16", "amp-bf16"):
            print(f"#### {name} — {recipe}\n")
            print("\n".join(table(config, recipe, layers)))
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
