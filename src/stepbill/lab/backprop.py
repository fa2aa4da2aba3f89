"""How backprop gets its gradients, seed 000 §1.1–1.5, worked as computations.

- Finite differences need one forward per parameter: P forwards × t seconds (§1.1, "nearly 10,000 years").
- Reverse mode needs one backward sweep per output (one scalar loss), forward mode one sweep per input.
- The chain rule multiplies local rates ("exchange rates"); 59 links at 0.8 vanish, at 1.2 explode (§1.4).
- Softmax + cross-entropy's gradient w.r.t. the logits is p − y (§1.2).
- A matmul Y = X·W costs 2Skn forward and 2Skn each for dX and dW: a step is 3× the forward (§1.3).

The arithmetic and the small network's chain-rule/finite-difference gradients are numpy; the autograd and
FlopCounterMode checks import torch lazily (the `measure` extra) and fail in one line without it.
Units: seconds, years of 365.25 days, FLOPs (2 per multiply-add).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError
from stepbill.lab import _check

SECONDS_PER_YEAR = 365.25 * 86_400
TORCH_MISSING = ("lab backprop's autograd and FlopCounterMode checks need torch: pip install 'stepbill[measure]' "
                 "(or pass --no-torch for the numpy parts only)")


def finite_difference_years(params: float, seconds_per_forward: float) -> float:
    """Years of forwards to estimate one gradient by finite differences: one extra forward per parameter.

    P · t / (365.25 · 86,400). Source: seed 000 §1.1 (3e11 params × 1 s ≈ "nearly 10,000 years": 9,506)."""
    return _check.positive("params", params) * _check.positive("seconds per forward", seconds_per_forward) \
        / SECONDS_PER_YEAR


def sweeps(n_inputs: float, n_outputs: float) -> dict[str, float]:
    """Passes needed for a full Jacobian: forward mode one per input, reverse mode one per output.

    Source: seed 000 §1.1 (one scalar loss, 3e11 parameters: 1 backward vs 3e11 forward-mode sweeps)."""
    return {"forward_mode": _check.positive("inputs", n_inputs), "reverse_mode": _check.positive("outputs", n_outputs)}


def chain_rate(rates: npt.ArrayLike) -> float:
    """Total exchange rate of a chain: the product of its local rates (chain rule). Source: seed 000 §1 intro."""
    r = np.asarray(rates, dtype=float)
    if r.size == 0:
        raise StepbillError("the chain needs at least one local rate")
    return float(np.prod(r))


def chain_power(rate: float, links: int) -> float:
    """The same local rate through `links` links: rate**links (0.8^59 ≈ 1.9e-6, 1.2^59 ≈ 46,956; seed §1.4).

    Past float64's range the product is ±inf (1.2^3,894) or 0 (0.8^3,340), as IEEE arithmetic rounds it."""
    n = _check.count("links", links, low=0)
    try:
        return float(rate) ** n
    except OverflowError:  # Python's float power raises where IEEE multiplication gives ±inf
        return math.copysign(math.inf, float(rate) if n % 2 else 1.0)


def sigmoid_slope_max(samples: int = 10_001, half_width: float = 10.0) -> float:
    """Largest σ′(x) = σ(1 − σ) on an even grid over [−w, w] (closed form 0.25 at x = 0; seed §1.4)."""
    x = np.linspace(-half_width, half_width, _check.count("samples", samples, low=3))
    s = 1.0 / (1.0 + np.exp(-x))
    return float(np.max(s * (1.0 - s)))


def post_ln_coefficient(layers: int) -> float:
    """Post-LN: Var(x + F(x)) = 2 so each norm divides by √2; x₀'s coefficient after l layers is 2^(−l/2).

    Source: seed 000 §6 (Xiong et al. 2020's argument)."""
    return 2.0 ** (-_check.count("layers", layers, low=0) / 2)


def softmax(z: npt.ArrayLike) -> np.ndarray:
    z = np.asarray(z, dtype=float)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cross_entropy(z: npt.ArrayLike, target: int) -> float:
    """−log softmax(z)[target], in nats."""
    z = np.asarray(z, dtype=float)
    m = z.max()
    return float(m + math.log(np.exp(z - m).sum()) - z[target])


def softmax_ce_grad(z: npt.ArrayLike, target: int) -> np.ndarray:
    """dL/dz of cross-entropy after softmax: p − onehot(target). Source: seed 000 §1.2."""
    p = softmax(z)
    _check.count("target", target, low=0)
    if target >= p.size:
        raise StepbillError(f"target index {target} is outside the {p.size} logits")
    p[target] -= 1.0
    return p


