"""Partitions that prune against each other's billed rows (engine/plan/peers.py) still give the whole space's answer,
and the shared records carry exactly what the answer reads of a row."""

from __future__ import annotations

import math
import multiprocessing

import pytest

from stepbill.engine.plan import PlanRequest, peers, search
from stepbill.engine.plan.answer import Answer
from stepbill.engine.plan.pareto import gpus_vs_time, memory_vs_time
from stepbill.engine.plan.partition import bound_part, partitions
from stepbill.engine.plan.peers import Peers, shared_array
from stepbill.engine.plan.rank import top
from stepbill.engine.plan.search import _shuffled
from stepbill.engine.plan.space import Rejections, enumerate_space
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_preset
from tests.test_plan_bounds import SPACES


def _array(monkeypatch: pytest.MonkeyPatch | None = None, capacity: int | None = None) -> tuple:
    if monkeypatch is not None and capacity is not None:
        monkeypatch.setattr(peers, "CAPACITY", capacity)
    return shared_array(multiprocessing.get_context("spawn"))  # makes no process: shared memory and a lock


def test_peers_read_the_others_records_exactly() -> None:
    """A record comes back as written (keys of 2 and 3 numbers, doubles bit for bit), to every reader but its
    writer, once."""
    shared = _array()
    a, b, c = (Peers(*shared, writer=w) for w in (0, 1, 2))
    first = ((8.491234567891234, 2048, 7.6e10 + 0.5), 8.491234567891234, 2048, 7.6e10 + 0.5)
    second = ((1.25e-7, 8.6), 576.307, 64, 9.1e9)
    a.publish(first)
    b.publish(second)
    assert b.news() == [first] and c.news() == [first, second] and a.news() == [second]
    assert a.news() == b.news() == c.news() == []
    got = c.seen
    a.publish(first)
    assert c.news() == [first] and c.seen == got + 1


def test_a_full_array_drops_records(monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _array(monkeypatch, capacity=2)
    a, b = Peers(*shared, writer=0), Peers(*shared, writer=1)
    rows = [((float(i), 8, 1.0), float(i), 8, 1.0) for i in range(3)]
    for taken in rows:
        a.publish(taken)
    assert b.news() == rows[:2]


def test_answer_takes_a_peers_record_as_its_own_row() -> None:
    """Answer.take of what Answer.add returns rules as the row does (the shared path and the billed path agree)."""
    from tests.test_plan_bounds import _lead, _row

    rows = [_row(10.0, 50e9), _row(12.0, 30e9), _row(9.0, 70e9, world=16), _row(20.0, 10e9)]
    billed, shared = Answer("time", 2, True), Answer("time", 2, True)
    for row in rows:
        shared.take(billed.add(row))
    for step in (8.0, 9.5, 11.0, 15.0, 25.0):
        for peak in (5e9, 20e9, 40e9, 80e9):
            for world in (8, 16):
                lead = _lead("time", step, world, peak)
                assert billed.peak_to_beat(lead) == shared.peak_to_beat(lead)
    assert not shared.rows and len(billed.rows) == 4


@pytest.mark.parametrize("name", ["dense", "override"])
def test_partitions_sharing_rows_give_the_whole_answer(name: str) -> None:
    """Partitions run one after another, each pruning against the rows the earlier ones billed (as workers do, in
    whatever order they run): their rows merged give the one-process search's top K and fronts, with fewer bills
    than partitions that share nothing (on these spaces 451 → 336 and 525 → 265)."""
    model, gpus, seq, batch, efficiency = SPACES[name]
    req = PlanRequest(load_preset(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                      global_batch_tokens=batch, efficiency=efficiency)
    whole = search(req, "time", 5)
    indexed = list(enumerate(_shuffled(list(enumerate_space(req, Rejections())))))
    parts = partitions(indexed, 4)
    assert len(parts) > 1
    shared = _array()
    alone = [bound_part(req, part, "time", 5, None) for part in parts]
    together = [bound_part(req, part, "time", 5, None, peers=Peers(*shared, writer=i)) for i, part in enumerate(parts)]
    rows = [row for b in together for row in b.billed.rows]
    assert [r.command for r in top(rows, "time", 5)] == [r.command for r in whole.top]
    assert [r.command for r in gpus_vs_time(rows, True)] == [r.command for r in whole.gpus_vs_time]
    assert [r.command for r in memory_vs_time(rows, True)] == [r.command for r in whole.memory_vs_time]
    assert sum(b.billed.by_bill for b in together) < sum(b.billed.by_bill for b in alone)
    assert sum(b.decided for b in together) == sum(b.decided for b in alone)
    assert not math.isnan(sum(b.cpu_seconds for b in together))
