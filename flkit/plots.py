"""Plotting helpers for the notebooks: learning curves over seeds, smoothing, the document's numbers
beside ours.

All functions take the tidy tables of `flkit.results` (one row per run x round x metric) and draw on a
matplotlib Axes (a new figure when `ax` is None), returning it, so a notebook cell stays one line::

    ax = plots.curves(df, metric="test_acc", hue="method", band="sd", smooth=0.6)
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

__all__ = ["curves", "figure", "reference_table", "save", "smooth_ema", "smooth_window"]

UNIT_COLUMNS = ("run_key", "run", "seed")  # columns that tell the runs of one curve apart


BOOK_RC = {"font.size": 9, "axes.titlesize": 9.5, "axes.labelsize": 9, "legend.fontsize": 8.5,
           "xtick.labelsize": 8.5, "ytick.labelsize": 8.5, "figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3}


def figure(rows: int = 1, cols: int = 1, *, width: float = 7.0, row_height: float = 2.7, **kw):
    """A figure in the book's style, sized for its text column (about 750 px): at most three panels in a
    row (more raise ValueError: use a grid), fonts of 8.5-9.5 pt. Returns (fig, axes) as plt.subplots."""
    if cols > 3:
        raise ValueError(f"at most 3 panels in a row are legible at the book's width, got cols={cols}; use rows")
    plt.rcParams.update(BOOK_RC)
    return plt.subplots(rows, cols, figsize=(width, row_height * rows), layout="constrained", squeeze=False, **kw)


# --------------------------------------------------------------------------------------------------
# smoothing


def _as_float_array(values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-d sequence of values, got shape {arr.shape}")
    return arr


def _like(values, out: np.ndarray):
    return pd.Series(out, index=values.index, name=values.name) if isinstance(values, pd.Series) else out


def smooth_ema(values, weight: float):
    """TensorBoard's debiased exponential moving average.

    m_0 = 0,  m_t = w * m_{t-1} + (1 - w) * x_t,  s_t = m_t / (1 - w**t)

    where t counts the finite values seen so far. Dividing by (1 - w**t) removes the pull towards the
    zero start (so s_1 = x_1). As in TensorBoard, non-finite values are passed through unchanged and
    skipped by the average, and a constant sequence is returned exactly. weight in [0, 1); 0 = no
    smoothing. Returns an array (a Series with the same index for a Series)."""
    if isinstance(weight, bool) or not 0.0 <= float(weight) < 1.0:
        raise ValueError(f"EMA weight must be in [0, 1), got {weight!r}")
    w = float(weight)
    x = _as_float_array(values)
    out = x.copy()
    if len(x) and not np.all(x == x[0]):
        last, t = 0.0, 0
        for i, v in enumerate(x):
            if not np.isfinite(v):
                continue
            last = w * last + (1.0 - w) * v
            t += 1
            out[i] = last / (1.0 - w**t)
    return _like(values, out)


def smooth_window(values, k: int):
    """Trailing moving average over the last k values, s_t = mean(x_{t-k+1..t}), with shorter windows
    at the start (so the length is kept and no future value is used). k=1: no smoothing. Non-finite
    values are skipped inside a window and kept in place."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"window length k must be a positive int, got {k!r}")
    x = _as_float_array(values)
    s = pd.Series(np.where(np.isfinite(x), x, np.nan))
    out = s.rolling(int(k), min_periods=1).mean().to_numpy()
    out = np.where(np.isfinite(x), out, x)
    return _like(values, out)


def _smoother(smooth):
    """None | float in [0, 1) (EMA weight) | int >= 1 (window) | ("ema", w) | ("window", k)."""
    if smooth is None:
        return None
    if isinstance(smooth, tuple) and len(smooth) == 2 and smooth[0] in ("ema", "window"):
        kind, arg = smooth
        return (lambda v: smooth_ema(v, arg)) if kind == "ema" else (lambda v: smooth_window(v, arg))
    if isinstance(smooth, bool):
        raise ValueError("smooth must be None, an EMA weight in [0, 1) or a window length >= 1")
    if isinstance(smooth, (int, np.integer)):
        smooth_window([], int(smooth))  # validates
        return lambda v: smooth_window(v, int(smooth))
    if isinstance(smooth, float):
        smooth_ema([], smooth)
        return lambda v: smooth_ema(v, smooth)
    raise ValueError(f"smooth must be None, an EMA weight in [0, 1) or a window length >= 1, got {smooth!r}")


# --------------------------------------------------------------------------------------------------
# curves


