"""What the pages of the Fed-CVaR-Avg chapter share (document 003): the document's setting of each experiment
(`PAPER`: Fig. 2, Figs. 3-4, Table 1) and what each profile changes (`PROFILES`), `settings` (the one engine
behind every page's `profile`, with its label when a run departs from the document), one config per run
(`run_configs`: the config dicts, and so the stored runs' keys), and what reading the runs needs on more
than one page: the rare classes, the methods' names and colours, final accuracies, curves, titles and numbers
in words."""
from __future__ import annotations

import copy
import textwrap
from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit.papers.cvar.ram import RAMS, rho_authors_k30, rho_for, rho_table1
from flkit.plots import curves

__all__ = ["FIG2_PANELS", "CAUSES", "INPUT_SCALINGS", "PAPER", "PROFILES", "settings", "validate", "method_of",
           "run_configs", "quirks_of", "variant_of", "ram_of", "batch_group", "RARE_CLASSES", "METHOD_LABELS",
           "METHOD_COLORS", "final_accuracies", "curve_panel", "legend_below", "titled", "in_words", "span"]

FIG2_PANELS = {
    # Fig. 2(a): 3 users, one class each; 2(b): user 3 gets an extra (4th) class; 2(c): 30 users, 3 classes.
    "a": dict(centers=[[1.0, 1.0], [2.0, 3.0], [2.3, 1.5]], test_frac=0.2, assignment=[[0], [1], [2]],
              rho="fig2-k3", rounds=4000),
    "b": dict(centers=[[1.0, 1.0], [2.0, 3.0], [3.0, 1.5], [2.0, 0.5]], test_frac=0.1,
              assignment=[[0], [1], [2, 3]], rho="fig2-k3", rounds=4000),
    "c": dict(centers=[[1.0, 1.0], [2.0, 3.0], [2.3, 1.5]], test_frac=0.2,
              assignment=[[0, 1]] * 24 + [[2]] * 6, rho="authors-k30", rounds=25000),
}

# Fig. 2's model variants that separate the authors' two quirks (setting `causes`): name -> (hidden units,
# zero-initialised weight matrices, softmax before the cross-entropy). "neither" is our model, "both" the
# authors' notebook model; hidden = 0 is the linear softmax model (the document's "logistic regression").
CAUSES = {"neither": (64, False, False), "zero-init": (64, True, False), "double-softmax": (64, False, True),
          "both": (64, True, True), "linear": (0, False, False), "linear-both": (0, True, True)}
# The image experiments' input scaling (setting `input_scaling`): "document" feeds [0, 1] pixels for training and
# test; "authors" trains on raw 0-255 pixels and tests on [0, 1] ones, as the authors' MNIST script does.
INPUT_SCALINGS = ("document", "authors")
VARIANT_KEYS = ("ram", "input_scaling", "causes")  # settings that make a labelled variant, not a reduction

