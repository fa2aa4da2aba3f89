"""Write tests/data/bnb_linear4bit_quant_state.json: the storage of real bitsandbytes 4-bit Linears (NF4, double
quantisation, blocksize 64), byte by byte, for engine/quant.py's formulas to be held to.

Runs on CPU (bitsandbytes >= 0.46 quantises on `.to("cpu")`): `pip install '.[quant]'` then
`python scripts/measure_bnb_quant_state.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import bitsandbytes as bnb
import torch

SHAPES = [(5120, 5120), (13824, 5120), (5120, 13824), (11008, 4096), (37, 100), (128, 64)]  # (out, in)
CALL = ("bnb.nn.Linear4bit(in, out, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True, "
        "quant_type='nf4').to('cpu')")


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def main() -> None:
    rows = []
    for out_dim, in_dim in SHAPES:
        layer = bnb.nn.Linear4bit(in_dim, out_dim, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                                  quant_type="nf4").to("cpu")
        st = layer.weight.quant_state
        rows.append({"shape": [out_dim, in_dim], "codes_bytes": _bytes(layer.weight.data),
                     "absmax_bytes": _bytes(st.absmax), "absmax_dtype": str(st.absmax.dtype),
                     "nested_absmax_bytes": _bytes(st.state2.absmax), "nested_code_bytes": _bytes(st.state2.code),
                     "nf4_code_bytes": _bytes(st.code), "offset_bytes": _bytes(st.offset),
                     "blocksize": st.blocksize, "nested_blocksize": st.state2.blocksize})
    data = {"bitsandbytes": bnb.__version__, "torch": torch.__version__, "call": CALL, "tensors": rows}
    path = Path(__file__).resolve().parent.parent / "tests" / "data" / "bnb_linear4bit_quant_state.json"
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
