"""The pages' settings checked before any work: one clear ValueError that names the bad value and what is
allowed. :func:`check_profile` walks a profile (nested dicts) and checks every setting by its key (rounds,
seeds, probabilities, step sizes, ...); the small checkers below are what the experiment functions call
on their own arguments. Used by the availability pages and by the MIFA chapter (`flkit.papers.mifa`)."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["positive_int", "seeds", "probabilities", "positive", "momentum", "check_profile", "with_overrides"]


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def positive_int(v, name: str, low: int = 1) -> int:
    """v as an int >= low (bools and floats are refused)."""
    if not _is_int(v) or int(v) < low:
        raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    return int(v)


def seeds(v, name: str = "seeds", distinct: bool = True) -> list[int]:
    """A non-empty list of ints >= 0, distinct unless `distinct` is False (one seed per run of a grid)."""
    if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__iter__"):
        raise ValueError(f"{name} must be a non-empty list of distinct ints >= 0, got {v!r}")
    out = list(v)
    if not out:
        raise ValueError(f"{name} is empty: give at least one seed (an int >= 0)")
    bad = [s for s in out if not _is_int(s) or int(s) < 0]
    if bad:
        raise ValueError(f"{name} must hold ints >= 0, got {bad[0]!r} in {out!r}")
    if distinct and len(set(int(s) for s in out)) != len(out):
        raise ValueError(f"{name} has repeated seeds: {out!r}")
    return [int(s) for s in out]


def _reals(v, name: str) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or a list of numbers, got {v!r}") from None
    if a.size == 0:
        raise ValueError(f"{name} is empty: give at least one value")
    return a


def _in(v, name: str, lo: float, hi: float, lo_open: bool, hi_open: bool) -> np.ndarray:
    a = _reals(v, name)
    ok = np.isfinite(a) & ((a > lo) if lo_open else (a >= lo)) & ((a < hi) if hi_open else (a <= hi))
    if not ok.all():
        bad = float(a[np.flatnonzero(~ok)[0]])
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{name} must lie in {interval}, got {bad!r}" + (f" in {v!r}" if a.size > 1 else ""))
    return a


def probabilities(v, name: str = "p") -> np.ndarray:
    """One or more probabilities in (0, 1] (flattened)."""
    return _in(v, name, 0.0, 1.0, True, False)


def positive(v, name: str) -> np.ndarray:
    """One or more finite numbers > 0 (flattened)."""
    return _in(v, name, 0.0, math.inf, True, True)


def _non_negative(v, name):
    return _in(v, name, 0.0, math.inf, False, True)


def momentum(v, name: str = "beta") -> np.ndarray:
    """One or more momentum parameters in [0, 1) (flattened)."""
    return _in(v, name, 0.0, 1.0, False, True)


def _correlation(v, name):
    return _in(v, name, -1.0, 1.0, True, True)


def _ints(v, name):
    vals = list(v) if isinstance(v, (list, tuple)) else [v]
    if not vals:
        raise ValueError(f"{name} is empty: give at least one int >= 1")
    for x in vals:
        positive_int(x, name)


def _count_or_seeds(v, name):
    """An int >= 1 (how many) or a list of seeds."""
    positive_int(v, name) if _is_int(v) else seeds(v, name)


def _rounds(v, name):
    """An int >= 1, or a dict (e.g. p -> rounds) of them."""
    for k, x in (v.items() if isinstance(v, Mapping) else [(None, v)]):
        positive_int(x, name if k is None else f"{name}[{k!r}]")


def _optional_int(v, name):
    if v is not None:
        positive_int(v, name)


def _fractions_below_one(v, name):
    for k, x in (v.items() if isinstance(v, Mapping) else [(None, v)]):
        _in(x, name if k is None else f"{name}[{k!r}]", 0.0, 1.0, True, True)


# setting name -> its check (any nesting level); settings not listed (cases, model, ...) are not checked here
RULES = {
    "rounds": _rounds, "seeds": _count_or_seeds, "problems": _count_or_seeds,
    **{k: positive_int for k in ("chains", "draws", "mc_draws", "runs", "t0", "starts", "maxiter", "every", "T",
                                 "draws_per_run", "rounds_per_n", "fedpgd_rounds", "clients", "per_round",
                                 "local_epochs", "batch_size", "M", "n", "dim", "enumerate_max_N", "steps",
                                 "hours_per_day", "days_per_week", "weeks")},
    "burn_in": lambda v, name: positive_int(v, name, 0), "seed": lambda v, name: positive_int(v, name, 0),
    **{k: _ints for k in ("ns", "Ns", "lags", "budgets")},
    **{k: _optional_int for k in ("subset", "train_subset", "test_subset")},
    **{k: probabilities for k in ("p_values", "ps", "pi", "pi_min", "pi_max", "pi_const", "train_fraction", "fracs",
                                  "error_fracs", "spread_grid")},
    **{k: positive for k in ("eta", "etas", "eta0", "lr", "mu", "L", "dirichlet", "a")},
    **{k: _non_negative for k in ("heterogeneity", "sizes_sigma")},
    "beta": momentum, "betas": momentum, "lams": _correlation, "eps_rel": _fractions_below_one,
}
_DICT_VALUED = ("rounds", "eps_rel")      # settings whose value may be a dict of values (p -> rounds, ...)


def check_profile(cfg: Mapping, where: str) -> Mapping:
    """Check every setting of `cfg` (nested dicts walked) whose key has a rule in RULES; the error names
    the setting's path, e.g. "markov profile 'smoke': ac.rounds must be an int >= 1, got 0". Returns cfg."""
    def walk(d, path):
        for k, v in d.items():
            name = f"{path}{k}"
            if isinstance(v, Mapping) and k not in _DICT_VALUED:
                walk(v, name + ".")
            elif k in RULES:
                try:
                    RULES[k](v, name)
                except ValueError as e:
                    raise ValueError(f"{where}: {e}") from None
    walk(cfg, "")
    return cfg


def with_overrides(cfg: dict, overrides: Mapping, where: str) -> dict:
    """cfg with its top-level settings replaced by the overrides that are not None (a notebook's
    parameters), then checked (:func:`check_profile`); an unknown setting is an error."""
    unknown = sorted(set(overrides) - set(cfg))
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {unknown}; the profile has {sorted(cfg)}")
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    return check_profile(cfg, where)
