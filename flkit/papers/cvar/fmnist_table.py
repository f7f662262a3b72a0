"""The page of Table 1 (notebooks/cvar/fmnist_table.ipynb): Fashion-MNIST over a grid of (gamma, alpha), the
document's 60 numbers beside ours (`table1_reference`, `table1_ours`, `table1_compare`), the document's five
statements about the table checked on our per-seed numbers (`confirm_table1`), the page's checks by item
(`checks`) and the numbers its prose reads (`table1_words`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit import plots
from flkit.papers import claims
from flkit.papers.cvar import common, items
from flkit.papers.cvar.common import PAPER, final_accuracies, in_words, method_of, ram_of, settings, span
from flkit.papers.cvar.items import TABLE1_CLAIMS
from flkit.plots import reference_table

__all__ = ["PROFILES", "profile", "OWED", "TABLE1_ALPHAS", "TABLE1_GAMMAS", "QUANTITIES", "table1_reference",
           "table1_ours", "table1_compare", "table1_wide", "table1_long", "table1_figure", "confirm_table1", "checks",
           "TABLE1_SHORT", "table1_statements", "table1_words", "head_values", "rho_values", "split_table"]

EXPERIMENT = "fmnist"
PROFILES = common.PROFILES[EXPERIMENT]   # "paper": the document's setting; "reduced": 1000 rounds, 3 seeds; "smoke"
OWED = "cvar-table1-paper"   # the ledger item that runs Table 1 at the document's scale (flkit.owed)


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` (`PROFILES`), `overrides` winning (None: the profile's value);
    a ValueError naming the profiles for any other name (`common.settings`)."""
    return settings(EXPERIMENT, name, **overrides)


def head_values(s: Mapping) -> dict:
    """The settings the page's prose names: rounds (ours and the document's), seeds, the RAM."""
    return dict(t1_rounds=int(s["rounds"]), t1_doc_rounds=int(PAPER[EXPERIMENT]["rounds"]), t1_seeds=len(s["seeds"]),
                t1_ram=str(s["ram"]))


def rho_values(s: Mapping) -> dict:
    """The RAM of the settings `s` for the prose: its 30 probabilities, and the three rare users' sum."""
    rho = np.asarray(ram_of(s)[0], dtype=float)
    return dict(t1_rho=", ".join(f"{p:.4f}" for p in rho), t1_rho_rare=f"{rho[-3:].sum():.4f}")


def split_table(split: pd.DataFrame) -> pd.DataFrame:
    """`runs.split_summary` for reading: headers in words, the RAM probabilities to four decimals."""
    split = split.rename(columns={"r": "r", "samples_per_user": "samples per user",
                                  "rho_total": "RAM probability (sum over the group)"})
    split["RAM probability (sum over the group)"] = split["RAM probability (sum over the group)"].map("{:.4f}".format)
    return split


# ================================================================================================
# Table 1: the document's numbers beside ours
# ================================================================================================
# Table 1 of the document (FashionMNIST), copied from the seed text: for each gamma, then each alpha in
# (1.0, 0.3, 0.2, 0.1): (overall, pattern 1, pattern 2) as (mean, +-). tests/test_cvar.py re-reads the
# seed text and checks every number.
_DOC_TABLE1 = {
    0.0: [(85.147, 0.546, 85.473, 1.548, 61.041, 3.554), (86.157, 0.559, 88.323, 1.140, 67.164, 3.344),
          (86.453, 0.592, 88.736, 1.472, 68.926, 2.716), (86.089, 0.923, 87.536, 2.449, 70.601, 3.523)],
    0.1: [(84.895, 0.605, 84.583, 1.597, 59.649, 3.795), (86.276, 0.519, 88.353, 1.058, 66.676, 2.883),
          (86.432, 0.653, 88.619, 1.674, 68.801, 2.835), (86.546, 0.540, 88.681, 1.454, 71.681, 2.419)],
    0.2: [(84.783, 0.474, 84.533, 1.294, 59.223, 2.580), (86.174, 0.552, 88.029, 1.572, 66.372, 3.116),
          (86.110, 0.573, 88.061, 1.663, 67.659, 3.156), (86.132, 0.860, 88.093, 1.990, 69.698, 4.351)],
    0.3: [(84.983, 0.419, 84.969, 1.042, 60.330, 2.104), (86.036, 0.483, 87.611, 1.316, 65.958, 2.492),
          (86.263, 0.517, 88.300, 1.772, 68.076, 3.054), (86.197, 0.533, 87.776, 2.026, 69.883, 2.674)],
    1.0: [(84.915, 0.497, 84.514, 1.620, 60.252, 3.074), (84.822, 0.630, 84.481, 2.003, 59.008, 3.138),
          (84.916, 0.454, 85.459, 2.870, 60.805, 2.399), (84.956, 0.462, 85.561, 1.443, 59.839, 3.168)],
}
TABLE1_ALPHAS = (1.0, 0.3, 0.2, 0.1)
TABLE1_GAMMAS = (0.0, 0.1, 0.2, 0.3, 1.0)
QUANTITIES = ("overall", "pattern 1", "pattern 2")


