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
