"""Budget recompute: the set of tensors to drop so the activation peak fits a budget, at minimum FLOPs.

The 0-1 program: variables x_i (drop tensor i of layer kind g) and y_o (rerun op o of kind g; x_i ≤ y_op(i), so
two outputs of one op cost it once). Minimise Σ_g n_g Σ_o c_o y_o subject to, for every layer kind g (its last
layer is where its peak is, see recompute.py):

    Σ_g' m[g][g'] · (full_g' − Σ_{i∈g'} b_i x_i)  +  Σ_{i∈g} b_i x_i  ≤  budget

where m[g][g'] counts layers of kind g' up to and including the last layer of kind g. Dropping more never raises
any constraint (m[g][g] ≥ 1), so the floor — the smallest peak any choice reaches — is "drop everything droppable".

Solved exactly by `solve_exact` (what the bill and the planner use): the staircase of op sets that no other beats
on both FLOPs and peak, built once per problem (its budget aside) from each layer kind's knapsack frontier, then
bisected for the budget; equal FLOPs go to the lower peak. `solve_milp` (HiGHS through scipy, the `solve` extra)
is the independent cross-check of the tests and never cheaper (HiGHS stops within tolerances on the scaled
costs: up to 0.5 % dearer on DeepSeek-V3); `solve_brute_force` enumerates every subset (small problems); the
greedy answer (drop whole ops in ascending FLOPs per byte until it fits) is shown beside the exact one.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from stepbill.engine import activations as act
from stepbill.engine.activations import layer_order
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

GIB = 2**30


@dataclass(frozen=True)
class Item:
    """A droppable tensor of layer kind `group`: `bytes` per layer (whole micro-batch), made by `op`."""

    group: str
    name: str
    op: str
    bytes: float


@dataclass(frozen=True)
class Problem:
    items: tuple[Item, ...]
    op_cost: dict[tuple[str, str], float]  # (group, op) → FLOPs per layer
    layers: dict[str, int]  # layers of each kind
    prefix: dict[str, dict[str, int]]  # m[g][g']
    full: dict[str, float]  # bytes per layer of kind g when nothing is dropped (droppable or not)
    budget: float


@dataclass(frozen=True)
class Solution:
    drop: dict[str, tuple[str, ...]]  # group → dropped tensor names
    flops: float
    peak: float
    method: str


def peak_of(problem: Problem, chosen: set[tuple[str, str]]) -> float:
    """The activation peak (max over kinds of the constraint's left side) for a drop set."""
    dropped = {g: sum(i.bytes for i in problem.items if i.group == g and (g, i.name) in chosen)
               for g in problem.layers}
    return max(sum(m * (problem.full[h] - dropped[h]) for h, m in problem.prefix[g].items()) + dropped[g]
               for g in problem.layers)


def cost_of(problem: Problem, chosen: set[tuple[str, str]]) -> float:
    ops = {(i.group, i.op) for i in problem.items if (i.group, i.name) in chosen}
    return sum(problem.layers[g] * problem.op_cost[(g, o)] for g, o in ops)


def _solution(problem: Problem, chosen: set[tuple[str, str]], method: str, peak: float | None = None) -> Solution:
    """The Solution of a drop set; `peak`: its peak_of when the caller has it already."""
    drop = {g: tuple(i.name for i in problem.items if i.group == g and (g, i.name) in chosen) for g in problem.layers}
    return Solution(drop, cost_of(problem, chosen), peak_of(problem, chosen) if peak is None else peak, method)


def floor(problem: Problem) -> float:
    return peak_of(problem, {(i.group, i.name) for i in problem.items})


def _fits(value: float, budget: float) -> bool:
    return value <= budget * (1 + 1e-12) + 1e-6


def check_budget(problem: Problem, low: float | None = None) -> None:
    """Raise when the budget is below the problem's floor (`low`: floor(problem) when the caller has it)."""
    low = floor(problem) if low is None else low
    if not _fits(low, problem.budget):
        raise StepbillError(f"budget {problem.budget / GIB:.2f} GiB is below the floor {low / GIB:.2f} GiB "
                            "(every droppable tensor recomputed); raise it or shard activations (context parallel)")


def solve_greedy(problem: Problem) -> Solution:
    """Drop whole ops in ascending FLOPs per byte (all layer kinds in one list) until the peak fits."""
    check_budget(problem)
    units: dict[tuple[str, str], list[Item]] = {}
    for i in problem.items:
        units.setdefault((i.group, i.op), []).append(i)
    ranked = sorted(units, key=lambda u: (problem.op_cost[u] / max(sum(i.bytes for i in units[u]), 1e-300),
                                          -sum(i.bytes for i in units[u])))
    chosen: set[tuple[str, str]] = set()
    for unit in [None, *ranked]:
        if unit is not None:
            chosen |= {(i.group, i.name) for i in units[unit]}
        if _fits(peak_of(problem, chosen), problem.budget):
            break
    return _solution(problem, chosen, "greedy FLOPs/byte")


def solve_milp(problem: Problem) -> Solution:
    """The exact optimum (HiGHS branch and bound; a few dozen binaries per layer kind)."""
    from scipy.optimize import LinearConstraint, milp

    check_budget(problem)
    items, groups = problem.items, list(problem.layers)
    ops = sorted({(i.group, i.op) for i in items})
    op_index = {o: len(items) + j for j, o in enumerate(ops)}
    n = len(items) + len(ops)
    scale = max(problem.budget, 1.0)  # bytes in budget units keep the matrix well conditioned
    c = np.zeros(n)
    for o, j in op_index.items():
        c[j] = problem.layers[o[0]] * problem.op_cost[o]
    c /= max(c.max(), 1.0)
    rows, upper = [], []
    for g in groups:
        row = np.zeros(n)
        for k, i in enumerate(items):
            row[k] = (-problem.prefix[g].get(i.group, 0) + (1 if i.group == g else 0)) * i.bytes / scale
        rows.append(row)
        upper.append((problem.budget - sum(m * problem.full[h] for h, m in problem.prefix[g].items())) / scale)
    for k, i in enumerate(items):  # x_i − y_op ≤ 0
        row = np.zeros(n)
        row[k], row[op_index[(i.group, i.op)]] = 1, -1
        rows.append(row)
        upper.append(0.0)
    constraints = LinearConstraint(np.array(rows), -np.inf, np.array(upper) + 1e-9)
    with _c_stdout_silenced():
        result = milp(c, constraints=constraints, integrality=np.ones(n), bounds=(0, 1),
                      options={"mip_rel_gap": 0})
    if result.x is None:
        raise StepbillError(f"the recompute budget solver found no solution ({result.message})")
    chosen = {(i.group, i.name) for k, i in enumerate(items) if result.x[k] > 0.5}
    return _solution(problem, chosen, "exact MILP (HiGHS)")


def solve_exact(problem: Problem) -> Solution:
    """The exact optimum without a MILP solver: the cheapest point of the problem's staircase (`Staircase`) whose
    peak fits. Ties are broken one way, always: among drop sets of equal FLOPs the lowest peak (a chosen op drops
    every tensor it made — free once the op reruns), then the first in the staircase's order."""
    return _solve_on(problem, staircase(problem))


def _solve_on(problem: Problem, steps: Staircase, low: float | None = None) -> Solution:
    """solve_exact with the problem's staircase given (`staircase(problem)`; `low`: its floor, when known)."""
    check_budget(problem, low)
    k = first_fitting_step(steps, problem.budget)
    while True:  # the steps' sums are numpy's: confirm with peak_of's own sum (a last-digit difference moves on)
        chosen = steps.chosen(min(k, len(steps.peak) - 1))
        peak = peak_of(problem, chosen)
        if _fits(peak, problem.budget) or k >= len(steps.peak) - 1:
            return _solution(problem, chosen, "exact (staircase of op sets)", peak)
        k += 1


def first_fitting_step(steps: Staircase, budget: float) -> int:
    """The first step of the staircase (the cheapest) whose peak fits `budget` (bytes), within the solver's tolerance
    (`_fits`); len(steps.peak) when none does. The solver starts there and moves on only while its own sum of the
    step's peak (peak_of) misses the budget in the last digits."""
    return int(np.searchsorted(-steps.peak, -budget * (1 + 1e-12) - 1e-6))


@dataclass(frozen=True)
class Staircase:
    """Every drop set that no other beats on both FLOPs and peak: FLOPs ascending, peaks strictly descending (bytes).
    The budget is not read, so one staircase answers every budget (memoised on the problem less its budget).

    Why it is exact. Each constraint's left side falls as any kind's dropped bytes grow (a kind h enters
    constraint g with coefficient [h = g] − m[g][h] ≤ 0, m[g][g] ≥ 1), so once an op reruns, dropping every
    tensor it made is free and never worse: drop sets are sets of ops. Per kind, only op sets that no other set
    of that kind beats on both FLOPs and dropped bytes can be optimal (a 0-1 knapsack's Pareto frontier, built
    one op at a time: `_kind_front`); the staircase is the frontier of their combinations across kinds."""

    cost: np.ndarray
    peak: np.ndarray
    fronts: tuple[list[tuple[float, float, frozenset[tuple[str, str]]]], ...]  # per kind: (FLOPs, −bytes, keys)
    picks: np.ndarray  # per step, the index into each kind's front

    def chosen(self, k: int) -> set[tuple[str, str]]:
        """The dropped (kind, tensor) keys of step `k`."""
        return {key for front, j in zip(self.fronts, self.picks[k], strict=True) for key in front[int(j)][2]}


def staircase(problem: Problem) -> Staircase:
    return _staircase(problem.items, tuple(sorted(problem.op_cost.items())), tuple(sorted(problem.layers.items())),
                      tuple(sorted((g, tuple(sorted(m.items()))) for g, m in problem.prefix.items())),
                      tuple(sorted(problem.full.items())))


@functools.lru_cache(maxsize=64)
def _staircase(items: tuple[Item, ...], op_cost: tuple, layers: tuple, prefix: tuple, full: tuple) -> Staircase:
    problem = Problem(items, dict(op_cost), dict(layers), {g: dict(m) for g, m in prefix}, dict(full), 0.0)
    kinds = list(problem.layers)
    fronts = tuple(_kind_front(problem, g) for g in kinds)
    # every combination of the kinds' fronts at once: FLOPs and peak as cost_of and peak_of define them
    grids = np.meshgrid(*[np.arange(len(f)) for f in fronts], indexing="ij")
    index = np.stack([g.ravel() for g in grids], axis=1)
    cost = sum(np.array([c for c, _, _ in f])[index[:, n]] for n, f in enumerate(fronts))
    dropped = {g: np.array([-b for _, b, _ in f])[index[:, n]] for n, (g, f) in enumerate(zip(kinds, fronts,
                                                                                                strict=True))}
    peak = np.max([sum(m * (problem.full[h] - dropped[h]) for h, m in problem.prefix[g].items()) + dropped[g]
                   for g in kinds], axis=0)
    order = np.lexsort((peak, cost))  # FLOPs ascending, then peak
    peak_sorted = peak[order]
    lower = np.concatenate(([np.inf], np.minimum.accumulate(peak_sorted)[:-1]))
    keep = order[peak_sorted < lower]  # each strictly below every cheaper one
    return Staircase(np.asarray(cost)[keep], peak[keep], fronts, index[keep])


def _kind_front(problem: Problem, group: str) -> list[tuple[float, float, frozenset[tuple[str, str]]]]:
    """The op sets of one layer kind no other beats on both FLOPs and dropped bytes: (FLOPs, −bytes, keys)."""
    units: dict[str, list[Item]] = {}
    for i in problem.items:
        if i.group == group:
            units.setdefault(i.op, []).append(i)
    front: list[tuple[float, float, frozenset[tuple[str, str]]]] = [(0.0, 0.0, frozenset())]
    for op in sorted(units):
        cost = problem.layers[group] * problem.op_cost[(group, op)]
        freed = sum(i.bytes for i in units[op])
        keys = frozenset((group, i.name) for i in units[op])
        merged = front + [(c + cost, b - freed, k | keys) for c, b, k in front]
        merged.sort(key=lambda p: (p[0], p[1], sorted(p[2])))
        front = []
        for point in merged:  # keep a point only when it frees strictly more than every cheaper one
            if not front or point[1] < front[-1][1]:
                front.append(point)
    return front


@contextlib.contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 pointed at the null device while HiGHS runs: some MIP solves print a debug line
    ("HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();") to the C-level stdout whatever
    `disp` says, which would corrupt `--json` output (DeepSeek-V3 at budget:51.79GiB, eager, does)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real file descriptor 1 (embedded interpreters): nothing to protect
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def solve_brute_force(problem: Problem) -> Solution:
    """Every subset (tests only: 2^items)."""
    check_budget(problem)
    keys = [(i.group, i.name) for i in problem.items]
    best: tuple[float, set[tuple[str, str]]] | None = None
    for r in range(len(keys) + 1):
        for combo in itertools.combinations(keys, r):
            chosen = set(combo)
            if _fits(peak_of(problem, chosen), problem.budget):
                cost = cost_of(problem, chosen)
                if best is None or cost < best[0]:
                    best = (cost, chosen)
    assert best is not None
    return _solution(problem, best[1], "brute force")


def problem_for_spec(spec: ModelSpec, budget: float, seq_len: int, micro_batch: int, activation_bytes: int,
                     convention: str = "ideal", attention: str = "sdpa") -> Problem:
    """The budget problem of a model: one item per droppable tensor per layer kind."""
    tokens = seq_len * micro_batch
    order = layer_order(spec)
    items, op_cost, full = [], {}, {}
    for g in act.layer_kinds(spec):
        rows = act.layer_rows(spec, g, activation_bytes, convention, attention)
        full[g] = sum(t.bytes_at(seq_len) for t in rows) * tokens
        for t in rows:
            if t.recompute.droppable:
                items.append(Item(g, t.name, t.op_id, t.bytes_at(seq_len) * tokens))
                op_cost[(g, t.op_id)] = t.recompute.flops_per_token(seq_len) * tokens
    layers = {g: order.count(g) for g in full}
    prefix = {}
    for g in full:
        last = max(i for i, k in enumerate(order) if k == g)
        prefix[g] = {h: order[: last + 1].count(h) for h in full if h in order[: last + 1]}
    return Problem(tuple(items), op_cost, layers, prefix, full, budget)


@functools.lru_cache(maxsize=4096)
def solve_for_spec(spec: ModelSpec, budget: float, seq_len: int, micro_batch: int, activation_bytes: int,
                   convention: str = "ideal", attention: str = "sdpa") -> Solution:
    """The exact optimum for a model (solve_exact; memoised: the planner asks the same budget of the fit verdict,
    the budget's correction and the bill; a Solution is read-only). The problem less its budget and its staircase
    are made once per model, sequence, micro-batch and convention (`spec_problem`): a planner's budget candidates
    ask one problem many budgets."""
    problem, steps, low = spec_problem(spec, seq_len, micro_batch, activation_bytes, convention, attention)
    return _solve_on(replace(problem, budget=budget), steps, low)


@functools.lru_cache(maxsize=256)
def spec_problem(spec: ModelSpec, seq_len: int, micro_batch: int, activation_bytes: int, convention: str,
                  attention: str) -> tuple[Problem, Staircase, float]:
    """problem_for_spec at budget 0, its staircase and its floor (which read no budget). Shared: read them only."""
    problem = problem_for_spec(spec, 0.0, seq_len, micro_batch, activation_bytes, convention, attention)
    return problem, staircase(problem), floor(problem)
