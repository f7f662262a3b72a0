"""The book's one agreement rule and its claim checks.

A number of ours agrees with the document's when the two lie within two combined standard errors,

    |mean_ours - value_doc| <= 2 * sqrt(se_ours^2 + se_doc^2),

se_ours the standard error of our mean over seeds (sd / sqrt(seeds)) and se_doc the document's (its "±"
read as a standard deviation over its own seeds, divided by sqrt of their number); where a side has no
spread (one seed, an exact value, a document number without ±), a stated absolute threshold takes the
place of the missing part. A qualitative claim ("A beats B") is checked on our per-seed values the same
way: confirmed when the difference exceeds two standard errors in the claimed direction, contradicted when
it does so in the other direction, and "not testable at this scale" otherwise. A bound the document states
one way (an O(.) rate, "at most", "at least") is tested one way (`side="upper"` or `"lower"` of :func:`agree`,
:func:`bound`): a measured rate below an upper bound agrees with it, however far below.

Every check is a :class:`Check` (what, verdict, the numbers, the rule in words); :func:`frame` makes the
page's table of checks.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

__all__ = ["RULE", "CHECK_VERDICTS", "OK", "FAILED", "Check", "se", "agree", "bound", "mc_bound", "compare", "close",
           "holds",
           "horizon", "not_rising", "correlated", "frame", "styled", "summary", "number"]

# a check's verdicts: it holds (OK), it fails (FAILED), or the runs cannot tell
OK = ("agrees", "confirmed")
FAILED = ("differs", "contradicted")
NOT_TESTABLE = "not testable at this scale"
CHECK_VERDICTS = OK + FAILED + (NOT_TESTABLE,)
SIDES = ("two-sided", "upper", "lower")

RULE = ("agrees when |ours - document| <= 2 combined standard errors (ours over seeds, the document's ± as an "
        "sd over its seeds), else within a stated threshold where a side has no spread")


@dataclass(frozen=True)
class Check:
    """One claim check: `what` is checked, the `verdict` ("agrees", "differs", "confirmed", "contradicted",
    "not testable at this scale"), the numbers compared and the `rule` applied."""
    what: str
    verdict: str
    ours: float
    reference: float
    margin: float
    rule: str
    spread: float = math.nan      # the standard error of `ours` over seeds (of the paired differences)
    scale: str = ""               # where the check's runs depart from the document ("stand-in: ...", "reduced: ...");
    #                               empty: the page's own scale (scorecard.page_scale)

    @property
    def ok(self) -> bool:
        return self.verdict in OK

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED


def se(values) -> float:
    """Standard error of the mean of per-seed values (0 for one value)."""
    v = np.asarray(values, dtype=float).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan
    return float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def _side(side: str) -> str:
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    return side


def agree(what: str, ours, reference: float, *, ref_sd: float | None = None, ref_n: int = 5,
          threshold: float = 0.0, side: str = "two-sided") -> Check:
    """Our per-seed values `ours` against the document's `reference` (± `ref_sd` over `ref_n` seeds).
    margin = max(2 combined se, threshold). Two-sided: agrees when |mean - reference| <= margin (exactly on the
    margin agrees). `side="upper"`: the document's number is an upper bound, agrees when mean - reference <=
    margin; `side="lower"`: a lower bound, agrees when reference - mean <= margin."""
    _side(side)
    v = np.asarray(ours, dtype=float).reshape(-1)
    mean = float(np.nanmean(v)) if np.isfinite(v).any() else math.nan
    se_doc = 0.0 if ref_sd is None else float(ref_sd) / math.sqrt(ref_n)
    margin = max(2.0 * math.hypot(se(v), se_doc), float(threshold))
    gap = {"two-sided": abs(mean - float(reference)), "upper": mean - float(reference),
           "lower": float(reference) - mean}[side]
    if not math.isfinite(mean):
        verdict = NOT_TESTABLE
    else:
        verdict = "agrees" if gap <= margin else "differs"
    rule = {"two-sided": "|ours - document| <= max(2 combined se, %g)",
            "upper": "ours - document <= max(2 combined se, %g) (one-sided: the document's number is an upper bound)",
            "lower": "document - ours <= max(2 combined se, %g) (one-sided: the document's number is a lower bound)"
            }[side] % threshold
    return Check(what, verdict, mean, float(reference), margin, rule, se(v))


def bound(what: str, ours: float, limit: float, *, tol: float = 0.0, side: str = "upper") -> Check:
    """A measured number (a fitted exponent, one value) against a bound the document states one way:
    `side="upper"` (O(.), "at most") agrees when ours <= limit + tol, `"lower"` when ours >= limit - tol;
    `"two-sided"` when |ours - limit| <= tol. A missing number is not testable."""
    _side(side)
    x, lim = float(ours), float(limit)
    gap = {"two-sided": abs(x - lim), "upper": x - lim, "lower": lim - x}[side]
    verdict = NOT_TESTABLE if not (math.isfinite(x) and math.isfinite(lim)) else "agrees" if gap <= tol else "differs"
    rule = {"two-sided": f"|measured - document| <= {tol:g}",
            "upper": f"measured <= document + {tol:g} (one-sided: an upper bound)",
            "lower": f"measured >= document - {tol:g} (one-sided: a lower bound)"}[side]
    return Check(what, verdict, x, lim, float(tol), rule)


def mc_bound(what: str, mean: float, limit: float, se: float, *, z: float = 3.0, side: str = "upper",
             draws: int | None = None) -> Check:
    """A Monte Carlo estimate (`mean` with standard error `se`, e.g. of an expectation over `draws` random
    draws) against a bound the document states one way, with a stated statistical margin of `z` standard
    errors: `side="upper"` ("LHS <= RHS") agrees when mean - limit <= z se, `"lower"` when limit - mean <= z se.
    `ours` is the mean, `reference` the bound, `margin` z se, `spread` se. A missing number is not testable."""
    _side(side)
    if side == "two-sided":
        raise ValueError("mc_bound tests one-sided bounds: side must be 'upper' or 'lower'")
    m, lim, s = float(mean), float(limit), float(se)
    if not (math.isfinite(m) and math.isfinite(lim) and math.isfinite(s)) or s < 0:
        verdict = NOT_TESTABLE
    else:
        gap = m - lim if side == "upper" else lim - m
        verdict = "agrees" if gap <= z * s else "differs"
    n = f" over {draws} draws" if draws else ""
    rule = (f"Monte Carlo mean - bound <= {z:g} s.e.{n} (one-sided: an upper bound)" if side == "upper" else
            f"bound - Monte Carlo mean <= {z:g} s.e.{n} (one-sided: a lower bound)")
    return Check(what, verdict, m, lim, z * s if math.isfinite(s) else math.nan, rule, s)


def compare(what: str, a, b, *, threshold: float = 0.0) -> Check:
    """The claim "a >= b" on paired per-seed values: confirmed when mean(a - b) > 2 se of the paired
    differences (and > -threshold), contradicted when mean(a - b) < -max(2 se, threshold), else not testable."""
    d = np.asarray(a, dtype=float).reshape(-1) - np.asarray(b, dtype=float).reshape(-1)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return Check(what, NOT_TESTABLE, float(d.mean()) if d.size else math.nan, 0.0, math.nan,
                     "needs at least two seeds")
    mean, s = float(d.mean()), 2.0 * se(d)
    margin = max(s, float(threshold))
    if mean > s:
        verdict = "confirmed"
    elif mean < -margin:
        verdict = "contradicted"
    elif threshold > 0.0:
        verdict = "confirmed"          # within the stated tie threshold
    else:
        verdict = NOT_TESTABLE
    rule = ("mean paired difference vs 2 se of the differences"
            + (f" (tie allowed within {threshold:g})" if threshold else ""))
    return Check(what, verdict, mean, 0.0, margin, rule, se(d))


def close(what: str, a, b, *, threshold: float) -> Check:
    """The claim "a is close to b" on paired per-seed values: confirmed when the mean difference and two
    standard errors around it lie within +-threshold, contradicted when |mean| - 2 se > threshold, else not
    testable at this scale."""
    d = np.asarray(a, dtype=float).reshape(-1) - np.asarray(b, dtype=float).reshape(-1)
    d = d[np.isfinite(d)]
    rule = f"|mean paired difference| + 2 se <= {threshold:g} (confirmed), - 2 se > {threshold:g} (contradicted)"
    if d.size < 2:
        return Check(what, NOT_TESTABLE, float(d.mean()) if d.size else math.nan, 0.0, math.nan,
                     "needs at least two seeds")
    mean, s = float(d.mean()), 2.0 * se(d)
    if abs(mean) + s <= threshold:
        verdict = "confirmed"
    elif abs(mean) - s > threshold:
        verdict = "contradicted"
    else:
        verdict = NOT_TESTABLE
    return Check(what, verdict, mean, 0.0, s, rule, se(d))


def holds(what: str, ok: bool, rule: str, *, ours: float = math.nan, reference: float = math.nan) -> Check:
    """A check decided by an exact or stated criterion (`rule`, in words) rather than by seeds: "agrees" when
    `ok`, else "differs"; `ours` and `reference` are the numbers compared, where there are two."""
    return Check(what, "agrees" if bool(ok) else "differs", float(ours), float(reference), math.nan, rule)


def horizon(check: Check, run: int | None, document: int) -> Check:
    """A check of a claim the document reads at the end of its horizon (`document` rounds), measured on runs of
    `run` rounds: when the runs stop before the document's horizon the claim is "not testable at this scale",
    whatever the numbers say; the measured numbers are kept beside it and the rule says so. `run` None or at
    least `document`: the check unchanged."""
    import dataclasses
    if run is None or int(run) >= int(document):
        return check
    rule = (f"{check.rule}; measured at round {int(run)} of the document's {int(document)}: a claim about the end "
            "of a horizon that was not run is not testable at this scale")
    return dataclasses.replace(check, verdict=NOT_TESTABLE, rule=rule)


def not_rising(what: str, slopes, *, floor: float = 0.0) -> Check:
    """The claim "the curve has stopped rising" (read at its end) on per-seed slopes: through :func:`compare`
    (the claim 0 >= slope): confirmed when the mean slope is below zero by more than 2 se over seeds,
    contradicted (still rising) when above zero by more than 2 se, and "not testable at this scale" when the
    slope is not significantly different from zero: a flat reading inside the noise confirms nothing.
    |slope| <= `floor` counts as 0 (floating-point noise of an exactly flat curve)."""
    v = np.asarray(slopes, dtype=float).reshape(-1)
    v = np.where(np.abs(v) <= float(floor), 0.0, v)
    c = compare(what, np.zeros_like(v), v)
    import dataclasses
    return dataclasses.replace(c, ours=-c.ours if math.isfinite(c.ours) else c.ours,
                               rule="mean slope over seeds vs 2 se of the slopes (not rising: below -2 se, "
                                    "still rising: above +2 se, else not testable)")


def correlated(what: str, xs, ys, *, level: float = 0.05) -> Check:
    """The claim "larger x, larger y" on one sample per seed (`xs`, `ys`: one array per seed, e.g. the clients'
    true and estimated entropies): Spearman's rank correlation per seed with a one-sided test (scipy's t
    approximation on the n pairs). Confirmed when the correlation is positive with p < `level` in every seed,
    contradicted when it is negative with p < `level` in every seed, else not testable at this scale. `ours`:
    the mean correlation over seeds, `spread` its standard error, `margin` the largest one-sided p-value."""
    from scipy import stats
    rho, p_up, p_down = [], [], []
    for x, y in zip(xs, ys):
        x, y = np.asarray(x, dtype=float).reshape(-1), np.asarray(y, dtype=float).reshape(-1)
        if x.size < 3:
            continue
        rho.append(float(stats.spearmanr(x, y).statistic))
        p_up.append(float(stats.spearmanr(x, y, alternative="greater").pvalue))
        p_down.append(float(stats.spearmanr(x, y, alternative="less").pvalue))
    rule = (f"Spearman's rho per seed, one-sided test (t approximation): rho > 0 with p < {level:g} in every seed "
            f"(confirmed), rho < 0 with p < {level:g} in every seed (contradicted), else not testable")
    ok = [math.isfinite(r) and math.isfinite(p) for r, p in zip(rho, p_up)]
    if not rho or not all(ok):
        return Check(what, NOT_TESTABLE, float(np.nanmean(rho)) if rho else math.nan, 0.0, math.nan,
                     rule + " (needs at least 3 pairs per seed and a defined correlation)")
    if all(p < level for p in p_up):
        verdict, worst = "confirmed", max(p_up)
    elif all(p < level for p in p_down):
        verdict, worst = "contradicted", max(p_down)
    else:
        verdict, worst = NOT_TESTABLE, max(p_up)
    return Check(what, verdict, float(np.mean(rho)), 0.0, worst, rule, se(rho))


def frame(checks: Iterable[Check]) -> pd.DataFrame:
    """The page's table of checks."""
    return pd.DataFrame([asdict(c) for c in checks])