def table1_reference() -> pd.DataFrame:
    """The document's Table 1 as a tidy frame: gamma, alpha, quantity, value (mean %), sd (the +-)."""
    rows = []
    for g, cells in _DOC_TABLE1.items():
        for a, cell in zip(TABLE1_ALPHAS, cells):
            for q, (mean, sd) in zip(QUANTITIES, zip(cell[0::2], cell[1::2])):
                rows.append(dict(gamma=g, alpha=a, quantity=q, value=mean, sd=sd))
    return pd.DataFrame(rows)


def table1_ours(df: pd.DataFrame) -> pd.DataFrame:
    """Our Table 1 from the stored fmnist runs: one row per (gamma, alpha, quantity, seed), final-round
    accuracy in %. The risk-neutral cells (alpha = 1 or gamma = 1) all show the FedAvg run."""
    acc = final_accuracies(df)
    acc["quantity"] = np.select([acc["metric"] == "test_acc", acc["class"] == 8, acc["class"] == 9],
                                list(QUANTITIES), default="")
    acc = acc[acc["quantity"] != ""]
    gammas = sorted((set(TABLE1_GAMMAS) | set(acc["gamma"])) - {1.0}) + [1.0]
    alphas = sorted(set(TABLE1_ALPHAS) | set(acc["alpha"]), reverse=True)
    rows = []
    for g in gammas:
        for a in alphas:
            run = (1.0, 1.0) if method_of(a, g) == "fedavg" else (a, g)
            sel = acc[(acc["alpha"] == run[0]) & (acc["gamma"] == run[1])]
            if len(sel):
                rows.append(sel.assign(gamma=g, alpha=a)[["gamma", "alpha", "quantity", "seed", "value"]])
    return pd.concat(rows, ignore_index=True)


def table1_compare(ours: pd.DataFrame) -> pd.DataFrame:
    """Document vs ours, cell by cell: gamma, alpha, quantity, document (mean), document sd, ours
    (mean over seeds), ours sd (ddof=1), n (seeds), difference = ours - document."""
    ref = table1_reference().rename(columns={"sd": "document sd"})
    out = reference_table(ours, ref, on=["gamma", "alpha", "quantity"], value="value")
    cols = ["gamma", "alpha", "quantity", "document", "document sd", "ours", "ours sd", "n", "difference"]
    return out[cols + [c for c in out.columns if c not in cols]]


