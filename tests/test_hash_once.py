"""spec.schema.hash_once: a frozen input's hash is kept once computed, and nothing else about the dataclass moves."""

from __future__ import annotations

import copy
import dataclasses
import pickle

from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import make_recipe


def test_hash_is_kept_and_equal_objects_hash_equal() -> None:
    spec = load_model("deepseek-v3")
    h = hash(spec)
    assert hash(spec) == h and spec.__dict__["_hash_once"] == h
    a, b = Parallel(tp=2, pp=2, micro_batches=4), dataclasses.replace(Parallel(tp=2, micro_batches=4), pp=2)
    assert a == b and hash(a) == hash(b) and a is not b
    assert hash(make_recipe(parallel=a)) == hash(make_recipe(parallel=b))


def test_the_kept_hash_is_no_field() -> None:
    p = Parallel(tp=4)
    hash(p)
    assert "_hash_once" not in dataclasses.asdict(p) and "_hash_once" not in repr(p)
    assert p == Parallel(tp=4)  # eq compares the fields only


def test_copies_recompute_their_hash() -> None:
    """String hashes differ between processes (the planner's spawned workers): a pickle carries no hash."""
    for obj in (load_model("llama3-8b"), make_recipe(parallel=Parallel(dp=2)), load_gpu("h100-sxm")):
        hash(obj)
        clone = pickle.loads(pickle.dumps(obj))
        assert "_hash_once" not in clone.__dict__ and clone == obj and hash(clone) == hash(obj)
        assert copy.deepcopy(obj) == obj


def test_a_recipe_on_another_layout_equals_the_one_built_again() -> None:
    """Recipe.on_layout (the planner's recipe per candidate): equal to the Recipe built with every field, hashing
    as it does (the original's kept hash is not copied), the original unchanged; the rule that reads the layout
    with another field (a quantised base on one GPU only) still refuses."""
    import pytest

    from stepbill.errors import StepbillError

    base = make_recipe("mixed-bf16", "adamw", 2, 4096, "selective:core_attn")
    hash(base)
    layout = Parallel(dp=4, tp=2, pp=2, zero=1, micro_batches=8)
    moved = base.on_layout(layout)
    built = make_recipe("mixed-bf16", "adamw", 2, 4096, "selective:core_attn", parallel=layout)
    assert moved == built and hash(moved) == hash(built) != hash(base)
    assert moved.parallel is layout and base.parallel == Parallel() and base != moved
    assert pickle.loads(pickle.dumps(moved)) == built
    qlora = make_recipe("qlora-nf4", lora_rank=16)
    assert qlora.on_layout(Parallel()) == qlora
    with pytest.raises(StepbillError, match="one GPU only"):
        qlora.on_layout(layout)


def test_a_layout_with_changed_fields_equals_replace() -> None:
    """Parallel.with_fields (the planner's variant layouts): equal to dataclasses.replace, hashing as it does, and
    the same one-line error where replace refuses (a changed field out of its range, a rule across fields)."""
    import random

    import pytest

    from stepbill.errors import StepbillError

    base = Parallel(dp=4, tp=2, pp=4, ep=8, zero=1, micro_batches=8, pp_schedule="interleaved", vpp=2)
    hash(base)
    rng = random.Random(0)
    for _ in range(200):
        changes = {"sp": rng.choice([False, True]), "micro_batches": rng.choice([0, 1, 2, 4, 6, 8, 12, 16]),
                   "offload_optimizer": rng.choice([False, True]), "offload_activations": rng.choice([False, True, 1]),
                   "tp": rng.choice([1, 2, 4])}
        try:
            want = dataclasses.replace(base, **changes)
        except StepbillError as e:
            with pytest.raises(StepbillError) as got:
                base.with_fields(**changes)
            assert str(got.value) == str(e)
            continue
        moved = base.with_fields(**changes)
        assert moved == want and hash(moved) == hash(want) and "_hash_once" not in dataclasses.asdict(moved)
    with pytest.raises(TypeError):
        base.with_fields(nodes=2)
