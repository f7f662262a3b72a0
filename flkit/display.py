"""Numbers and tables as a reader sees them on a page: no ``inf``, no ``1.518325e-29``, no snake_case headers.

    from flkit import display
    display.table(df)                             # a copy of df, every cell text, headers in words
    display.table(df, inf="never", digits=2, names={"hit_round": "rounds to 1e-10"})
    display.number(1.518325e-29)                  # '1.5 × 10⁻²⁹'
    display.number(float("inf"), inf="no limit")  # 'no limit'
    display.words("max_abs_exact_minus_pred")     # 'max abs exact minus pred'
    print(display.execution_note(time.time() - T0))   # this execution's time apart from its stored runs' compute
    display.put(rounds=200, gap=np.float64(0.3))  # glue numbers for the page's prose (myst-nb's glue)

Only the form changes, never the value: `number` rounds to `digits` significant digits (default 3) and writes
very small or very large magnitudes as powers of ten; ``inf`` becomes "∞" (or the word the table means by it:
"never reached", "no limit"), NaN and None "n/a" (say why in the caption or a column); booleans "yes"/"no";
ints keep every digit, with thousands separated. Text cells are left as they are.
"""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit import results

__all__ = ["number", "words", "table", "execution_note", "put", "SUPERSCRIPT"]

SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_ACRONYMS = {"se": "s.e.", "sd": "s.d.", "gpu": "GPU", "cpu": "CPU", "mc": "MC", "tv": "TV", "id": "id",
             "gib": "GiB", "fedavg": "FedAvg", "fedau": "FedAU", "mifa": "MIFA", "umifa": "U-MIFA",
             "cvar": "CVaR", "hics": "HiCS", "ram": "RAM", "cnn": "CNN", "mlp": "MLP", "vs": "vs"}


def number(x, digits: int = 3, *, inf: str = "∞", na: str = "n/a", small: float = 1e-3,
           large: float = 1e6) -> str:
    """`x` for reading: `digits` significant digits; a magnitude below `small` or at least `large` as
    "m × 10ⁿ"; ±inf as `inf` ("-" before it for -inf); NaN/None as `na`; bools "yes"/"no"; ints in full with
    thousands separators (below `large`). Anything that is not a number is returned as its str()."""
    if x is None:
        return na
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, numbers.Integral):
        return f"{int(x):,}" if abs(int(x)) < large else number(float(x), digits, inf=inf, na=na, small=small,
                                                                   large=large)
    if not isinstance(x, numbers.Real):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return na
    if math.isinf(x):
        return inf if x > 0 else f"−{inf}"
    if x == 0:
        return "0"
    if abs(x) < small or abs(x) >= large:
        exp = math.floor(math.log10(abs(x)))
        mant = round(x / 10 ** exp, max(digits - 1, 0))
        if abs(mant) >= 10:                       # 9.99 rounded up to 10.0
            mant, exp = mant / 10, exp + 1
        m = f"{mant:.{max(digits - 1, 0)}f}".rstrip("0").rstrip(".")
        return f"{m} × 10{str(exp).translate(SUPERSCRIPT)}".replace("-", "−")
    text = f"{x:.{digits}g}"
    if "e" in text:                               # %g falls back to e-notation near 10**digits
        text = f"{x:.0f}"
    return text.replace("-", "−")


def words(name, names: Mapping | None = None) -> str:
    """A column or index name for reading: `names[name]` when given; else snake_case turned into words
    ("rare_class" -> "rare class"), known abbreviations spelled as readers know them ("fedavg" -> "FedAvg",
    "se" -> "s.e."); names that are not plain identifiers (already words, "ours (± se)") are kept."""
    if names and name in names:
        return str(names[name])
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*_?", name) \
            or "_" not in name and name.lower() not in _ACRONYMS:
        return "" if name is None else str(name)
    return " ".join(_ACRONYMS.get(part.lower(), part) for part in name.strip("_").split("_"))


def table(df: pd.DataFrame, digits: int = 3, *, inf: str = "∞", na: str = "n/a",
          names: Mapping | None = None, columns: Mapping | None = None) -> pd.DataFrame:
    """A copy of `df` for display: every numeric cell through `number` (`digits`, `inf`, `na`), headers and
    index names through `words` (`names` maps a name to the words to show), text cells unchanged.
    `columns` gives a column its own arguments for `number`, e.g. {"p_value": {"digits": 2},
    "hit_round": {"inf": "never reached"}}."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"table() takes a pandas DataFrame, got {type(df).__name__}")
    columns = dict(columns or {})
    out = pd.DataFrame(index=df.index)
    for col in df.columns:
        kw = {**dict(digits=digits, inf=inf, na=na), **columns.get(col, {})}
        out[col] = [number(v, **kw) if _numeric(v) else ("n/a" if _missing(v) else v) for v in df[col]]
    out.columns = _renamed(df.columns, names)
    out.index = _renamed(df.index, names, values=False)
    return out


def _numeric(v) -> bool:
    return isinstance(v, (numbers.Real, np.bool_)) or v is None


def _missing(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _renamed(index: pd.Index, names: Mapping | None, values: bool = True) -> pd.Index:
    """An index (or columns) with its level names, and, for columns (`values`), its labels, in words."""
    if isinstance(index, pd.MultiIndex):
        levels = [[words(v, names) if values and isinstance(v, str) else v for v in lev] for lev in index.levels]
        new = index.set_levels(levels, verify_integrity=False) if values else index
        return new.set_names([words(n, names) if n is not None else None for n in index.names])
    labels = [words(v, names) if values and isinstance(v, str) else v for v in index]
    name = words(index.name, names) if index.name is not None else None
    return pd.Index(labels, name=name)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def execution_note(wall_s: float) -> str:
    """One sentence for the end of a page: how long this execution took, apart from the compute of the stored
    runs it read (their device and compute time, from their manifests: `flkit.results.used_runs`), e.g.
    "This execution took 9 s; it read 23 stored runs, computed earlier: 20 on cuda in 3.7 min, 3 on cpu (AMD
    EPYC, AVX512 kernels) in 57.2 min; it computed none." A page's printed wall time alone would pass a
    read of stored runs off as the experiment's cost."""
    used = results.used_runs()
    head = f"This execution took {_minutes(wall_s)}"
    if used.empty:
        return head + "; it used no stored run."
    parts = []
    read = used[~used["computed"]]
    for computed, part in ((False, read), (True, used[used["computed"]])):
        if part.empty:
            continue
        groups = []
        for (device, where), g in part.groupby(["device", "computed_on"], sort=True):
            on = "" if where == "not recorded" else f" ({where})"
            groups.append(f"{len(g)} on {str(device).split(' (')[0]}{on} in {_minutes(g['compute_s'].sum())}")
        n = len(part)
        parts.append((f"it computed {n} run{'s' * (n > 1)} now: " if computed else
                      f"it read {n} stored run{'s' * (n > 1)}, computed earlier: ") + ", ".join(groups))
    if used["computed"].sum() == 0:
        parts.append("it computed none")
    return head + "; " + "; ".join(parts) + "."


def put(**values) -> None:
    """Glue a page's numbers and words for its prose (myst-nb's ``glue:text`` role), hidden where the code runs;
    numpy and torch scalars become Python numbers so that the prose's format specs apply. The one glue helper of
    the pages."""
    from myst_nb import glue

    for k, v in values.items():
        glue(k, v.item() if hasattr(v, "item") else v, display=False)
