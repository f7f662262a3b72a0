"""Local objectives beyond the engine's default cross-entropy, for `flkit.engine.local_train` and
`flkit.fastsgd.FastSGD` (``objective=``).

Fed-CVaR-Avg (document 003): the objective (6), its (sub)gradients, and the minibatch surrogate that the
local steps minimize (`cvar_objective`).

    G_i(theta, t) = (1 - gamma) [ t + (1/alpha) [f_i(theta) - t]_+ ] + gamma f_i(theta)

    grad_theta G = ((1 - gamma)/alpha * 1[f > t] + gamma) grad_theta f,
    d G / d t    = (1 - gamma) (1 - 1[f > t] / alpha),

with the convention 1[f > t] (PyTorch's relu'(0) = 0). On a minibatch b, f_i is estimated by the
batch-mean loss F_b(theta), as in the authors' code.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from flkit.engine import cross_entropy

IGNORE = -100  # label of the padding sample (F.cross_entropy's default ignore_index)


def G(f, t, alpha, gamma):
    """G_i(theta, t) = (1 - gamma) [t + (1/alpha) [f - t]_+] + gamma f, elementwise (floats or tensors)."""
    relu = torch.relu(f - t) if isinstance(f, torch.Tensor) or isinstance(t, torch.Tensor) else max(f - t, 0.0)
    return (1 - gamma) * (t + relu / alpha) + gamma * f


def grad_G(f, t, alpha, gamma):
    """(dG/df, dG/dt) = ((1 - gamma)/alpha 1[f > t] + gamma, (1 - gamma)(1 - 1[f > t]/alpha)).

    Floats in, floats out (float64); tensors in, tensors out (the dtype of f).
    The coefficient of grad F_b is formed as (1-gamma)/alpha + gamma in float64 and only then cast, so
    that alpha = 1 (or gamma = 1) gives exactly 1.0 and the step is bit-for-bit FedAvg's."""
    if not isinstance(f, torch.Tensor):
        above = f > t
        return ((1 - gamma) / alpha + gamma if above else gamma,
                (1 - gamma) * (1 - 1 / alpha) if above else (1 - gamma))
    alpha = torch.as_tensor(alpha, dtype=torch.float64, device=f.device)
    gamma = torch.as_tensor(gamma, dtype=torch.float64, device=f.device)
    above = f.detach() > t.detach() if isinstance(t, torch.Tensor) else f.detach() > t
    c_on, c_off = (1 - gamma) / alpha + gamma, gamma
    g_on, g_off = (1 - gamma) * (1 - 1 / alpha), (1 - gamma)
    return (torch.where(above, c_on, c_off).to(f.dtype), torch.where(above, g_on, g_off).to(f.dtype))


def cvar_loss(f: torch.Tensor, t: torch.Tensor, alpha, gamma) -> torch.Tensor:
    """A scalar whose value is G(f, t) and whose gradients are exactly `grad_G` (times grad f for theta).

    value = G.detach() + c (f - f.detach()) + g_t (t - t.detach()), c and g_t detached. Autograd on the
    literal formula of G gives the same gradients up to float rounding (tests/test_cvar.py checks both);
    this form makes alpha = 1 or gamma = 1 reproduce FedAvg bit for bit."""
    c, g_t = grad_G(f, t, alpha, gamma)
    value = G(f.detach(), t.detach(), alpha, gamma)
    return value + c * (f - f.detach()) + g_t * (t - t.detach())


def surrogate(f: torch.Tensor, t: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """c f + g_t t, elementwise, with c = (1-gamma)/alpha 1[f > t] + gamma and g_t = (1-gamma)(1 - 1[f > t]/alpha)
    held constant: its gradients in (theta, t) are exactly those of G (see `grad_G`); its value is not G,
    which training never needs (`cvar_loss` has both). A few tensor operations in the dtype of the
    inputs: in float32, (1-gamma)/1 + gamma rounds to exactly 1 for every gamma in [0, 1], so alpha = 1
    (or gamma = 1) is FedAvg bit for bit. f, t, alpha, gamma: one value per model (or scalars)."""
    above = f.detach() > t.detach()
    c = torch.where(above, (1 - gamma) / alpha + gamma, gamma)
    g_t = torch.where(above, (1 - gamma) * (1 - 1 / alpha), 1 - gamma)
    return c * f + g_t * t


def cvar_objective(logits: torch.Tensor, y: torch.Tensor, p: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Minibatch surrogate of G_i: `surrogate` of f = F_b(theta), the batch-mean cross-entropy over the
    real samples (padding ignored), with the model's own t, alpha and gamma from `p`. Written with
    batched operations, so it serves both engine trainers: for one model (logits (B, C), p["t"] a
    scalar) as the `objective` of `flkit.engine.local_train`, which vmaps it, and for all M runs at
    once (logits (M, B, C), y (M, B), p["t"] (M,) -> (M,)) as the batched objective of
    `flkit.fastsgd.FastSGD`."""
    return surrogate(cross_entropy(logits, y), p["t"], p["alpha"].detach(), p["gamma"].detach())
