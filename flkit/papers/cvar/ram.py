"""Random access model (RAM) distributions of document 003: rho_i, the probability that the RAM relays
user i in a round (i.i.d. across rounds; `flkit.participation.random_access_indices` draws from them)."""
from __future__ import annotations

import numpy as np

from flkit.seeding import rng

RHO_FIG2_K3 = (0.5, 0.4, 0.1)               # Fig. 2(a), 2(b) (Sec. 3.1 of the document)
TABLE1_RARE_RHO = (0.0107, 0.0078, 0.0053)  # Table 1 caption: the three least available users


def rho_fig2_k30() -> np.ndarray:
    """RAM distribution of Fig. 2(c), K = 30, sorted descending.

    The authors hard-code a vector (0.0735 ... 0.0053, six rare users totalling about 0.075) in their
    notebook (risk-aware-FL@f4a32c0, ``motivate example 3 classes 30 users.ipynb``); the document only
    shows it as a bar plot. We construct one with the same ends and the same rare mass: the 24 frequent
    users rho_j = a + (0.0735 - a)(1 - j/23)^2, j = 0..23, with a chosen so that they total 0.925; the
    6 rare users equally spaced from 0.0197 down to 0.0053 (total 0.075). Exact sum 1, strictly the rare
    six below every frequent user."""
    j = np.arange(24)
    x2 = (1 - j / 23) ** 2
    top = 0.0735
    a = (0.925 - top * x2.sum()) / (24 - x2.sum())
    frequent = a + (top - a) * x2
    rare = np.linspace(0.0197, 0.0053, 6)
    rho = np.concatenate([frequent, rare])
    return rho / rho.sum()


def rho_table1(seed: int = 0, num_users: int = 30, rare=TABLE1_RARE_RHO, max_draws: int = 1000) -> np.ndarray:
    """RAM distribution of Table 1 (also used for Figs. 3-4, for which the document gives none).

    The last three users get the caption's probabilities 0.0107, 0.0078, 0.0053. The others are drawn as
    the authors draw theirs (risk-aware-FL@f4a32c0, both scripts: `rand(K)` normalized, sorted
    descending), from rng(seed, "ram"): K uniforms, sorted descending, the largest K - 3 kept and rescaled to total
    1 - 0.0238, so that all K sum to 1. Draws in which a kept user would fall below 0.0107 are
    rejected (the caption's three are the least available users) and the next draw of the same stream
    is taken (about one draw in four is accepted; seed 0: the fifth)."""
    rare = np.asarray(rare, dtype=float)
    k = len(rare)
    g = rng(seed, "ram")
    for _ in range(max_draws):
        u = np.sort(g.random(num_users))[::-1][: num_users - k]
        frequent = u / u.sum() * (1.0 - rare.sum())
        if frequent[-1] >= rare.max():
            return np.concatenate([frequent, rare])
    raise RuntimeError(f"no accepted draw in {max_draws} tries")


def rho_for(name: str, seed: int = 0) -> np.ndarray:
    """RAM distribution by name: "fig2-k3", "fig2-k30", "table1" (see `rho_table1`)."""
    if name == "fig2-k3":
        return np.asarray(RHO_FIG2_K3, dtype=float)
    if name == "fig2-k30":
        return rho_fig2_k30()
    if name == "table1":
        return rho_table1(seed)
    raise ValueError(f"unknown RAM distribution {name!r}")
