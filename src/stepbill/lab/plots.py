"""Figures for `stepbill lab <topic> --plot FILE`. matplotlib is imported lazily (the `plot` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stepbill.engine import comm
from stepbill.errors import StepbillError
from stepbill.lab import adam, backprop, collectives, decay, descent, formats, schedule, warmup

SUFFIXES = (".png", ".svg")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never open a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise StepbillError("plotting needs matplotlib: pip install 'stepbill[plot]'") from None
    return plt


def _check_path(path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise StepbillError(f"plot file must end in .png or .svg, got {str(p)!r}")
    if not p.parent.exists():
        raise StepbillError(f"plot directory {str(p.parent)!r} does not exist")
    return p


def plot(summary: dict[str, Any], path: str | Path) -> Path:
    """Draw the figure of a topic summary (see `stepbill.lab.summaries`) to a .png or .svg file."""
    p = _check_path(path)
    plt = _pyplot()
    s = summary["settings"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    draw = globals().get(f"_draw_{summary['topic'].replace('-', '_')}")
    if draw is None:
        plt.close(fig)
        raise StepbillError(f"lab {summary['topic']} has no figure (it prints tables only)")
    draw(axes, s, summary)
    fig.suptitle(f"stepbill lab {summary['topic']}")
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p


def _draw_adam(axes: Any, s: dict, _: dict) -> None:
    for b in (0.0, 0.5, s["beta1"], s["beta2"]):
        axes[0].plot(np.arange(1, s["steps"] + 1), adam.ema_shares(b, s["steps"]) * 100, "o-", label=f"β = {b:g}")
    axes[0].set(xlabel="step", ylabel="share of the register (%)", title="EMA shares (bias-corrected)")
    axes[0].legend()
    lin = adam.lineage_constant_gradient(600, s["beta1"], 0.999)
    for k in ("adagrad", "rmsprop_no_correction", "adam_no_correction", "adam"):
        axes[1].loglog(lin["step"], lin[k], label=k)
    axes[1].set(xlabel="step", ylabel="effective step (units of η)", title="Constant gradient, β₂ = 0.999")
    axes[1].legend()


def _draw_decay(axes: Any, s: dict, _: dict) -> None:
    sv = np.array([v for _, v in decay.DEFAULT_GROUPS])
    names = [n.replace(" (illustrative)", "*") for n, _ in decay.DEFAULT_GROUPS]
    x = np.arange(len(names))
    axes[0].bar(x - 0.2, np.full(len(x), decay.adamw_decay_per_step(s["lr"], s["weight_decay"])), 0.4, label="AdamW")
    axes[0].bar(x + 0.2, decay.l2_decay_per_step(s["lr"], s["weight_decay"], sv), 0.4, label="L2 in gradient")
    axes[0].set_yscale("log")
    axes[0].set_xticks(x, names, rotation=30, ha="right")
    axes[0].set(ylabel="decay per step (fraction)", title="Same λ, six groups (* illustrative √v̂)")
    axes[0].legend()
    run = decay.simulate_weight(weight_decay=s["weight_decay"], seed=s["seed"])
    axes[1].plot(run.step, run.without_decay, label="no decay")
    axes[1].plot(run.step, run.with_decay, label=f"AdamW λ = {s['weight_decay']:g}")
    axes[1].axhline(run.equilibrium, ls="--", c="k", label="expected equilibrium E[u]/λ")
    axes[1].set(xlabel="step", ylabel="weight", title="One weight pushed one way (seeded)")
    axes[1].legend()


def _draw_warmup(axes: Any, s: dict, _: dict) -> None:
    t = np.arange(1, 5 * s["warmup_steps"] + 1)
    axes[0].loglog(t, np.full(t.shape, s["lr"]), label="no warmup")
    axes[0].loglog(t, s["lr"] * warmup.warmup_factor(t, s["warmup_steps"]), label=f"{s['warmup_steps']}-step warmup")
    axes[0].set(xlabel="step", ylabel="distance per step (η·|u|, |u| ≈ 1 early)", title="What warmup buys")
    axes[0].legend()
    for b2 in s["betas2"]:
        band = warmup.sqrt_v_band(b2, s["steps"], s["params"], s["seed"])
        steps = np.arange(1, s["steps"] + 1)
        axes[1].fill_between(steps, band.min(axis=1), band.max(axis=1), alpha=0.4, label=f"β₂ = {b2:g}")
    axes[1].set_xscale("log")
    axes[1].axhline(1.0, c="k", lw=0.8)
    axes[1].set(xlabel="step", ylabel="√v̂ / true σ", title=f"Band of {s['params']} parameters (seeded)")
    axes[1].legend()


def _draw_schedule(axes: Any, s: dict, _: dict) -> None:
    t = np.arange(1, s["total"] + 1)
    kw = {k: s[k] for k in ("peak", "warmup", "floor", "decay_frac", "decay_shape")}
    for shape in schedule.SHAPES:
        lr = schedule.lr_at(t, shape, total=s["total"], **kw)
        axes[0].plot(t, lr, label=f"{shape} (area {lr.sum():.2f})")
    axes[0].set(xlabel="step", ylabel="learning rate", title="Schedules (area = Σ lr)")
    axes[0].legend(fontsize=8)
    n = np.array([r[1] for r in schedule.GPT3_TABLE])
    lrs = np.array([r[2] for r in schedule.GPT3_TABLE])
    k, c = schedule.powerlaw_fit(n, lrs)
    axes[1].loglog(n, lrs, "o", label="GPT-3 Table 2.1")
    grid = np.geomspace(1e8, 3e11, 50)
    axes[1].loglog(grid, c * grid**k, "--", label=f"fit N^{k:.2f}")
    axes[1].set(xlabel="parameters", ylabel="peak lr", title="Peak lr vs size")
    axes[1].legend()


def _draw_clip(axes: Any, s: dict, summary: dict) -> None:
    v = np.array(s["vector"], dtype=float)
    vals = summary["values"]
    for vec, label in ((v, "gradient"), (vals["clipped_by_norm"], "by norm"), (vals["clipped_by_value"], "by value")):
        axes[0].annotate("", xy=vec[:2], xytext=(0, 0), arrowprops={"arrowstyle": "->"})
        axes[0].plot(*np.asarray(vec)[:2], "o", label=label)
    from matplotlib.patches import Circle, Rectangle  # matplotlib is importable: _pyplot() ran first

    c = s["clip_value"]
    axes[0].add_patch(Circle((0, 0), c, fill=False, ls="--"))
    axes[0].add_patch(Rectangle((-c, -c), 2 * c, 2 * c, fill=False, ls=":"))
    axes[0].set_aspect("equal")
    axes[0].set(title="Ball (norm) vs box (value)", xlim=(-0.5, max(2.5, v[0] + 0.5)), ylim=(-0.5, 2))
    axes[0].legend()
    norms = summary["_arrays"]["norms"]
    axes[1].semilogy(np.maximum(norms, 1e-12), lw=0.8)
    axes[1].axhline(s["threshold"], c="r", ls="--", label=f"threshold {s['threshold']:g}")
    axes[1].legend()
    axes[1].set(xlabel="step", ylabel="‖g‖", title=f"Norm trace ({s['trace']})")


def _draw_formats(axes: Any, s: dict, _: dict) -> None:
    fmts = [formats.get(n) for n in s["formats"]]
    for i, f in enumerate(fmts):
        axes[0].plot([np.log10(f.min_subnormal), np.log10(f.max)], [i, i], lw=6)
    axes[0].set_yticks(range(len(fmts)), [f.name for f in fmts])
    axes[0].set(xlabel="log10 |x| (min subnormal → max)", title="Range")
    scales = np.arange(0, 31)
    fr = [formats.loss_scaling_fractions(k) for k in scales]
    axes[1].plot(scales, [r["underflow"] * 100 for r in fr], label="underflow")
    axes[1].plot(scales, [r["overflow"] * 100 for r in fr], label="overflow")
    axes[1].set(xlabel="loss scale log2", ylabel="% of gradients", title="fp16 loss scaling (fitted log-normal)")
    axes[1].legend()


def _draw_collectives(axes: Any, s: dict, _: dict) -> None:
    n = np.unique(np.geomspace(2, 1024, 40).astype(int))
    rv = collectives.ring_vs_server(n, s["message_bytes"])
    axes[0].loglog(n, rv["ring"] / collectives.GIB, label="ring 2(N−1)/N·M")
    axes[0].loglog(n, rv["server"] / collectives.GIB, label="central server 2NM")
    axes[0].set(xlabel="GPUs", ylabel="busiest link (GiB)", title="All-reduce traffic")
    axes[0].legend()
    m = max(s["microbatches"])
    grid = comm.pipeline_grid(s["stages"], m)
    axes[1].imshow(np.where(grid < 0, np.nan, grid), aspect="auto", cmap="viridis")
    axes[1].set_yticks(range(s["stages"]))
    axes[1].set(xlabel="time slot", ylabel="stage",
                title=f"Pipeline: {s['stages']} stages × {m} micro-batches, bubble {comm.pipeline_bubble(s['stages'], m):.0%}")


def _draw_backprop(axes: Any, s: dict, _: dict) -> None:
    p = np.logspace(6, 12, 61)
    axes[0].loglog(p, [backprop.finite_difference_years(x, s["seconds_per_forward"]) for x in p],
                   label=f"finite differences, {s['seconds_per_forward']:g} s/forward")
    axes[0].loglog(p, np.full(p.size, s["seconds_per_forward"] * 3 / backprop.SECONDS_PER_YEAR), label="backprop (~3 forwards)")
    axes[0].plot([s["params"]], [backprop.finite_difference_years(s["params"], s["seconds_per_forward"])], "ko")
    axes[0].set(xlabel="parameters", ylabel="years per gradient", title="One gradient: finite differences vs backprop")
    axes[0].legend()
    n = np.arange(s["links"] + 1)
    for rate in (0.8, 1.0, 1.2):
        axes[1].semilogy(n, [backprop.chain_power(rate, int(i)) for i in n], label=f"local rate {rate:g}")
    axes[1].set(xlabel="links in the chain", ylabel="total rate", title="Chain rule: rates multiply")
    axes[1].legend()


def _draw_descent(axes: Any, s: dict, _: dict) -> None:
    x = np.linspace(-14, 14, 600)
    axes[0].plot(x, descent.toy_loss(x), c="0.5", label="L(x) = 0.015x² + 0.45cos(1.1x)")
    for beta in (0.0, s["beta"]):
        xs = descent.heavy_ball(s["x0"], s["lr"], beta, s["steps"])
        axes[0].plot(xs, descent.toy_loss(xs), ".-", ms=3, label=f"β = {beta:g} → x = {xs[-1]:.3f}")
    axes[0].set(xlabel="x", ylabel="loss", title="Heavy ball on the toy landscape")
    axes[0].legend()
    r = np.logspace(0.5, 3.5, 60)
    axes[1].loglog(r, [descent.gd_steps_to_half(v) for v in r])
    axes[1].set(xlabel="steepness ratio a_steep / a_flat", ylabel="steps to halve the flat direction",
                title="One lr for all directions (η = 1.9/a_steep)")