def curves(df: pd.DataFrame, x: str = "round", y: str = "value", hue: str | None = "method",
           ax: plt.Axes | None = None, band: str | None = "sd", log: bool = False, smooth=None,
           label_map: Mapping[Any, str] | None = None, *, metric: str | None = None,
           units: str | Sequence[str] | None = None, palette: Mapping | Sequence | None = None,
           order: Sequence | None = None) -> plt.Axes:
    """Mean curve over runs (seeds) per `hue` value, with a band.

    band: "sd" (mean +- standard deviation over runs, ddof=1; no band for a single run), "minmax"
    (pointwise min..max) or None. smooth: None, an EMA weight in [0, 1) (`smooth_ema`) or an int window
    (`smooth_window`), applied to each run before averaging. metric: keep only that metric (needed when
    the frame holds several). units: the column(s) that identify a run within a hue value; default: the
    ones of "run_key", "run", "seed" present.

    A run with any NaN/inf value is a diverged run: it is left out of the mean and band and drawn as an
    'x' at the top of the axes at its round of divergence; the legend says "<label> (diverged)" (with
    "k of n runs" when only some runs of that label diverged).
    """
    data = df
    if metric is not None:
        if "metric" not in data.columns:
            raise KeyError("metric= was given but the frame has no 'metric' column")
        data = data[data["metric"] == metric]
        if data.empty:
            raise ValueError(f"no rows with metric == {metric!r}; metrics present: {sorted(df['metric'].unique())}")
    elif "metric" in data.columns and data["metric"].nunique() > 1:
        raise ValueError(f"the frame holds several metrics {sorted(data['metric'].unique())}; pass metric=...")
    for col in [x, y] + ([hue] if hue is not None else []):
        if col not in data.columns:
            raise KeyError(f"column {col!r} not in the frame (columns: {list(data.columns)})")
    if units is None:
        units = [c for c in UNIT_COLUMNS if c in data.columns and c != hue]
    else:
        units = [units] if isinstance(units, str) else list(units)
    if band not in ("sd", "minmax", None):
        raise ValueError(f"band must be 'sd', 'minmax' or None, got {band!r}")
    smoother = _smoother(smooth)
    label_map = dict(label_map or {})
    if ax is None:
        _, ax = plt.subplots()
    what = metric if metric is not None else (
        str(data["metric"].iloc[0]) if "metric" in data.columns and len(data) else y)

    if hue is None:
        groups = [(None, data)]
    else:
        levels = list(order) if order is not None else list(pd.unique(data[hue]))
        groups = [(h, data[data[hue] == h]) for h in levels]
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    show_legend = hue is not None

    for i, (h, g) in enumerate(groups):
        if isinstance(palette, Mapping):
            color = palette.get(h, cycle[i % len(cycle)])
        elif palette is not None:
            color = palette[i % len(palette)]
        else:
            color = cycle[i % len(cycle)]
        label = label_map.get(h, what if h is None else str(h))
        runs = list(g.groupby(units, sort=False, dropna=False)) if units else [(None, g)]
        finite, diverged_at = [], []
        for _, r in runs:
            s = pd.to_numeric(r.set_index(x)[y], errors="coerce").astype(float).sort_index()
            if s.index.duplicated().any():
                raise ValueError(
                    f"several rows per {x!r} within one run of {label!r}; filter the frame (e.g. one "
                    f"metric, no per-class rows) or name the run columns with units=..."
                )
            bad = ~np.isfinite(s.to_numpy())
            if bad.any():
                diverged_at.append(s.index[bad][0])
            else:
                finite.append(smoother(s) if smoother else s)
        if finite:
            m = pd.concat(finite, axis=1)
            xs = m.index.to_numpy()
            mean = m.mean(axis=1).to_numpy()
            line_label = label
            if diverged_at:
                line_label = f"{label} ({len(finite)} of {len(runs)} runs)"
            ax.plot(xs, mean, color=color, label=line_label)
            lo = hi = None
            if band == "sd" and m.shape[1] > 1:
                sd = m.std(axis=1, ddof=1).to_numpy()
                lo, hi = mean - sd, mean + sd
            elif band == "minmax" and m.shape[1] > 1:
                lo, hi = m.min(axis=1).to_numpy(), m.max(axis=1).to_numpy()
            if lo is not None:
                ax.fill_between(xs, lo, hi, color=color, alpha=0.2, linewidth=0)
        if diverged_at:
            show_legend = True
            div_label = f"{label} (diverged)"
            if finite:
                div_label += f": {len(diverged_at)} of {len(runs)} runs"
            ax.plot(diverged_at, [0.97] * len(diverged_at), linestyle="none", marker="x", markersize=8,
                    markeredgewidth=2, color=color, label=div_label, transform=ax.get_xaxis_transform(),
                    clip_on=False)

    if log:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(what)
    if show_legend:
        ax.legend()
    return ax