def table1_wide(cmp: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """The comparison laid out like the document's table: rows gamma, columns (alpha, quantity), each
    cell "ours ± sd | document (difference)" in % (difference in points); "n/a" where we have no run of
    the cell at this profile, no "± sd" where we have one seed."""
    def cell(r):
        if not np.isfinite(r["ours"]):
            return f"n/a (not run) | {r['document']:.{decimals}f}"
        sd = f" ± {r['ours sd']:.{decimals}f}" if np.isfinite(r["ours sd"]) else ""
        return f"{r['ours']:.{decimals}f}{sd} | {r['document']:.{decimals}f} ({r['difference']:+.{decimals}f})"
    wide = cmp.assign(cell=cmp.apply(cell, axis=1)).pivot_table(
        index="gamma", columns=["alpha", "quantity"], values="cell", aggfunc="first")
    return wide.reindex(columns=[(a, q) for a in TABLE1_ALPHAS for q in QUANTITIES if (a, q) in wide.columns])


def table1_long(cmp: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """The comparison for reading, one row per number of the document's Table 1: γ, α, quantity, the
    document's mean and ±, our mean and sd over seeds (all in %), the seeds, our difference (points), as
    text rounded to `decimals`; "n/a" with the reason where a number is missing (a cell not run at this
    profile; an sd of one seed)."""
    def num(x, why, signed=False):
        if not np.isfinite(x):
            return f"n/a ({why})"
        return f"{x:+.{decimals}f}" if signed else f"{x:.{decimals}f}"
    out = pd.DataFrame({"γ": cmp["gamma"], "α": cmp["alpha"], "quantity": cmp["quantity"],
                        "document (%)": [num(x, "") for x in cmp["document"]],
                        "document ± (%)": [num(x, "") for x in cmp["document sd"]],
                        "ours (%)": [num(x, "not run") for x in cmp["ours"]],
                        "ours sd (%)": [num(x, "not run" if not np.isfinite(m) else "one seed")
                                        for x, m in zip(cmp["ours sd"], cmp["ours"])],
                        "seeds": [int(n) if np.isfinite(n) else 0 for n in cmp["n"].astype(float)],
                        "ours − document (points)": [num(x, "not run", signed=True) for x in cmp["difference"]]})
    return out


def table1_figure(cmp: pd.DataFrame, title: str = ""):
    """Table 1 as heat maps, rows overall and pattern 2, columns the document's and ours, one colour scale per
    row; each cell labelled with its accuracy (%), "n/a" where we have no run of it."""
    fig, grid = plots.figure(2, 2, row_height=2.8)
    for row, q in enumerate(["overall", "pattern 2"]):
        sel = cmp[cmp["quantity"] == q]
        vmin, vmax = np.nanmin(sel[["document", "ours"]].to_numpy()), np.nanmax(sel[["document", "ours"]].to_numpy())
        for col, who in enumerate(["document", "ours"]):
            ax = grid[row, col]
            m = sel.pivot(index="gamma", columns="alpha", values=who)
            m = m[sorted(m.columns, reverse=True)]
            im = ax.imshow(m.to_numpy(), cmap="viridis", aspect="auto", vmin=vmin, vmax=vmax)
            ax.grid(False)
            ax.set_xticks(range(m.shape[1]), [str(a) for a in m.columns])
            ax.set_yticks(range(m.shape[0]), [str(g) for g in m.index])
            ax.set_xlabel(r"$\alpha$")
            ax.set_ylabel(r"$\gamma$")
            for (i, j), v in np.ndenumerate(m.to_numpy()):
                light = np.isfinite(v) and (v - vmin) > 0.6 * (vmax - vmin)  # dark text on the yellow end
                ax.text(j, i, f"{v:.1f}" if np.isfinite(v) else "n/a", ha="center", va="center",
                        color="k" if light else "w", fontsize=8.5)
            ax.set_title(f"{q}: {who}")
        fig.colorbar(im, ax=grid[row, :], label="test accuracy (%)")
    fig.suptitle(title, fontsize=9.5)
    return fig


# ================================================================================================
# The document's reading of Table 1
# ================================================================================================
def _paired(what: str, a: np.ndarray, b: np.ndarray):
    """The claim "a > b" on per-seed values (the book's rule, `flkit.papers.claims.compare`); with fewer
    than two paired seeds, the sign of the difference of the means (stated in the rule)."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() >= 2:
        return claims.compare(what, a[ok], b[ok])
    d = float(np.nanmean(a) - np.nanmean(b))
    verdict = "confirmed" if d > 0 else "contradicted" if d < 0 else "not testable at this scale"
    return claims.Check(what, verdict, d, 0.0, 0.0, "one value per cell: the sign of the difference")


def _combine(checks) -> tuple[str, str]:
    """All confirmed -> confirmed; any contradicted -> contradicted; else not testable."""
    vs = [c.verdict for c in checks]
    verdict = ("confirmed" if all(v == "confirmed" for v in vs) else
               "contradicted" if "contradicted" in vs else "not testable at this scale")
    return verdict, checks[0].rule


def _at_horizon(check, rounds: int | None):
    """`check` of a Table 1 reading measured on runs of `rounds` rounds: not testable at this scale when they stop
    before the document's horizon (`claims.horizon`; the numbers kept beside it)."""
    return claims.horizon(check, rounds, PAPER["fmnist"]["rounds"])


def _table1_reading(ours: pd.DataFrame, rounds: int | None = None) -> dict:
    """The checks behind `confirm_table1`: the per-seed paired claims (claims.Check) and the means shown;
    `rounds`: the runs' horizon, when it is shorter than the document's every check is not testable at this
    scale (`claims.horizon`)."""
    m = ours.groupby(["gamma", "alpha", "quantity"])["value"].mean()
    per = ours.pivot_table(index=["gamma", "alpha", "quantity"], columns="seed", values="value")
    v = lambda g, a, q: per.loc[(g, a, q)].to_numpy(dtype=float)  # noqa: E731
    overall = m.xs("overall", level="quantity")
    best = overall.idxmax()
    fed = {q: m[(1.0, 1.0, q)] for q in QUANTITIES}
    cell = {q: m.get((0.1, 0.1, q), np.nan) for q in QUANTITIES}
    aware = [(g, a) for g, a in overall.index if g < 1 and a < 1]
    if best == (0.1, 0.1):
        rival = overall.drop(best).idxmax()
        best_check = _paired("best cell", v(0.1, 0.1, "overall"), v(*rival, "overall"))
    else:   # the claim fails when the best cell is ahead beyond the noise
        c = _paired("best cell", v(*best, "overall"), v(0.1, 0.1, "overall"))
        best_check = c.__class__(c.what, {"confirmed": "contradicted"}.get(c.verdict, "not testable at this scale"),
                                 c.ours, c.reference, c.margin, c.rule)
    n = per.shape[1]
    level = _paired("pattern 2 at (gamma, alpha) = (0.1, 0.1) above 71 %", v(0.1, 0.1, "pattern 2"), np.full(n, 71.0))
    rise = _paired("pattern 2: (0.1, 0.1) above FedAvg", v(0.1, 0.1, "pattern 2"), v(1.0, 1.0, "pattern 2"))
    beats = [_paired(f"overall: (gamma, alpha) = ({g}, {a}) above FedAvg", v(g, a, "overall"), v(1.0, 1.0, "overall"))
             for g, a in aware]
    p1 = _paired("pattern 1: (0.1, 0.1) above FedAvg", v(0.1, 0.1, "pattern 1"), v(1.0, 1.0, "pattern 1"))
    harder = _paired("FedAvg: pattern 1 above pattern 2", v(1.0, 1.0, "pattern 1"), v(1.0, 1.0, "pattern 2"))
    best_check = dataclasses.replace(best_check,
                                     what="best overall cell is (gamma, alpha) = (0.1, 0.1); "
                                          f"ours: ({best[0]:g}, {best[1]:g})")
    h = lambda c: _at_horizon(c, rounds)  # noqa: E731
    best_check, level, rise, p1, harder = h(best_check), h(level), h(rise), h(p1), h(harder)
    beats = [h(b) for b in beats]
    return dict(m=m, overall=overall, best=best, fed=fed, cell=cell, aware=aware, best_check=best_check,
                level=level, rise=rise, beats=beats, p1=p1, harder=harder)


def confirm_table1(ours: pd.DataFrame, rounds: int | None = None) -> pd.DataFrame:
    """The document's reading of Table 1, checked on our per-seed numbers with the book's agreement rule
    (`flkit.papers.claims`): paired over seeds, a difference counts when it exceeds two standard errors;
    verdict "confirmed", "contradicted" or "not testable at this scale" (``confirmed``: the first). `rounds`:
    the runs' horizon; shorter than the document's, every statement is not testable at this scale."""
    r = _table1_reading(ours, rounds)
    overall, best, fed, cell, aware = r["overall"], r["best"], r["fed"], r["cell"], r["aware"]
    best_check, level, rise, beats = r["best_check"], r["level"], r["rise"], r["beats"]
    rows = [
        dict(claim="best overall cell is (gamma, alpha) = (0.1, 0.1)", document="(0.1, 0.1): 86.55",
             ours=f"({best[0]}, {best[1]}): {overall[best]:.2f}", check=(best_check.verdict, best_check.rule)),
        dict(claim="pattern 2: from ~60 % (FedAvg) to > 71 % at (0.1, 0.1)", document="60.25 -> 71.68",
             ours=f"{fed['pattern 2']:.2f} -> {cell['pattern 2']:.2f}", check=_combine([rise, level])),
        dict(claim="pattern 1 also improves over FedAvg at (0.1, 0.1)", document="84.51 -> 88.68",
             ours=f"{fed['pattern 1']:.2f} -> {cell['pattern 1']:.2f}",
             check=_combine([r["p1"]])),
        dict(claim="pattern 2 is harder than pattern 1 for FedAvg", document="60.25 < 84.51",
             ours=f"{fed['pattern 2']:.2f} vs {fed['pattern 1']:.2f}",
             check=_combine([r["harder"]])),
        dict(claim="every risk-aware cell (gamma < 1, alpha < 1) beats FedAvg overall", document="12 of 12",
             ours=f"{sum(overall[c] > fed['overall'] for c in aware)} of {len(aware)} (means), "
                  f"{sum(c.verdict == 'confirmed' for c in beats)} confirmed",
             check=_combine(beats)),
    ]
    out = pd.DataFrame(rows)
    out["verdict"] = [c[0] for c in out.pop("check")]
    out["rule"] = [r["check"][1] if isinstance(r.get("check"), tuple) else "" for r in rows]
    out["confirmed"] = out["verdict"] == "confirmed"
    return out


def checks(ours: pd.DataFrame, rounds: int | None = None) -> dict[str, list]:
    """The page's checks, by item (`items.table1`): each of the 60 numbers of Table 1 against ours
    (`claims.agree`: our per-seed values vs the document's mean, its ± read as an sd over 5 repetitions,
    a number the document does not state), and the text's reading of the table (the paired checks of
    `confirm_table1`, unchanged). `rounds`: the runs' horizon; when it is shorter than the document's (6000),
    every check is "not testable at this scale", its numbers kept beside it (`claims.horizon`): the document
    reads Table 1 after its last round."""
    numbers = {}
    for r in table1_reference().itertuples():
        vals = ours[(ours["gamma"] == r.gamma) & (ours["alpha"] == r.alpha) & (ours["quantity"] == r.quantity)]
        vals = vals.sort_values("seed")["value"].to_numpy(dtype=float)
        what = f"γ={r.gamma}, α={r.alpha}, {r.quantity}: ours vs the document's (%)"
        numbers[(r.gamma, r.alpha, r.quantity)] = _at_horizon(claims.agree(what, vals, r.value, ref_sd=r.sd), rounds)
    return items.table1(numbers, _table1_reading(ours, rounds))


# ------------------------------------------------------------------------------ Table 1 in words
TABLE1_SHORT = {   # the statements of TABLE1_CLAIMS in a few words, for the page's prose
    "rise": "pattern 2 rises from about 60 % (FedAvg) to over 71 % at (γ, α) = (0.1, 0.1)",
    "p1": "pattern 1 improves over FedAvg too",
    "harder": "pattern 2 is harder than pattern 1",
    "beats": "overall accuracy improves as α → 0",
    "best": "(γ, α) = (0.1, 0.1) performs best",
}


def table1_statements(checks: Mapping[str, list]) -> pd.DataFrame:
    """The document's five statements about Table 1 (`TABLE1_CLAIMS`), each with the verdict of the checks
    `checks` files under it, combined by the rule of `confirm_table1` (all confirmed: confirmed;
    any contradicted: contradicted; else not testable at this scale). Columns: key, statement, verdict,
    checks, confirmed, contradicted (the counts of its checks)."""
    rows = []
    for key, item in TABLE1_CLAIMS.items():
        cs = list(checks.get(item, []))
        if not cs:
            raise ValueError(f"no check filed under {item!r}: pass the page's checks (fmnist_table.checks)")
        vs = [c.verdict for c in cs]
        rows.append(dict(key=key, statement=TABLE1_SHORT[key], verdict=_combine(cs)[0], checks=len(cs),
                         confirmed=vs.count("confirmed"), contradicted=vs.count("contradicted")))
    return pd.DataFrame(rows)


_MEASURED = ("beyond two standard errors in the claimed direction", "beyond two standard errors against the claim",
             "inside two standard errors")


def _measured(c) -> str:
    """What a paired check measured, whatever its verdict: its mean difference beyond two standard errors
    (its margin) for the claim, against it, or inside."""
    if not (np.isfinite(c.ours) and np.isfinite(c.margin)):
        return _MEASURED[2]
    return _MEASURED[0] if c.ours > c.margin else _MEASURED[1] if c.ours < -c.margin else _MEASURED[2]


def _pp(x: float) -> str:
    return span([x], signed=True)


def table1_words(ours: pd.DataFrame, checks: Mapping[str, list]) -> dict:
    """The values the page's "What we found" glues (plain str/int), from our per-seed Table 1
    (`table1_ours`) and the page's checks (`checks(ours)`). Keys:
    gap_<q> (q = overall, p1, p2): the range over the cells of ours - document (points); gap_<q>_mean: its
    mean; doc_spread_<q>: the document's largest minus smallest cell (points);
    rare, rare_sd, doc_rare_sd: the range of our pattern 1 and 2 accuracies (%), of their sd over seeds, and
    of the document's ± (points);
    agree: "k of n" of the document's numbers that agree (the `claims.agree` checks); run: "k of 60" numbers
    we have; below: "k of n" of ours below the document's;
    v_<key>: the verdict of each statement (`table1_statements`); n_<v>, list_<v> (v = confirmed,
    contradicted, untestable): how many and which;
    the numbers behind each statement: <check>_d (paired difference, points), <check>_2se, <check>_verdict
    for rise, level, p1, harder, best; the means fed_*, cell_* (%), best_cell, beats_* (counts and ranges);
    pattern_2se: the range of 2 se of the three paired pattern checks."""
    cmp = table1_compare(ours)
    st = table1_statements(checks)
    rd = _table1_reading(ours)
    fed, cell = rd["fed"], rd["cell"]
    out: dict = {}
    for q, k in zip(QUANTITIES, ("overall", "p1", "p2")):
        d = cmp.loc[cmp["quantity"] == q, "difference"]
        out[f"gap_{k}"], out[f"gap_{k}_mean"] = span(d, signed=True), _pp(float(d.mean()))
        doc = cmp.loc[cmp["quantity"] == q, "document"]
        out[f"doc_spread_{k}"] = f"{doc.max() - doc.min():.1f}"
    rare = cmp[cmp["quantity"] != "overall"]
    out["rare"], out["rare_sd"] = span(rare["ours"], 0), span(rare["ours sd"], 0)
    out["doc_rare_sd"] = span(rare["document sd"], 1)
    agree = [c for item, cs in checks.items() if item.startswith("Table 1: ") for c in cs]
    # within the agreement rule's margin at the runs' horizon (the verdict itself may be "not testable at this
    # scale" when the runs stop before the document's horizon: claims.horizon)
    out["agree"] = f"{sum(bool(abs(c.ours - c.reference) <= c.margin) for c in agree)} of {len(agree)}"
    out["run"] = f"{int(np.isfinite(cmp['ours']).sum())} of {len(cmp)}"
    out["below"] = f"{int((cmp['difference'] < 0).sum())} of {int(np.isfinite(cmp['difference']).sum())}"
    for v, name in (("confirmed", "confirmed"), ("contradicted", "contradicted"),
                    ("not testable at this scale", "untestable")):
        sel = st[st["verdict"] == v]
        out[f"n_{name}"], out[f"list_{name}"] = int(len(sel)), in_words(f"“{s}”" for s in sel["statement"])
    for r in st.itertuples():
        out[f"v_{r.key}"] = r.verdict
    c = lambda key, i=0: checks[TABLE1_CLAIMS[key]][i]  # noqa: E731
    for key, i, name in (("rise", 0, "rise"), ("rise", 1, "level"), ("p1", 0, "p1"), ("harder", 0, "harder"),
                         ("best", 0, "best")):
        out[f"{name}_d"], out[f"{name}_2se"] = _pp(c(key, i).ours), f"{c(key, i).margin:.1f}"
        out[f"{name}_verdict"] = c(key, i).verdict
        out[f"{name}_measured"] = _measured(c(key, i))
    out["fed_p1"], out["fed_p2"] = f"{fed['pattern 1']:.1f}", f"{fed['pattern 2']:.1f}"
    out["cell_p1"], out["cell_p2"] = f"{cell['pattern 1']:.1f}", f"{cell['pattern 2']:.1f}"
    best, overall = rd["best"], rd["overall"]
    out["best_cell"], out["best_overall"] = f"({best[0]}, {best[1]})", f"{overall[best]:.1f}"
    out["cell_overall"], out["fed_overall"] = f"{cell['overall']:.1f}", f"{fed['overall']:.1f}"
    beats = checks[TABLE1_CLAIMS["beats"]]
    out["beats_means"] = f"{sum(overall[a] > fed['overall'] for a in rd['aware'])} of {len(rd['aware'])}"
    out["beats_n"] = len(beats)
    # measured at the runs' horizon: ahead / behind beyond two standard errors (the verdict may be "not
    # testable at this scale" all the same, when the runs stop before the document's horizon)
    out["beats_confirmed"] = int(sum(_measured(b) == _MEASURED[0] for b in beats))
    out["beats_contradicted"] = int(sum(_measured(b) == _MEASURED[1] for b in beats))
    out["beats_2se"] = span([b.margin for b in beats])
    out["beats_d"] = span([b.ours for b in beats], signed=True)
    out["pattern_2se"] = span([c("rise").margin, c("p1").margin, c("harder").margin])
    return out