# The document's setting of each experiment ("paper"), and what the other profiles change.
PAPER = {
    "synthetic_2d": dict(panels=["a", "b", "c"], rounds=None,  # None: each panel's own (4000, 4000, 25000)
                         n_per_class=1000, std=0.1, data_seed=11, model="cvar_2d", hidden=64,
                         epochs=10, batch_size=100, lr_theta=1e-3, lr_t=1e-3, gamma=0.1, alphas=[1.0, 0.1],
                         seeds=[0, 1, 2], eval_every=None, rho_seed=0, authors_model_seeds=[0],
                         causes=[], cause_seeds=[0, 1, 2, 3, 4]),
    "mnist": dict(dataset="mnist", settings=[0.9, 0.8], num_users=30, frequent_frac=0.9, model="cvar_mlp",
                  epochs=10, batch_size=128, lr_theta=1e-3, lr_t=1e-4, rounds=4000,
                  cells=[[0.3, 0.3]], seeds=[0, 1, 2, 3, 4], eval_every=10, t_every=1, ram="random-draw", rho_seed=0,
                  train_subset=None, test_subset=None, input_scaling="document"),
    "fmnist": dict(dataset="fashion-mnist", settings=[0.8], num_users=30, frequent_frac=0.9, model="cvar_lenet",
                   epochs=20, batch_size=128, lr_theta=1e-2, lr_t=5e-4, rounds=6000,
                   gammas=[0.0, 0.1, 0.2, 0.3, 1.0], alphas=[1.0, 0.3, 0.2, 0.1], seeds=[0, 1, 2, 3, 4],
                   eval_every=100, t_every=10, ram="authors", rho_seed=0, train_subset=None, test_subset=None,
                   input_scaling="document"),
}
PROFILES = {
    "synthetic_2d": {"paper": {}, "reduced": dict(rounds=1000),
                     "smoke": dict(rounds=15, seeds=[0], epochs=2)},
    "mnist": {"paper": {}, "reduced": dict(rounds=1000, seeds=[0, 1, 2]),
              "smoke": dict(rounds=12, seeds=[0, 1], epochs=1, eval_every=3, train_subset=3000,
                            test_subset=1000, t_every=1)},
    "fmnist": {"paper": {}, "reduced": dict(rounds=1000, seeds=[0, 1, 2]),
               "smoke": dict(rounds=6, seeds=[0, 1], epochs=1, eval_every=3, train_subset=3000,
                             test_subset=1000, gammas=[0.0, 0.1, 1.0], alphas=[1.0, 0.1])},
}


def settings(experiment: str, profile: str = "smoke", **overrides) -> dict:
    """The settings of `experiment` ("synthetic_2d", "mnist", "fmnist") under `profile` ("smoke",
    "reduced", "paper"), with `overrides` (papermill parameters; None means "the profile's value")
    winning over the profile. Adds "label": "" when the result is the document's setting, else
    "REDUCED: <what differs from the document>" ("SMOKE: ..." for the smoke profile, "VARIANT: ..." when
    only labelled variants differ (`ram`, `input_scaling`, `causes`, or more rounds than the document's); a
    reduction that also runs more rounds than the document's says so apart: "REDUCED: ...; EXTENDED: rounds=..."),
    which every figure and table title must carry.

    input_scaling (Figs. 3-4, Table 1): "document" (the default: [0, 1] pixels for training and test) or
    "authors" (a variant: training on raw 0-255 pixels, test on [0, 1] ones, as the authors' MNIST script
    feeds them, risk-aware-FL@f4a32c0 "script for Mnist.py": its users' tensors are `dataset.data.float()`,
    its test loader applies `ToTensor()`).

    causes, cause_seeds (Fig. 2): extra runs of the model variants of `CAUSES` ("zero-init", "double-softmax",
    "both", "neither", "linear", "linear-both") on every panel of `panels`, for every alpha and every seed
    of `cause_seeds`, to separate the two quirks of the authors' notebook model (default: none).

    ram (Figs. 3-4, Table 1): "authors" (the authors' 30 probabilities, normalized, `ram.rho_authors_k30`:
    Table 1's default, whose caption quotes its three smallest values) or "random-draw" (27 of the 30 drawn at
    random from `rng(rho_seed, "ram")`, the caption's three kept, `ram.rho_table1`: the default of Figs. 3-4 on
    MNIST, for which the document gives no vector and the authors' MNIST script draws one at random; "authors"
    there is a labelled sensitivity check)."""
    if experiment not in PAPER:
        raise ValueError(f"unknown experiment {experiment!r}; choose one of {sorted(PAPER)}")
    if profile not in PROFILES[experiment]:
        raise ValueError(f"unknown profile {profile!r} for {experiment}; choose one of {sorted(PROFILES[experiment])}")
    s = copy.deepcopy(PAPER[experiment])
    s.update(copy.deepcopy(PROFILES[experiment][profile]))
    unknown = sorted(k for k, v in overrides.items() if v is not None and k not in s)
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown} for {experiment}; known: {sorted(s)}")
    s.update({k: v for k, v in overrides.items() if v is not None})
    diff = [k for k in s if s[k] != PAPER[experiment][k]]
    doc = PAPER[experiment]
    longer = lambda k: k == "rounds" and s[k] is not None and doc[k] is not None and s[k] > doc[k]  # noqa: E731
    variant = all(k in VARIANT_KEYS or longer(k) for k in diff)
    kind = "SMOKE" if profile == "smoke" else "VARIANT" if variant else "REDUCED"
    said = lambda keys: ", ".join(f"{k}={_short(s[k], k)} (document: {_short(doc[k], k)})" for k in keys)  # noqa: E731
    extended = [k for k in diff if longer(k)] if kind == "REDUCED" else []   # a reduction that runs longer says so
    what = said([k for k in diff if k not in extended]) + (f"; EXTENDED: {said(extended)}" if extended else "")
    s["label"] = "" if not diff else f"{kind}: {what}"
    s["experiment"], s["profile"] = experiment, profile
    validate(s)
    return s


