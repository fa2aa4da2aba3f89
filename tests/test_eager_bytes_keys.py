"""EagerBytes as a memo key: equal to the plain int of its compute bytes, but two of them are equal only with the
same parameter bytes and device, so the memos keyed on one keep recipes apart (the fuzzer's find: a planner search
for amp-bf16 and then one for mixed-bf16 in one process read the first one's recompute staircase and failed with
KeyError: 'attn.k_proj_in_cast')."""

from __future__ import annotations

from stepbill.engine.activations.eager.dtypes import EagerBytes
from stepbill.engine.recompute.budget import spec_problem
from stepbill.spec import load_preset


def test_equal_only_with_the_same_param_bytes_and_device() -> None:
    amp, mixed = EagerBytes(2, 4), EagerBytes(2, 2)
    assert amp == 2 and mixed == 2 and int.__eq__(2, amp)  # arithmetic reads the compute bytes (either side)
    assert amp != mixed and (amp == mixed) is False
    assert EagerBytes(2, 2, "cuda") != mixed
    assert EagerBytes(2, 4) == amp and hash(amp) == hash(mixed) == hash(2)
    assert len({amp, mixed, EagerBytes(2, 4)}) == 2


def test_the_recompute_staircase_is_kept_per_recipe() -> None:
    spec = load_preset("llama3-8b")
    names = {}
    for key in (EagerBytes(2, 4), EagerBytes(2, 2), EagerBytes(2, 4)):  # amp, mixed, amp again
        problem, _, _ = spec_problem(spec, 128, 3, key, "eager", "sdpa")
        names.setdefault(key.param, []).append({item.name for item in problem.items})
    assert names[4][0] == names[4][1] != names[2][0]
    assert any("cast" in n for n in names[4][0]) and not any("cast" in n for n in names[2][0])


def test_fp8_bytes_copy_and_compare_with_their_convention(capsys) -> None:  # type: ignore[no-untyped-def]
    """Fp8Bytes (the fp8 convention riding on the activation width) survives deepcopy and pickle — `bill --sweep
    recipe=fp8 --json` deep-copies its bills and failed with a TypeError — and keeps "te" apart from "deepseek" as
    a memo key."""
    import copy
    import json
    import pickle

    from stepbill.engine.activations.fp8 import Fp8Bytes
    from tests.conftest import run_cli

    te = Fp8Bytes(2, "te")
    assert repr(copy.deepcopy(te)) == repr(pickle.loads(pickle.dumps(te))) == "Fp8Bytes(2, fp8='te')"
    assert te == 2 and te != Fp8Bytes(2, "deepseek") and te == Fp8Bytes(2, "te")
    code, out, err = run_cli(["bill", "gpt3-125m", "--sweep", "recipe=fp8,fp8-deepseek", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["axis"]