# --------------------------------------------------------------------------------------------------
# the document's numbers beside ours


def reference_table(ours: pd.DataFrame, reference: pd.DataFrame, on: str | Sequence[str] | None = None, *,
                    value: str = "value", reference_value: str | None = None, ours_label: str = "ours",
                    reference_label: str = "document", decimals: int | None = None) -> pd.DataFrame:
    """One row per number the document reports: the document's value, ours, and the difference.

    ours: our results, possibly several runs per row of `reference` (seeds), which are averaged.
    reference: the document's numbers with the identifying columns (`on`) and a value column
    (`reference_value`, default `value`); other columns of reference (say "source": "Table 2") are
    carried along. on: default = reference's columns that ours also has, except the value columns.

    Columns of the result: on..., the carried columns, "document" (the document's number), "ours" (our
    mean over runs), "ours sd" (ddof=1), "n" (our runs), "difference" = ours - document, and "diverged
    runs" when some of ours are NaN/inf (then "ours" is NaN: a diverged run is not averaged away).
    Rows follow the reference; a reference row we have no result for gets NaN."""
    ref_value = reference_value or value
    if ref_value not in reference.columns:
        raise KeyError(f"reference has no column {ref_value!r} (columns: {list(reference.columns)})")
    if value not in ours.columns:
        raise KeyError(f"ours has no column {value!r} (columns: {list(ours.columns)})")
    if on is None:
        on = [c for c in reference.columns if c in ours.columns and c not in (value, ref_value)]
    else:
        on = [on] if isinstance(on, str) else list(on)
    if not on:
        raise ValueError("no column to match the reference rows with ours; pass on=[...]")
    for c in on:
        if c not in reference.columns or c not in ours.columns:
            raise KeyError(f"column {c!r} of on= must be in both tables")
    if reference.duplicated(on).any():
        raise ValueError(f"reference has several rows for the same {on}: "
                         f"{reference[reference.duplicated(on, keep=False)]}")
    doc = reference_label
    if ours_label in (doc, "n", "difference") or doc in ("n", "difference"):
        raise ValueError("ours_label and reference_label must differ from each other and from 'n'/'difference'")
    try:
        ref_vals = pd.to_numeric(reference[ref_value], errors="raise").astype(float)
    except (ValueError, TypeError) as e:
        raise ValueError(f"the document's values must be numbers: {e}") from None

    vals = pd.to_numeric(ours[value], errors="coerce").astype(float)
    grouped = pd.DataFrame({**{c: ours[c] for c in on}, "_v": vals}).groupby(on, sort=False, dropna=False)["_v"]
    agg = grouped.agg(
        _mean=lambda s: s.mean(skipna=False) if np.isfinite(s).all() else np.nan,
        _sd=lambda s: s.std(ddof=1) if np.isfinite(s).all() else np.nan,
        _n="size",
        _div=lambda s: int((~np.isfinite(s)).sum()),
    ).reset_index()

    carried = [c for c in reference.columns if c not in on and c != ref_value]
    left = reference[on + carried].assign(**{doc: ref_vals.to_numpy()})
    out = left.merge(agg, on=on, how="left", validate="one_to_one")
    out = out.rename(columns={"_mean": ours_label, "_sd": f"{ours_label} sd", "_n": "n"})
    out["n"] = out["n"].fillna(0).astype(int)
    out["difference"] = out[ours_label] - out[doc]
    if out["_div"].fillna(0).sum() > 0:
        out["diverged runs"] = out["_div"].fillna(0).astype(int)
    out = out.drop(columns="_div")
    if decimals is not None:
        num = [doc, ours_label, f"{ours_label} sd", "difference"]
        out[num] = out[num].round(decimals)
    return out


def save(fig: plt.Figure, path: str | os.PathLike, data: pd.DataFrame | None = None, *, dpi: int = 150,
         close: bool = False) -> Path:
    """Save `fig` (parents created, tight bounding box); with `data`, also write the tidy table it was
    drawn from next to it as <path stem>.csv. Returns the figure's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    if data is not None:
        data.to_csv(path.with_suffix(".csv"), index=False, float_format="%.8g", na_rep="nan")
    if close:
        plt.close(fig)
    return path