def central_difference(f: Any, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """∂f/∂xᵢ ≈ (f(x + h·eᵢ) − f(x − h·eᵢ)) / 2h for every i: two forwards per coordinate."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    flat, g = x.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + h
        up = f(x)
        flat[i] = keep - h
        down = f(x)
        flat[i] = keep
        g[i] = (up - down) / (2 * h)
    return out


@dataclass(frozen=True)
class TinyNet:
    """x[B, d_in] → Linear(W1, b1) → tanh → Linear(W2, b2) → softmax cross-entropy, float64."""

    x: np.ndarray
    y: np.ndarray  # target class per row
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    def params(self) -> dict[str, np.ndarray]:
        return {"W1": self.w1, "b1": self.b1, "W2": self.w2, "b2": self.b2}

    def loss(self) -> float:
        """Mean cross-entropy over the batch (nats)."""
        logits = np.tanh(self.x @ self.w1 + self.b1) @ self.w2 + self.b2
        return float(np.mean([cross_entropy(z, int(t)) for z, t in zip(logits, self.y, strict=True)]))

    def chain_rule(self) -> dict[str, np.ndarray]:
        """Gradients by multiplying local rates backwards: dz₂ = (p − y)/B; dW₂ = hᵀdz₂; dh = dz₂W₂ᵀ;
        da = dh·(1 − h²) (tanh′); dW₁ = xᵀda."""
        h = np.tanh(self.x @ self.w1 + self.b1)
        logits = h @ self.w2 + self.b2
        dz2 = np.stack([softmax_ce_grad(z, int(t)) for z, t in zip(logits, self.y, strict=True)]) / len(self.y)
        da = (dz2 @ self.w2.T) * (1.0 - h**2)
        return {"W1": self.x.T @ da, "b1": da.sum(0), "W2": h.T @ dz2, "b2": dz2.sum(0)}

    def finite_difference(self, h: float = 1e-6) -> dict[str, np.ndarray]:
        """Central differences on every parameter (2 forwards each), in place on copies."""
        out = {}
        for name, p in self.params().items():
            out[name] = central_difference(lambda _: self.loss(), p, h)  # p is perturbed in place
        return out


def tiny_net(d_in: int = 4, hidden: int = 8, classes: int = 3, batch: int = 5, seed: int = 0) -> TinyNet:
    """A seeded float64 MLP small enough for finite differences on every parameter."""
    rng = np.random.default_rng(_check.count("seed", seed, low=0))  # numpy refuses negative seeds
    return TinyNet(rng.normal(size=(batch, d_in)), rng.integers(0, classes, size=batch),
                   rng.normal(0, 0.5, (d_in, hidden)), rng.normal(0, 0.1, hidden),
                   rng.normal(0, 0.5, (hidden, classes)), rng.normal(0, 0.1, classes))


def _max_abs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise StepbillError(TORCH_MISSING) from None
    return torch


def autograd_gradients(net: TinyNet) -> dict[str, np.ndarray]:
    """The same network's gradients from torch autograd (float64, CPU)."""
    torch = _torch()
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in net.params().items()}
    x = torch.tensor(net.x, dtype=torch.float64)
    logits = torch.tanh(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
    torch.nn.functional.cross_entropy(logits, torch.tensor(net.y, dtype=torch.long)).backward()
    return {k: v.grad.numpy() for k, v in p.items()}


def autograd_softmax_ce(z: npt.ArrayLike, target: int) -> np.ndarray:
    """dL/dz from torch autograd for one row of logits (float64)."""
    torch = _torch()
    t = torch.tensor(np.asarray(z, dtype=float), dtype=torch.float64, requires_grad=True)
    torch.nn.functional.cross_entropy(t[None], torch.tensor([target])).backward()
    return t.grad.numpy()


def matmul_flops(tokens: int, k: int, n: int) -> dict[str, int]:
    """Y[S,n] = X[S,k]·W[k,n]: forward 2Skn; backward dX = dY·Wᵀ (2Skn) and dW = Xᵀ·dY (2Skn). Seed §1.3."""
    one = 2 * _check.count("tokens", tokens) * _check.count("k", k) * _check.count("n", n)
    return {"forward": one, "grad_input": one, "grad_weight": one, "step": 3 * one}


def counted_linear_flops(tokens: int, k: int, n: int, input_requires_grad: bool = True) -> dict[str, int]:
    """FLOPs of one bias-free nn.Linear(k, n) on [tokens, k], counted by torch's FlopCounterMode.

    With input_requires_grad=False (the first layer, or a frozen path's input) backward skips dX."""
    torch = _torch()
    from torch.utils.flop_counter import FlopCounterMode

    layer = torch.nn.Linear(k, n, bias=False)
    x = torch.randn(tokens, k, requires_grad=input_requires_grad)
    with FlopCounterMode(display=False) as fwd:
        y = layer(x)
    with FlopCounterMode(display=False) as bwd:
        y.sum().backward()
    return {"forward": int(fwd.get_total_flops()), "backward": int(bwd.get_total_flops())}


def gradient_checks(net: TinyNet, with_torch: bool) -> dict[str, Any]:
    """Chain rule vs finite differences (numpy) and vs autograd (torch), max |difference| over all params."""
    chain = net.chain_rule()
    fd = net.finite_difference()
    out: dict[str, Any] = {
        "params": int(sum(p.size for p in net.params().values())),
        "forwards_for_finite_difference": 2 * int(sum(p.size for p in net.params().values())),
        "chain_vs_finite_difference": _max_abs(chain, fd),
        "largest_gradient": max(float(np.max(np.abs(g))) for g in chain.values()),
    }
    if with_torch:
        out["chain_vs_autograd"] = _max_abs(chain, autograd_gradients(net))
    return out
