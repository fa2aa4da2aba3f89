"""Time a fake-tensor measured step of a Llama-2-7B-shaped model (B=1, T=1024) on this machine.

Prints seconds for the MemTracker step (2 iterations) and for the FLOP-counting pass, and the figures.
Run: ``python benchmarks/measure_speed.py [--seq 1024] [--batch 1] [--recipe pure-bf16]``.
"""

from __future__ import annotations

import argparse
import time

from stepbill.measure.step import measure_step

LLAMA2_7B = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--recipe", default="fp32", choices=["fp32", "pure-bf16", "amp-bf16"])
    args = parser.parse_args()
    start = time.perf_counter()
    m = measure_step(LLAMA2_7B, recipe=args.recipe, micro_batch=args.batch, seq_len=args.seq, mode="fake",
                     flops=False)
    memory_s = time.perf_counter() - start
    start = time.perf_counter()
    f = measure_step(LLAMA2_7B, recipe=args.recipe, micro_batch=args.batch, seq_len=args.seq, mode="fake")
    total_s = time.perf_counter() - start
    print(f"Llama-2-7B shape, {args.recipe}, B={args.batch}, T={args.seq}, fake tensors")
    print(f"  memory step (build, warm-up, tracked iteration):    {memory_s:.1f} s")
    print(f"  memory step + FLOP pass:                            {total_s:.1f} s")
    print(f"  params {m.params / GIB:.2f} GiB, states {m.optimizer_states / GIB:.2f} GiB, "
          f"peak {m.peak / GIB:.2f} GiB ({m.peak_phase}), forward peak {m.peak_forward / GIB:.2f} GiB, "
          f"activations {m.activations / GIB:.2f} GiB, FLOPs {f.flops / 1e12:.2f} TFLOP")


if __name__ == "__main__":
    main()