def validate(s: Mapping) -> None:
    """One clear ValueError, before any work, for settings outside their range: rounds, epochs, batch
    size, evaluation spacing and subsets positive integers; seeds a non-empty list of distinct integers
    >= 0; step sizes positive (eta_t >= 0); alpha in (0, 1], gamma in [0, 1], the fractions r and M in
    (0, 1); known Fig. 2 panels. `settings` and `run_configs` call it."""
    exp = s.get("experiment")
    if exp not in PAPER:
        raise ValueError(f"unknown experiment {exp!r}; choose one of {sorted(PAPER)}")
    _ints(s, "seeds", lo=0, allow_empty=False)
    for k in ("epochs", "batch_size"):
        _int_at_least(s, k, 1)
    _int_at_least(s, "rounds", 1, none_ok=exp == "synthetic_2d")   # None: each panel's own
    _int_at_least(s, "eval_every", 1, none_ok=exp == "synthetic_2d")  # None: rounds // 200
    _in_range(s, "lr_theta", 0, None, lo_open=True)
    _in_range(s, "lr_t", 0, None)
    if exp == "synthetic_2d":
        if not s["panels"] or any(p not in FIG2_PANELS for p in s["panels"]):
            raise ValueError(f"panels must be a non-empty list of {sorted(FIG2_PANELS)}, got {s['panels']!r}")
        _ints(s, "authors_model_seeds", lo=0, allow_empty=True)
        _ints(s, "cause_seeds", lo=0, allow_empty=True)
        bad = [c for c in s["causes"] if c not in CAUSES] if isinstance(s["causes"], (list, tuple)) else s["causes"]
        if bad or len(set(s["causes"])) != len(s["causes"]):
            raise ValueError(f"causes must be a list of distinct names from {list(CAUSES)}, got {s['causes']!r}")
        for k in ("n_per_class", "hidden"):
            _int_at_least(s, k, 1)
        _in_range(s, "std", 0, None, lo_open=True)
        _in_range(s, "gamma", 0, 1)
        _each(s, "alphas", 0, 1, lo_open=True)
        return
    for k in ("num_users", "t_every", "train_subset", "test_subset"):
        _int_at_least(s, k, 2 if k == "num_users" else 1, none_ok=k != "num_users")
    if s["input_scaling"] not in INPUT_SCALINGS:
        raise ValueError(f"input_scaling must be one of {INPUT_SCALINGS}, got {s['input_scaling']!r}")
    if s["ram"] not in RAMS:
        raise ValueError(f"ram must be one of {RAMS}, got {s['ram']!r}")
    if s["ram"] == "authors" and s["num_users"] != 30:
        raise ValueError(f"ram='authors' is the authors' 30-user vector; num_users must be 30, got {s['num_users']!r}")
    _in_range(s, "frequent_frac", 0, 1, lo_open=True, hi_open=True)
    _each(s, "settings", 0, 1, lo_open=True, hi_open=True)
    if exp == "mnist":
        cells = s["cells"]
        if not isinstance(cells, (list, tuple)) or not cells or any(len(c) != 2 for c in cells):
            raise ValueError(f"cells must be a non-empty list of [alpha, gamma] pairs, got {cells!r}")
        _each({"cells alpha": [c[0] for c in cells]}, "cells alpha", 0, 1, lo_open=True)
        _each({"cells gamma": [c[1] for c in cells]}, "cells gamma", 0, 1)
    else:
        _each(s, "alphas", 0, 1, lo_open=True)
        _each(s, "gammas", 0, 1)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _int_at_least(s: Mapping, k: str, lo: int, none_ok: bool = False) -> None:
    v = s[k]
    if v is None and none_ok:
        return
    if not _is_int(v) or v < lo:
        raise ValueError(f"{k} must be an integer >= {lo}{' or None' if none_ok else ''}, got {v!r}")


