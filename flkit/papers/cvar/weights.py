r"""How much weight the CVaR objective gave each user group, read off the stored threshold trajectories (no
new runs).

In round n the relayed user I_n takes S_n local steps (H epochs of ceil(N_I / B) minibatches); in A_n of them
the batch loss F_b is above t. Each step moves t by -eta_t (1 - gamma) (1 - 1[F_b > t] / alpha), so

    t_{n+1} - t_n = eta_t (1 - gamma) (A_n / alpha - S_n),   A_n = alpha ((t_{n+1} - t_n) / (eta_t (1 - gamma)) + S_n),

a whole number in [0, S_n] (checked: the reading fails on a trajectory that is not Algorithm 1's). An above
step multiplies grad F_b by (1 - gamma) / alpha + gamma, any other step by gamma, so the round's gradient
weight, in FedAvg's units (1 per step), is

    W_n = gamma S_n + (1 - gamma) A_n / alpha.

A user group's share of the training signal is the sum of W_n over the rounds it was relayed, over the sum of
all W_n; FedAvg's share is the same with S_n. The multiplier of a group is its sum of W_n over its sum of S_n:
at most (1 - gamma) / alpha + gamma (2.63 at alpha = gamma = 0.3), and 1 on average over all steps when t
neither rises nor falls.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from flkit import partition
from flkit.papers.cvar import runs
from flkit.papers.cvar.common import run_configs
from flkit.participation import random_access_indices

__all__ = ["above_steps", "round_weights", "group_weights", "after_rare", "runs_of", "summary", "reading",
           "for_reading"]


def above_steps(t: np.ndarray, steps: np.ndarray, alpha: float, gamma: float, lr_t: float) -> np.ndarray:
    """A_n of every round from the threshold after each round (t: (T + 1,), t[0] the initial value) and the
    rounds' step counts S_n (T,). ValueError when a round's A_n is not a whole number in [0, S_n]."""
    t, steps = np.asarray(t, float), np.asarray(steps, float)
    if len(t) != len(steps) + 1:
        raise ValueError(f"t has {len(t)} values for {len(steps)} rounds; need one more (t before round 1)")
    if gamma == 1 or lr_t == 0:                 # t never moves: every step has weight 1 (gamma = 1) or gamma
        return np.zeros_like(steps)
    a = alpha * (np.diff(t) / (lr_t * (1 - gamma)) + steps)
    # t is a float32 updated once per step and stored with 8 significant digits: a round's A_n is known to
    # within S_n float32 roundings of t plus the storage rounding, in units of one step of t
    size = np.maximum(np.abs(t[1:]), np.abs(t[:-1]))
    slack = (steps * np.finfo(np.float32).eps + 1e-7) * size * alpha / (lr_t * (1 - gamma)) + 1e-6
    if (slack >= 0.5).any():
        raise ValueError("t is too large against its step for a whole number of above-t steps to be read")
    off = (np.abs(a - np.round(a)) > slack) | (a < -0.5) | (a > steps + 0.5)
    if off.any():
        n = int(np.flatnonzero(off)[0])
        raise ValueError(f"{off.sum()} of {len(a)} rounds give no whole number of above-t steps in [0, S_n] "
                         f"(round {n + 1}: {a[n]:.3f} of {steps[n]:.0f}): not Algorithm 1's trajectory")
    return np.round(a)


def round_weights(t, steps, alpha: float, gamma: float, lr_t: float) -> np.ndarray:
    """W_n, the gradient weight of every round in FedAvg's units."""
    a = above_steps(t, steps, alpha, gamma, lr_t)
    return gamma * np.asarray(steps, float) + (1 - gamma) * a / alpha if gamma < 1 else np.asarray(steps, float)


def _ratio(num: np.ndarray, den: np.ndarray) -> float:
    """sum(num) / sum(den); NaN when there is nothing to sum (a group never relayed in the window)."""
    return float(num.sum() / den.sum()) if den.sum() > 0 else float("nan")


