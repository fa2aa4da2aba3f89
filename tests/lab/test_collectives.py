"""Seed 002 §07 and seed 000 §1.8/§4.2: ring all-reduce, parameter server, TP, pipeline, 3-D, ZeRO."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbill.engine import comm
from stepbill.errors import StepbillError
from stepbill.lab import collectives
from tests.lab.facts import fact

GIB, TIB, MIB = 2**30, 2**40, 2**20


def test_ring_phases_n4() -> None:  # ring-phases-N4
    f = fact("ring-phases-N4")
    n = f["inputs"]["N"]
    phases = comm.ring_allreduce_phases(n)
    assert len(phases) - 1 == f["printed"]["stages"] == 2 * (n - 1)
    first_done = next(s for s, ph in enumerate(phases) if all(len(c) == 1 for c in collectives.finished_chunks(ph)))
    assert first_done == f["printed"]["all_reduced_by_stage"]
    # every rank holds a *different* finished chunk at stage 3: nobody is the centre
    assert sorted(c[0] for c in collectives.finished_chunks(phases[3])) == list(range(n))
    assert np.all(phases[-1] == n)


@given(st.integers(2, 40), st.floats(1.0, 1e12))
@settings(max_examples=40, deadline=None)
def test_ring_simulation_equals_closed_form(n: int, m: float) -> None:
    run = collectives.simulate_ring(n, m, seed=n)
    assert run.result_ok
    assert run.link_bytes == pytest.approx(np.full(n, comm.ring_allreduce_link_bytes(n, m)))


def test_ring_22_8_and_26_0_gib() -> None:  # ring-allreduce-22.8-26.0, dp-grad-comm-batch-independent
    f = fact("ring-allreduce-22.8-26.0")
    d = collectives.ring_vs_server(f["inputs"]["N"], f["inputs"]["M_bytes"])
    assert np.round(d["ring"] / GIB, 1) == pytest.approx(f["printed"]["gib"])
    assert comm.ring_allreduce_link_bytes(1e6, 1.0) == pytest.approx(
        fact("dp-grad-comm-batch-independent")["printed"]["ring_factor_limit"], rel=1e-5)


def test_central_server_209_gib_13_tib() -> None:  # central-server-209-13.0
    f = fact("central-server-209-13.0")
    d = collectives.ring_vs_server(f["inputs"]["N"], f["inputs"]["M_bytes"])
    assert round(d["server"][0] / GIB) == f["printed"]["gib_at_8"]
    assert round(d["server"][1] / TIB, 1) == f["printed"]["tib_at_512"]


def test_tensor_parallel_201m_25m_448_64() -> None:  # tp-layer-201M, tp-4-allreduces, tp-448-vs-64MiB
    f = fact("tp-layer-201M")
    tp = collectives.tensor_parallel(f["inputs"]["h"], f["inputs"]["tp"], 8192)
    assert round(tp["layer_params"] / 1e6) * 1e6 == f["printed"]["layer"]
    assert round(tp["params_per_rank"] / 1e5) * 1e5 == pytest.approx(f["printed"]["per_rank"])
    assert tp["allreduces_per_layer"] == fact("tp-4-allreduces")["printed"] == 2 * (1 + 1)  # 2 blocks × (fwd+bwd)
    g = fact("tp-448-vs-64MiB")
    assert tp["traffic_bytes"] / MIB == g["printed"]["traffic_mib"]
    assert tp["activation_bytes"] / MIB == g["printed"]["activation_mib"]


def test_pipeline_bubble_75_and_16() -> None:  # pp-bubble-75-16
    f = fact("pp-bubble-75-16")
    for m, want in zip(f["inputs"]["m"], f["printed"], strict=True):
        pl = collectives.pipeline(f["inputs"]["p"], m)
        assert pl["bubble_from_grid"] == pytest.approx(pl["bubble"])  # grid count = closed form
        assert round(pl["bubble"], 2) == want


@given(st.integers(1, 16), st.integers(1, 64))
def test_pipeline_grid_idle_share_equals_closed_form(p: int, m: int) -> None:
    grid = comm.pipeline_grid(p, m)
    assert np.mean(grid < 0) == pytest.approx(comm.pipeline_bubble(p, m))
    assert all(sorted(row[row >= 0]) == list(range(m)) for row in grid)


def test_3d_layout_and_zero_volumes() -> None:  # 3d-1024, zero-comm-2-2-3
    i = fact("3d-1024")["inputs"]
    assert comm.parallel_world_size(i["dp"], i["tp"], i["pp"]) == fact("3d-1024")["printed"]
    assert [comm.zero_comm_volume(s, 1.0) for s in (1, 2, 3)] == fact("zero-comm-2-2-3")["printed"]


def test_comm_accepts_arrays() -> None:
    n = np.array([2, 4, 8])
    assert comm.ring_allreduce_link_bytes(n, 8.0) == pytest.approx([8.0, 12.0, 14.0])
    assert comm.tp_layer_params(np.array([1024, 4096]), 2) == pytest.approx([6 * 1024**2, 6 * 4096**2])


@pytest.mark.parametrize("n", [1, 0, -4])
def test_fewer_than_two_ranks_is_rejected(n: int) -> None:
    with pytest.raises(StepbillError, match="N"):
        comm.ring_allreduce_link_bytes(n, 1.0)
    with pytest.raises(StepbillError):
        collectives.simulate_ring(n, 1.0)