def _ints(s: Mapping, k: str, lo: int, allow_empty: bool) -> None:
    v = s[k]
    if (not isinstance(v, (list, tuple)) or (not v and not allow_empty)
            or not all(_is_int(x) and x >= lo for x in v) or len(set(v)) != len(v)):
        raise ValueError(f"{k} must be a {'' if allow_empty else 'non-empty '}list of distinct integers >= {lo}, "
                         f"got {v!r}")


def _number_in(v, lo, hi, lo_open: bool, hi_open: bool) -> tuple[bool, str]:
    """(v is a finite number in the interval, the interval as text)."""
    where = f"{'(' if lo_open else '['}{lo}, {'inf)' if hi is None else str(hi) + (')' if hi_open else ']')}"
    ok = (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
          and bool(np.isfinite(v)) and (v > lo if lo_open else v >= lo)
          and (hi is None or (v < hi if hi_open else v <= hi)))
    return ok, where


def _in_range(s: Mapping, k: str, lo, hi, lo_open: bool = False, hi_open: bool = False) -> None:
    ok, where = _number_in(s[k], lo, hi, lo_open, hi_open)
    if not ok:
        raise ValueError(f"{k} must be a number in {where}, got {s[k]!r}")


def _each(s: Mapping, k: str, lo, hi, lo_open: bool = False, hi_open: bool = False) -> None:
    v = s[k]
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"{k} must be a non-empty list, got {v!r}")
    for x in v:
        ok, where = _number_in(x, lo, hi, lo_open, hi_open)
        if not ok:
            raise ValueError(f"every value of {k} must be a number in {where}, got {x!r} in {v!r}")


def _short(v, key: str = "") -> str:
    if v is None:
        return "full"
    if v == "authors":
        return "the authors' 30 probabilities" if key == "ram" else "the authors' (train 0-255, test 0-1)"
    if isinstance(v, list) and len(v) > 4 and all(isinstance(i, int) for i in v):
        return f"{len(v)} seeds"
    return str(v)


def method_of(alpha: float, gamma: float) -> str:
    return "fedavg" if alpha == 1 or gamma == 1 else "fed-cvar-avg"


