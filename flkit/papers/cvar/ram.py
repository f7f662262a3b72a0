"""Random access model (RAM) distributions of document 003: rho_i, the probability that the RAM relays
user i in a round (i.i.d. across rounds; `flkit.participation.random_access_indices` draws from them)."""
from __future__ import annotations

import numpy as np

from flkit.seeding import rng

RHO_FIG2_K3 = (0.5, 0.4, 0.1)               # Fig. 2(a), 2(b) (Sec. 3.1 of the document)
TABLE1_RARE_RHO = (0.0107, 0.0078, 0.0053)  # Table 1 caption: the three least available users

# The authors' 30 user probabilities, as printed in their notebook (public repository
# PeriklisTheodoropoulos/risk-aware-FL, commit f4a32c0d4d716663f9efe09d83c5c93e2483267e, file
# "motivate example 3 classes 30 users.ipynb", the list `user_probs`; the notebook draws the relayed user
# with `random.choices(weights=user_probs)`, which normalises them). Printed sum: 1.0003. The last three
# are exactly Table 1's caption (TABLE1_RARE_RHO).
AUTHORS_RHO_K30 = (0.0735, 0.0692, 0.0645, 0.0584, 0.0557, 0.0547, 0.0537, 0.0462, 0.0445, 0.0422,
                   0.0417, 0.0333, 0.0327, 0.0275, 0.0267, 0.0261, 0.0258, 0.0244, 0.0241, 0.0240,
                   0.0215, 0.0185, 0.0181, 0.0180, 0.0176, 0.0170, 0.0169, 0.0107, 0.0078, 0.0053)
AUTHORS_RHO_SOURCE = ("PeriklisTheodoropoulos/risk-aware-FL@f4a32c0d4d716663f9efe09d83c5c93e2483267e, "
                      "'motivate example 3 classes 30 users.ipynb' (user_probs)")
RAMS = ("authors", "random-draw")           # the `ram` setting of Figs. 3-4 and Table 1


def rho_authors_k30() -> np.ndarray:
    """The authors' 30 RAM probabilities (`AUTHORS_RHO_K30`, printed sum 1.0003) divided by their sum, so
    that they sum to 1 (the law the authors' `random.choices(weights=...)` samples from); order kept
    (descending, user 30 the least available). Used for Fig. 2(c), Figs. 3-4 and Table 1."""
    rho = np.asarray(AUTHORS_RHO_K30, dtype=np.float64)
    return rho / rho.sum()


def rho_table1(seed: int = 0, num_users: int = 30, rare=TABLE1_RARE_RHO, max_draws: int = 1000) -> np.ndarray:
    """A RANDOM DRAW of a Table 1 RAM (the sensitivity variant `ram="random-draw"`; the default is the
    authors' vector, `rho_authors_k30`).

    The last three users get the caption's probabilities 0.0107, 0.0078, 0.0053. The others are drawn as
    the authors' MNIST and Fashion-MNIST scripts draw theirs (risk-aware-FL@f4a32c0: `rand(K)` normalized,
    sorted descending), from rng(seed, "ram"): K uniforms, sorted descending, the largest K - 3 kept and
    rescaled to total 1 - 0.0238, so that all K sum to 1. Draws in which a kept user would fall below 0.0107
    are rejected (the caption's three are the least available users) and the next draw of the same stream
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
    """RAM distribution by name: "fig2-k3" (rho = 0.5, 0.4, 0.1), "authors-k30" (`rho_authors_k30`),
    "random-draw" (`rho_table1(seed)`)."""
    if name == "fig2-k3":
        return np.asarray(RHO_FIG2_K3, dtype=float)
    if name == "authors-k30":
        return rho_authors_k30()
    if name == "random-draw":
        return rho_table1(seed)
    raise ValueError(f"unknown RAM distribution {name!r}; choose one of 'fig2-k3', 'authors-k30', 'random-draw'")