def number(x, spread=None, na: str = "n/a") -> str:
    """`x` to 4 significant digits, "± spread" appended where there is one; `na` for a missing number."""
    if x is None or (isinstance(x, (float, np.floating)) and not math.isfinite(x)):
        return na
    text = f"{x:.4g}"
    if spread is not None and math.isfinite(spread) and spread > 0:
        text += f" ± {spread:.2g}"
    return text


def styled(checks, columns: Iterable[str] = ("what", "verdict", "ours", "reference", "margin", "rule")):
    """The page's table of checks, for reading: the `columns` asked for, full text (no cell cut off), numbers
    to 4 significant digits, "ours" with its standard error over seeds ("±") where it has one, and "n/a"
    where a check has no such number (an exact criterion has no margin, a one-sided claim no reference)."""
    df = checks if isinstance(checks, pd.DataFrame) else frame(checks)
    columns = list(columns)
    unknown = [c for c in columns if c not in df.columns]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; a check has {list(df.columns)}")
    view = df[columns].copy()
    spread = df["spread"] if "spread" in df else pd.Series(math.nan, index=df.index)
    for c in ("ours", "reference", "margin"):
        if c in view:
            view[c] = [number(x, s if c == "ours" else None) for x, s in zip(df[c], spread)]
    return view.style.hide(axis="index")


def summary(checks: Iterable[Check]) -> str:
    """'k of n checks agree or are confirmed; j not testable at this scale.'"""
    cs = list(checks)
    ok = sum(c.ok for c in cs)
    nt = sum(c.verdict == NOT_TESTABLE for c in cs)
    return f"{ok} of {len(cs)} checks agree or are confirmed" + (f"; {nt} not testable at this scale" if nt else "")