def run_configs(s: Mapping) -> list[dict]:
    """One JSON-able config per run for the settings `s` (from `settings`). Risk-neutral cells
    (alpha = 1 or gamma = 1) are one run, stored as FedAvg with alpha = gamma = 1: Algorithm 1 is then
    exactly FedAvg (tests/test_cvar.py::test_reduces_to_fedavg), so the eight risk-neutral cells of
    Table 1 (5 x 4 cells, 12 risk-aware) share that run."""
    validate(s)
    exp = s["experiment"]
    common = dict(doc="003", experiment=exp, model=s["model"], epochs=s["epochs"], batch_size=s["batch_size"],
                  lr_theta=s["lr_theta"], lr_t=s["lr_t"], t0=0.0, code_version=1)
    out = []
    if exp == "synthetic_2d":
        for panel in s["panels"]:
            P = FIG2_PANELS[panel]
            rounds = s["rounds"] or P["rounds"]
            runs = ([(seed, "neither") for seed in s["seeds"]] + [(seed, "both") for seed in s["authors_model_seeds"]]
                    + [(seed, v) for v in s["causes"] for seed in s["cause_seeds"]])
            for alpha in s["alphas"]:
                a, g = (1.0, 1.0) if method_of(alpha, s["gamma"]) == "fedavg" else (alpha, s["gamma"])
                for seed, variant in runs:
                    hidden, quirks = _variant_fields(variant, s["hidden"])
                    c = dict(common, panel=panel, centers=P["centers"], n_per_class=s["n_per_class"],
                             std=s["std"], data_seed=s["data_seed"], test_frac=P["test_frac"],
                             assignment=P["assignment"], hidden=hidden, authors_model=quirks,
                             rho=rho_for(P["rho"]).tolist(), rho_name=P["rho"], rounds=rounds,
                             eval_every=s["eval_every"] or max(1, rounds // 200),
                             method=method_of(a, g), alpha=a, gamma=g, seed=seed, save_params=True)
                    if c not in out:  # a cause run that is also a main run ("neither", "both") is one run
                        out.append(c)
        return out
    rho, rho_name = ram_of(s)
    if exp == "mnist":
        cells = [(1.0, 1.0)] + [tuple(c) for c in s["cells"]]
    else:
        cells = sorted({(1.0, 1.0) if method_of(a, g) == "fedavg" else (a, g)
                        for g in s["gammas"] for a in s["alphas"]}, key=lambda c: (c != (1.0, 1.0), c[1], -c[0]))
    scaling = {} if s["input_scaling"] == "document" else {"input_scaling": s["input_scaling"]}  # stored keys kept
    for r in s["settings"]:
        for a, g in cells:
            for seed in s["seeds"]:
                out.append(dict(common, **scaling, dataset=s["dataset"], num_users=s["num_users"],
                                frequent_frac=s["frequent_frac"], pattern_frac=r, rho=rho,
                                rho_name=rho_name, rounds=s["rounds"], eval_every=s["eval_every"],
                                t_every=s["t_every"],
                                train_subset=s["train_subset"], test_subset=s["test_subset"],
                                method=method_of(a, g), alpha=a, gamma=g, seed=seed))
    return [c for i, c in enumerate(out) if c not in out[:i]]   # a risk-neutral cell in `cells` is FedAvg's run


def _variant_fields(variant: str, hidden: int) -> tuple[int, bool | str]:
    """(hidden, authors_model) of a Fig. 2 run of model variant `variant` (`CAUSES`). The config field
    authors_model keeps the stored runs' values (False: our model, True: both quirks) and names a single
    quirk as a string ("zero-init", "double-softmax"); hidden = 0 is the linear softmax model."""
    h, zero, double = CAUSES[variant]
    quirks = True if zero and double else "zero-init" if zero else "double-softmax" if double else False
    return (hidden if h else 0), quirks


def quirks_of(config: Mapping) -> tuple[bool, bool]:
    """(zero_init, double_softmax) of a Fig. 2 run config (field authors_model: False, True, "zero-init",
    "double-softmax")."""
    q = config.get("authors_model", False)
    if q not in (False, True, "zero-init", "double-softmax"):
        raise ValueError(f"authors_model must be False, True, 'zero-init' or 'double-softmax', got {q!r}")
    return q is True or q == "zero-init", q is True or q == "double-softmax"


def variant_of(config: Mapping) -> str:
    """The `CAUSES` name of a Fig. 2 run config."""
    zero, double = quirks_of(config)
    linear = int(config["hidden"]) == 0
    names = {v: k for k, v in CAUSES.items()}
    return names.get((0 if linear else 64, zero, double)) or f"hidden={config['hidden']}, zero={zero}, double={double}"


def ram_of(s: Mapping) -> tuple[list[float], str]:
    """(rho, its name) of the image experiments' settings `s`: the authors' vector ("authors-k30") or
    the random draw of seed `rho_seed` ("table1@<seed>", the name the stored random-draw runs carry)."""
    if s["ram"] == "authors":
        return rho_authors_k30().tolist(), "authors-k30"
    return rho_table1(s["rho_seed"], s["num_users"]).tolist(), f"table1@{s['rho_seed']}"


_VARY = {"alpha", "gamma", "method", "seed", "pattern_frac", "frequent_frac", "rho", "rho_name", "assignment",
         "save_params"}


def batch_group(config: Mapping) -> dict:
    """Fields that runs sharing one vectorized computation must agree on (same data, model, schedule)."""
    return {k: v for k, v in config.items() if k not in _VARY}


# ================================================================================================
# Reading the runs: what more than one page needs
# ================================================================================================
RARE_CLASSES = {0.9: (9,), 0.8: (8, 9)}  # r -> the rare users' classes (pattern 1 = 8, pattern 2 = 9)
METHOD_LABELS = {"fedavg": "FedAvg (alpha = 1)", "fed-cvar-avg": "Fed-CVaR-Avg"}
METHOD_COLORS = {"fedavg": "tab:blue", "fed-cvar-avg": "tab:red"}


def final_accuracies(df: pd.DataFrame, last_frac: float = 0.0) -> pd.DataFrame:
    """Per run: overall and per-class test accuracy (in %) of the global model at the last round
    (last_frac=0), or averaged over the evaluations in the last `last_frac` of the rounds.
    Columns: the run's config fields (alpha, gamma, seed, pattern_frac, method), metric, class, value."""
    keep = df[df["metric"].isin(["test_acc", "test_acc_class"])].copy()
    T = keep["rounds"].max()
    lo = T - last_frac * T if last_frac else T
    keep = keep[keep["round"] >= lo]
    cols = [c for c in ("run_key", "method", "alpha", "gamma", "seed", "pattern_frac") if c in keep.columns]
    out = keep.groupby(cols + ["metric", "class"], as_index=False)["value"].mean()
    out["value"] *= 100
    return out


def curve_panel(ax, df: pd.DataFrame, metric: str, cls: int | None = None, smooth: float = 0.9,
                scale: float = 1.0, title: str = ""):
    """Learning curves of FedAvg and Fed-CVaR-Avg on `ax`: each run raw (faint), and the mean over seeds
    of the EMA-smoothed runs (`flkit.plots.smooth_ema`, weight `smooth` per evaluation) with a +-1 sd band."""
    sel = df[df["metric"] == metric]
    if cls is not None:
        sel = sel[sel["class"] == cls]
    sel = sel.assign(value=sel["value"] * scale)
    for (method, _), run in sel.groupby(["method", "seed"]):
        ax.plot(run["round"], run["value"], color=METHOD_COLORS[method], alpha=0.12, lw=0.6)
    curves(sel, hue="method", ax=ax, smooth=smooth, band="sd", units="seed", label_map=METHOD_LABELS,
           palette=METHOD_COLORS, order=[m for m in ("fedavg", "fed-cvar-avg") if m in set(sel["method"])])
    ax.set_title(title)
    ax.set_ylabel("")
    if scale == 100:  # accuracies in %: the sd band must not suggest values outside [0, 100]
        ax.set_ylim(-2, 102)
    return ax


def legend_below(fig, axes, ncol: int | None = None) -> None:
    """One legend of the methods under the figure (in place of one per panel), alpha and gamma as symbols; in
    `ncol` columns (default: one row)."""
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    labels = [lab.replace("alpha", "$\\alpha$").replace("gamma", "$\\gamma$") for lab in labels]
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol or len(labels))


def titled(label: str, title: str, width: int = 150) -> str:
    """A figure/table title that starts with the profile's label ("REDUCED: ...") when there is one."""
    return "\n".join(textwrap.wrap(label, width) + [title]) if label else title


def in_words(names) -> str:
    """"a", "a and b", "a, b and c"; "none" when there is no name."""
    names = [str(n) for n in names]
    if not names:
        return "none"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def span(values, decimals: int = 1, signed: bool = False) -> str:
    """The range of the finite `values` as text, "lo to hi" (one number when both round alike), rounded
    to `decimals`, with a sign when `signed`; "n/a" when no value is finite."""
    v = np.asarray(values, dtype=float).reshape(-1)
    v = v[np.isfinite(v)]
    if not v.size:
        return "n/a"
    sign = "+" if signed else ""
    fmt = lambda x: f"{round(float(x), decimals) + 0.0:{sign}.{decimals}f}"  # noqa: E731 (+ 0.0: no "-0.0")
    lo, hi = fmt(v.min()), fmt(v.max())
    return lo if lo == hi else f"{lo} to {hi}"
