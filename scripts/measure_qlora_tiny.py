"""Write tests/data/qlora_tiny_llama_measured.json: the resident bytes of a real QLoRA model — tiny-llama
(tests/data/tiny-llama.json) saved in bf16, loaded by transformers with BitsAndBytesConfig (NF4, double
quantisation, bf16 compute) on CPU, then PEFT LoRA r 4 on q_proj, v_proj — split as engine/quant.py bills it.

Needs bitsandbytes (>= 0.46, CPU) and peft (`pip install '.[quant]'`): `python scripts/measure_qlora_tiny.py`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import bitsandbytes as bnb
import peft
import torch
import transformers
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

from stepbill.measure.build import build_model
from stepbill.spec.hf import to_hf_config
from stepbill.spec.model import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
RANK, TARGETS = 4, ["q_proj", "v_proj"]


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def main() -> None:
    spec = ModelSpec.from_dict(json.loads((ROOT / "tests" / "data" / "tiny-llama.json").read_text()))
    folder = tempfile.mkdtemp()
    build_model(to_hf_config(spec), dtype="bf16").save_pretrained(folder)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, device_map="cpu",
                                                 quantization_config=config)
    model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, target_modules=TARGETS, lora_dropout=0.0))
    out = {"codes": 0, "constants": 0, "bf16_rest": 0, "adapters": 0, "adapter_dtypes": set(), "not_quantised": []}
    for name, p in model.named_parameters():
        if isinstance(p, bnb.nn.Params4bit):
            st = p.quant_state
            out["codes"] += _bytes(p)
            out["constants"] += sum(_bytes(t) for t in (st.absmax, st.state2.absmax, st.state2.code, st.code, st.offset))
        elif p.requires_grad:
            out["adapters"] += _bytes(p)
            out["adapter_dtypes"].add(str(p.dtype))
        else:
            out["bf16_rest"] += _bytes(p)
            out["not_quantised"].append(name)
    out["adapter_dtypes"] = sorted(out["adapter_dtypes"])
    data = {"versions": {"bitsandbytes": bnb.__version__, "peft": peft.__version__, "transformers": transformers.__version__,
                         "torch": torch.__version__},
            "model": "tests/data/tiny-llama.json", "lora": {"rank": RANK, "targets": TARGETS},
            "quantization_config": "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                                   "bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)",
            "bytes": out}
    (ROOT / "tests" / "data" / "qlora_tiny_llama_measured.json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