def _user_steps(config: Mapping) -> np.ndarray:
    """S of each user of a stored image run: H ceil(N_i / B), from its split."""
    _, ytr, _, _, _ = runs._image_data(config["dataset"], config["train_subset"], config["test_subset"], "cpu")
    p = partition.rare_users(ytr, config["num_users"], config["frequent_frac"], config["pattern_frac"],
                             seed=config["seed"])
    return config["epochs"] * -(-np.asarray(p.sizes) // config["batch_size"])


def _reading(config: Mapping, table: pd.DataFrame):
    """(relayed user of each round, S_n, A_n, W_n) of one stored run."""
    if config.get("t_every", 1) != 1:
        raise ValueError(f"run {config.get('seed')}: t stored every {config['t_every']} rounds; need every round")
    T = int(config["rounds"])
    t = table[table["metric"] == "t"].sort_values("round")
    if list(t["round"]) != list(range(T + 1)):
        raise ValueError(f"run {config.get('seed')}: t is not stored at rounds 0..{T}")
    users = random_access_indices(config["rho"], T, config["seed"])   # round n (0-based) trains users[n]
    steps = _user_steps(config)[users].astype(float)
    t = t["value"].to_numpy()
    a = above_steps(t, steps, config["alpha"], config["gamma"], config["lr_t"])
    return users, steps, a, round_weights(t, steps, config["alpha"], config["gamma"], config["lr_t"])


def after_rare(runs: Sequence[tuple[Mapping, pd.DataFrame]]) -> pd.DataFrame:
    """Per stored run: the fraction of steps above t in the frequent users' rounds that follow a rare user's
    round, and in their other rounds. The relayed model has just trained on the rare classes only, so the next
    user's loss starts high: extra weight then goes to re-learning the frequent classes."""
    rows = []
    for config, table in runs:
        users, steps, a, _ = _reading(config, table)
        F = int(np.rint(config["frequent_frac"] * config["num_users"]))
        frequent, after = users < F, np.r_[False, users[:-1] >= F]
        rows.append(dict(method=config["method"], seed=config["seed"], r=config.get("pattern_frac"),
                         after_rare=_ratio(a[frequent & after], steps[frequent & after]),
                         other=_ratio(a[frequent & ~after], steps[frequent & ~after])))
    return pd.DataFrame(rows)


def group_weights(runs: Sequence[tuple[Mapping, pd.DataFrame]], last_rounds: int | None = None) -> pd.DataFrame:
    """Per stored run (config, tidy table with a 't' row every round) and user group (frequent, rare, all): the
    rounds it was relayed, FedAvg's and this run's share of the gradient weight, the multiplier and the
    fraction of its steps above t, over all rounds or the last `last_rounds`."""
    rows = []
    for config, table in runs:
        users, steps, a, w = _reading(config, table)
        T = len(users)
        keep = np.arange(T) >= (T - last_rounds if last_rounds else 0)
        F = int(np.rint(config["frequent_frac"] * config["num_users"]))
        for group, mask in (("frequent", users < F), ("rare", users >= F), ("all", users >= 0)):
            m = mask & keep
            rows.append(dict(method=config["method"], alpha=config["alpha"], gamma=config["gamma"],
                             seed=config["seed"], r=config.get("pattern_frac"), group=group, rounds=int(m.sum()),
                             fedavg_share=steps[m].sum() / steps[keep].sum(), share=w[m].sum() / w[keep].sum(),
                             multiplier=_ratio(w[m], steps[m]), above=_ratio(a[m], steps[m])))
    return pd.DataFrame(rows)


def runs_of(s: Mapping) -> list[tuple[dict, pd.DataFrame]]:
    """(config, tidy table) of every stored run of the image settings `s` (none computed)."""
    store = runs.store_for(s)
    return [(c, store.load(c)) for c in run_configs(s) if store.done(c)]


def summary(df: pd.DataFrame, columns=("fedavg_share", "share", "multiplier", "above")) -> pd.DataFrame:
    """Mean and standard error over seeds of `group_weights` (or `after_rare`) columns, per method, r and group;
    shares and fractions in %."""
    keys = [k for k in ("method", "r", "group") if k in df]
    cols = [c for c in columns if c in df]
    pct = df.assign(**{c: 100 * df[c] for c in cols if c != "multiplier"})
    g = pct.groupby(keys, sort=False)[cols]
    out = g.mean().join(g.sem(ddof=1).fillna(0.0).add_suffix("_se"))
    return out.assign(seeds=g.size()).reset_index()


def reading(shares: pd.DataFrame, after: pd.DataFrame, alpha: float, gamma: float) -> dict[str, str]:
    """The page's numbers in words, from `summary` of `group_weights` (shares) and of `after_rare` (after),
    Fed-CVaR-Avg's rows, one clause per r ("n/a" where a group was never relayed)."""
    cv = shares[shares["method"] != "fedavg"]
    pick = lambda g: cv[cv["group"] == g].set_index("r")  # noqa: E731
    rs = sorted(cv["r"].unique(), reverse=True)
    each = lambda fmt: " and ".join(f"{fmt(r)} (r = {100 * r:.0f} %)" for r in rs)  # noqa: E731
    num = lambda v, f, unit="": "n/a" if pd.isna(v) else format(v, f) + unit  # noqa: E731
    af = (after[after["method"] != "fedavg"] if "method" in after else after).set_index("r")
    al, ra = pick("all"), pick("rare")
    return {
        "w_above_all": each(lambda r: num(al.loc[r, "above"], ".1f", " %")),
        "w_mult_all": each(lambda r: num(al.loc[r, "multiplier"], ".2f")),
        "w_mult_rare": each(lambda r: num(ra.loc[r, "multiplier"], ".2f")),
        "w_max": f"{(1 - gamma) / alpha + gamma:.2f}",
        "w_alpha": f"{100 * alpha:.0f} %",
        "w_share": each(lambda r: f"from {num(ra.loc[r, 'fedavg_share'], '.1f', ' %')} to "
                                  f"{num(ra.loc[r, 'share'], '.1f', ' %')}"),
        "w_after": each(lambda r: f"{num(af.loc[r, 'after_rare'], '.0f', ' %')} against "
                                  f"{num(af.loc[r, 'other'], '.0f', ' %')}"),
    }


_HEADERS = {"fedavg_share": "FedAvg's share (%)", "share": "share (%)", "multiplier": "weight per step (x FedAvg)",
            "above": "steps above t (%)", "after_rare": "after a rare user's round (%)", "other": "other rounds (%)"}


def for_reading(summary_df: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """A `summary` as the page shows it: mean ± standard error in one cell, headers in words."""
    out = summary_df[[k for k in ("method", "r", "group") if k in summary_df]].copy()
    if "r" in out:
        out["r"] = [f"{100 * r:.0f} %" for r in out["r"]]
    for col, head in _HEADERS.items():
        if col in summary_df:
            out[head] = [f"{m:.{decimals}f} ± {e:.{decimals}f}" if pd.notna(m) else "n/a"
                         for m, e in zip(summary_df[col], summary_df[f"{col}_se"])]
    return out.assign(seeds=summary_df["seeds"])
