"""The items of document 002 (``flkit/papers/items/002.yaml``) that the MIFA pages check, and how each page's
results become checks (`flkit.papers.claims.Check`) filed under those items, for `flkit.papers.scorecard.record`.

One function per page turns its tables into ``{item id: [checks]}``: :func:`quadratic_checks` (Figures 1-3, the
momentum items), :func:`logistic_checks` (Figures 4-6, the momentum items), :func:`theory_checks` (the error
floors, the stored entries, the one-step inequalities, the step-size conditions and the complexity tables: it
joins the section checks below and those of `flkit.papers.mifa.bounds`). Figure items are named by
`flkit.papers.mifa.common.FIGURES` (which of the document's figures each page's runs are is our inference). The
criteria (tolerances, levels) are stated in each check's rule, as the scorecard shows them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from flkit.papers import claims
from flkit.papers.mifa import bounds
from flkit.papers.mifa.common import FIGURES, HETERO, MOMENTUM_BASE, SLOPE_TOL, best_betas, fit_slope
from flkit.papers.mifa.methods import LABELS, ZEROSARAH

__all__ = ["DOC", "MOMENTUM", "UMIFAM_BETTER", "FLOOR_NONZERO", "FLOOR_BOUND", "FLOOR_ZERO", "MIFA_BOUND", "BIASED",
           "UNBIASED", "EQ_MIFA", "EQ_UMIFA", "LR_MIFA", "LR_REDDI", "SAGA_ETA", "ZEROSARAH_ETA", "FEDPGD_CONVERGENCE",
           "EPS_CONVEX", "EPS_NONCONVEX", "DERIVATION_I", "GENERAL", "ALPHA", "merge_checks", "floor_check",
           "quadratic_checks", "tuned_momentum_checks", "logistic_checks", "floor_checks", "monte_carlo_checks",
           "step_size_checks", "complexity_checks", "epsilon_checks", "theory_checks"]

DOC = "002"

# the items the pages check, by a short name (the ids of 002.yaml; figure items: FIGURES)
MOMENTUM = "Question: can we speed things up with momentum?"
UMIFAM_BETTER = "Claim: U-MIFAm works better in practice"
FLOOR_NONZERO = "Claim (i): non-zero error floor for partial client participation"
FLOOR_BOUND = "Bound (i): floor of FedAvg with importance sampling"
FLOOR_ZERO = "Claim (ii): zero error floor for MIFA"
MIFA_BOUND = "Bound (ii): MIFA"
BIASED = "Note (ii): MIFA's stored entries are biased"
UNBIASED = "Note (iii): U-MIFA's stored entries are unbiased"
EQ_MIFA = "Eq. (MIFA): E||grad f(w_t) - G_t||^2"
EQ_UMIFA = "Eq. (U-MIFA): E||grad f(w_t) - G_t||^2"
DERIVATION_I = "Derivation (i): one-step bound for FedAvg with importance sampling"
GENERAL = "General analysis: one-step bound for MIFA and U-MIFA"
LR_MIFA = "Claim (Learning Rate): MIFA, eta <= 1/(L n)"
LR_REDDI = "Claim (Learning Rate): after Reddi et al., eta ~ 1/(L n^{2/3})"
SAGA_ETA = "Non-convex table: SAGA/U-MIFA, eta bound"
ZEROSARAH_ETA = "Non-convex table: ZeroSarah, eta bound"
FEDPGD_CONVERGENCE = "Convex table: FedPGD, convergence"
EPS_CONVEX = "Convex table: epsilon-dependence of the complexities"
EPS_NONCONVEX = "Non-convex table: epsilon-dependence of the complexities"
# the other table items are "<Convex|Non-convex> table: <FedGD|FedPGD|SAGA/U-MIFA|ZeroSarah>, <eta bound|complexity>"

ALPHA = 0.01        # level of the chi^2 tests of the theory page's Monte Carlo


def merge_checks(*parts: dict) -> dict:
    """{item: [checks]} dicts joined, the lists of an item that appears in several concatenated."""
    out: dict = {}
    for part in parts:
        for item, cs in part.items():
            out.setdefault(item, []).extend(cs)
    return out


def _final(df: pd.DataFrame, metric: str, method: str) -> np.ndarray:
    """Per-seed value of `metric` at the last recorded round, in seed order."""
    g = df[(df["metric"] == metric) & (df["method"] == method)]
    return g[g["round"] == g["round"].max()].sort_values("seed")["value"].to_numpy(dtype=float)


def _log10(v) -> np.ndarray:
    return np.log10(np.clip(np.asarray(v, dtype=float), 1e-300, None))


def _median_rounds(v) -> float:
    v = np.asarray(v, dtype=float)
    return float(np.median(np.where(v >= 0, v, np.inf)))


def floor_check(df: pd.DataFrame, p: float, fig: str) -> claims.Check:
    """Claims (i)/(ii) of the document on a figure's runs: FedAvg (IS) stalls above MIFA (log10 final gap,
    paired over seeds)."""
    return claims.compare(f"{fig}, p={p}: FedAvg (IS) ends above MIFA (log10 final gap, paired over seeds): "
                          "non-zero vs zero floor", _log10(_final(df, "gap", "fedavg_is")),
                          _log10(_final(df, "gap", "mifa")))


def quadratic_checks(data: dict, hits: pd.DataFrame, beta: float) -> dict:
    """The quadratic page's checks. data[p]: the tidy runs of Figures 1-3 (gap, hit_round per seed); hits:
    the beta sweep's hit rounds (method, beta, p, seed, rounds, value; -1: never). Criteria as the page
    states them: rounds to 1e-10 x the initial gap, median over seeds (never: inf); and, per figure, the
    paired comparisons of `tuned_momentum_checks` at each method's best beta > 0 (never: the horizon T)."""
    out = {FIGURES["quadratic"][p]: [floor_check(df, p, FIGURES["quadratic"][p])] for p, df in data.items()}
    question, better = [], []
    for p, df in data.items():
        h = df[(df["metric"] == "hit_round") & (df["method"] != "fedgd")]
        med = h.groupby("method")["value"].apply(_median_rounds)
        fastest = med.idxmin() if np.isfinite(med.min()) else None
        better.append(claims.holds(
            f"p={p}, beta={beta}: U-MIFAm as written is the fastest partial-participation method to 1e-10 x the "
            f"initial gap (median rounds; fastest: {LABELS.get(fastest, 'none')})", fastest == "umifam",
            "fastest by median rounds over seeds", ours=med.get("umifam", np.inf), reference=med.min()))
        sw = hits[hits["p"] == p]
        best = {}
        for m in ("mifam", "umifam", "umifam_saga"):
            mr = sw[sw["method"] == m].groupby("beta")["value"].apply(_median_rounds)
            b = mr.idxmin() if np.isfinite(mr.min()) else None
            if b is not None:
                best[m] = (b, mr[b])
            question.append(claims.holds(
                f"p={p}: {LABELS[m]}: momentum speeds it up (best beta of the sweep > 0, fewer median rounds "
                f"than beta = 0)", b is not None and b > 0 and mr[b] < mr.get(0.0, np.inf),
                "best beta > 0 and median rounds at it < at beta = 0 (never: inf)",
                ours=mr[b] if b is not None else np.inf, reference=mr.get(0.0, np.inf)))
        m = min(best, key=lambda k: best[k][1]) if best else None
        better.append(claims.holds(
            f"p={p}: U-MIFAm with SAGA memory, at its best beta, is the fastest momentum method and gains from "
            f"beta > 0 (fastest: {LABELS.get(m, 'none')}, beta={best[m][0] if m else 'n/a'})",
            m == "umifam_saga" and best[m][0] > 0, "fastest by median rounds over seeds, each method at its best beta",
            ours=best.get("umifam_saga", (0, np.inf))[1], reference=best[m][1] if m else np.inf))
    out[MOMENTUM] = question
    out[UMIFAM_BETTER] = better
    for p in data:
        sw = hits[hits["p"] == p]
        T = float(sw["rounds"].max()) if "rounds" in sw else np.inf
        tab = sw.assign(value=np.where(sw["value"] >= 0, sw["value"], np.inf))[["method", "beta", "seed", "value"]]
        out = merge_checks(out, tuned_momentum_checks(
            tab, f"{FIGURES['quadratic'][p]}, p={p}", f"the rounds to 1e-10 x the initial gap (never: T = {T:g})",
            censor=T))
    return out


def tuned_momentum_checks(tab: pd.DataFrame, setting: str, measure: str, censor: float | None = None) -> dict:
    """Both momentum items of document 002 at each momentum method's best beta > 0 of the grid
    (`best_betas` on the rows with beta > 0; beta = 0 is the method without momentum), paired over seeds
    with `claims.compare` on log10 of the value (`measure` names it): "Can we speed things up with
    momentum?" -- the value at the best beta is below the value at beta = 0; "U-MIFAm works better in
    practice" -- U-MIFAm at its best beta (SAGA memory, and as written when it has a finite best) is below
    MIFAm at its best beta. `censor`: never-reached (inf) values enter the paired differences as this
    number (e.g. the horizon T: a lower bound on the true round); without it, pairs with a non-finite value
    are dropped by `compare`. The best beta is chosen on the same seeds it is tested on (a selection in
    favour of momentum, small against the gaps measured)."""
    best = best_betas(tab[tab["beta"] > 0])

    def at(m, b):
        v = tab[(tab["method"] == m) & (tab["beta"] == b)].sort_values("seed")["value"].to_numpy(dtype=float)
        return _log10(v if censor is None else np.where(np.isfinite(v), v, censor))

    question, better = [], []
    for m in ("mifam", "umifam", "umifam_saga"):
        if m in best.index and ((tab["method"] == m) & (tab["beta"] == 0)).any():
            b = float(best.loc[m, "beta"])
            question.append(claims.compare(
                f"{setting}: {LABELS[m]} at its best beta {b:g} of the grid beats beta = 0 "
                f"({LABELS[MOMENTUM_BASE[m]]}) "
                f"on {measure} (lower is better; log10, paired over seeds)", at(m, 0.0), at(m, b)))
    if "mifam" in best.index:
        bm = float(best.loc["mifam", "beta"])
        for u in ("umifam_saga", "umifam"):
            if u in best.index:
                bu = float(best.loc[u, "beta"])
                better.append(claims.compare(
                    f"{setting}: {LABELS[u]} at its best beta {bu:g} beats MIFAm at its best beta {bm:g} on {measure} "
                    f"(lower is better; log10, paired over seeds)", at("mifam", bm), at(u, bu)))
    return {MOMENTUM: question,
            UMIFAM_BETTER: better}


def logistic_checks(data: dict, tuned: dict | None = None) -> dict:
    """The logistic page's checks, under Figures 4-6: FedAvg (IS) ends above MIFA, and "U-MIFAm works better
    in practice" on that figure's runs, as written (lowest median final gap, no run diverged) and in the
    SAGA-memory reading (below MIFAm, its closest rival, paired over seeds). tuned[p]: that figure's
    `momentum_table`; its checks (`tuned_momentum_checks`, each method at its best beta) go under the two
    momentum items."""
    out = merge_checks(*(tuned_momentum_checks(tab, f"{FIGURES['logistic'][p]}, p={p}", "the final gap")
                         for p, tab in (tuned or {}).items()))
    for p, df in data.items():
        fig = FIGURES["logistic"][p]
        fin = {m: _final(df, "gap", m) for m in set(df["method"])}
        med = {m: float(np.median(v)) for m, v in fin.items()}
        div = {m: not np.isfinite(df[(df["metric"] == "gap") & (df["method"] == m)]["value"]).all() for m in fin}
        others = min(v for m, v in med.items() if m != "umifam" and not div[m])
        out[fig] = [
            floor_check(df, p, fig),
            claims.holds(f"{fig}, p={p}: U-MIFAm as written ends with the lowest median gap, no run diverged",
                         not div["umifam"] and med["umifam"] < others,
                         "median final gap below every other method's", ours=med["umifam"], reference=others),
            claims.compare(f"{fig}, p={p}: U-MIFAm with SAGA memory ends below MIFAm "
                           "(log10 final gap, paired over seeds)",
                           _log10(fin["mifam"]), _log10(fin["umifam_saga"])),
        ]
    return out


def floor_checks(fl: pd.DataFrame, *, T: int, n: int, L: float, sigma_G2: float, eta_doc: float = 0.02) -> dict:
    """The theory page's section 1 (the error floors): `fl` is `error_floor`'s table for both starts, on a
    problem with n clients, smoothness L and client variance sigma_G2, T rounds."""
    per = fl.groupby(["start", "method", "eta", "p", "metric"])["value"].mean().unstack("metric").reset_index()
    s2 = sigma_G2
    per["c"] = 2 / n * (1 / per["p"] - 1)
    per["doc_floor"] = per["eta"] ** 2 * L * per["c"] * s2 / 2
    isf = per[(per["method"] == "fedavg_is") & (per["start"] == "optimum")]
    z = per[(per["method"] == "fedavg_is") & (per["start"] == "zero")]
    sl_eta = float(np.mean([fit_slope(g["eta"], g["avg_tail"])[0] for _, g in isf.groupby("p")
                            if g["eta"].nunique() > 1]))
    sl_c = float(np.mean([fit_slope(g["c"], g["avg_tail"])[0] for _, g in isf.groupby("eta") if g["c"].nunique() > 1]))
    ok_doc = int((z["avg_all"] <= 2 * z["gap0"] / (z["eta"] * T) + z["doc_floor"]).sum())
    above = int((isf["avg_tail"] <= isf["doc_floor"]).sum())
    raw = fl[fl["start"] == "optimum"].pivot_table(index=["method", "eta", "p", "seed"], columns="metric",
                                                   values="value").reset_index()
    eta0 = eta_doc if eta_doc in set(raw["eta"]) else float(raw["eta"].max())
    nonzero = []
    for p in sorted(raw["p"].unique()):
        g = raw[(raw["eta"] == eta0) & (raw["p"] == p)].sort_values("seed")
        nonzero.append(claims.compare(
            f"p={p}, eta={eta0}: FedAvg (IS) sits above MIFA (log10 mean ||grad f||^2 over the last quarter, from "
            "the optimum, paired over seeds)", _log10(g[g["method"] == "fedavg_is"]["avg_q4"]),
            _log10(g[g["method"] == "mifa"]["avg_q4"])))
    nonzero.append(claims.holds(f"the floor grows like c = (2/n)(1/p - 1): fitted slope {sl_c:.2f} within "
                                f"{SLOPE_TOL} of 1", abs(sl_c - 1) <= SLOPE_TOL, "|slope - 1| <= 0.15",
                                ours=sl_c, reference=1.0))
    mo = per[(per["method"] == "mifa") & (per["start"] == "optimum")]
    falling = ((mo["avg_q4"] < 1e-25) | (mo["avg_q4"] < mo["avg_q2"])).sum()
    mz = fl[(fl["method"] == "mifa") & (fl["start"] == "zero")].pivot_table(
        index=["eta", "p", "seed"], columns="metric", values="value").reset_index()
    mz["rhs"] = 2 * mz["gap1"] / (mz["eta"] * (T - 1))
    mz = mz.groupby(["eta", "p"])[["avg_from1", "rhs"]].mean()
    ok_mifa = int((mz["avg_from1"] <= mz["rhs"]).sum())
    return {
        FLOOR_NONZERO: nonzero,
        FLOOR_BOUND: [
            claims.holds("the bound holds from w_0 = 0 in every (eta, p) setting (seed-averaged sides)",
                         ok_doc == len(z), "holds in every setting", ours=ok_doc, reference=len(z)),
            claims.holds("the measured floor (from the optimum, 2nd half) is at most eta^2 L c sigma_G^2 / 2 "
                         "in every setting",
                         above == len(isf), "holds in every setting", ours=above, reference=len(isf)),
            claims.holds(f"the floor grows like eta^2: fitted slope {sl_eta:.2f} within {SLOPE_TOL} of 2",
                         abs(sl_eta - 2) <= SLOPE_TOL, "|slope - 2| <= 0.15", ours=sl_eta, reference=2.0)],
        FLOOR_ZERO: [claims.holds(
            "MIFA's mean ||grad f||^2 over the last quarter (from the optimum) is at rounding level (< 1e-25) or "
            "below the second quarter's, in every setting", falling == len(mo), "holds in every setting",
            ours=int(falling), reference=len(mo))],
        MIFA_BOUND: [claims.holds("the bound holds in every (eta, p) setting (seed-averaged sides)",
                                  ok_mifa == len(mz), "holds in every setting", ours=ok_mifa, reference=len(mz))],
    }


def monte_carlo_checks(tests: pd.DataFrame, mc: pd.DataFrame) -> dict:
    """The theory page's section 2: `tests` has one row per (p, rule label) with the chi^2 p-values against
    unbiasedness and against the predicted bias; `mc` is `one_round_monte_carlo`'s table."""
    biased, unbiased, eq_mifa, eq_umifa = [], [], [], []
    for _, row in tests.iterrows():
        p, rule = row["p"], row["rule"]
        pu, pb = row["p-value, unbiased (chi2)"], row["p-value, predicted bias (chi2)"]
        if rule == LABELS["mifa"]:
            biased += [claims.holds(f"p={p}: the chi^2 test rejects unbiasedness of MIFA's entries", pu < ALPHA,
                                    f"p-value < {ALPHA}", ours=pu, reference=ALPHA),
                       claims.holds(f"p={p}: the predicted bias (1-p)(G_(t-1) - Delta) is not rejected", pb >= ALPHA,
                                    f"p-value >= {ALPHA}", ours=pb, reference=ALPHA)]
        elif rule == LABELS["umifa"]:
            unbiased.append(claims.holds(f"p={p}: the chi^2 test does not reject unbiasedness of U-MIFA's entries",
                                         pu >= ALPHA, f"p-value >= {ALPHA}", ours=pu, reference=ALPHA))
    m = mc[mc["client"] < 0].pivot_table(index=["p", "rule"], columns="metric", values="value")
    for p in sorted(m.index.get_level_values("p").unique()):
        a = m.loc[(p, "mifa")]
        eq_mifa.append(claims.holds(f"p={p}: Monte Carlo E||grad f - G_t||^2 is at most the document's bound "
                                    "(within 2 s.e.)",
                                    a["mse"] - 2 * a["mse_se"] <= a["mse_formula"], "mse - 2 s.e. <= bound",
                                    ours=a["mse"], reference=a["mse_formula"]))
        u = m.loc[(p, "umifa")]
        eq_umifa.append(claims.agree(f"p={p}: Monte Carlo E||grad f - G_t||^2 equals the document's expression "
                                     "(within 2 Monte Carlo s.e.)", [u["mse"]], u["mse_formula"],
                                     threshold=2 * u["mse_se"]))
    return {BIASED: biased,
            UNBIASED: unbiased,
            EQ_MIFA: eq_mifa, EQ_UMIFA: eq_umifa}


def _family_name(hetero: bool) -> str:
    return "heterogeneous client Hessians" if hetero else "identical client Hessians"


def step_size_checks(stab: pd.DataFrame) -> dict:
    """The theory page's section 4: `stab` holds, per (kind, method, n, eta_L), 1 when every seed converged
    (within 50 n rounds). The document's step sizes are sufficient conditions: checked at the largest grid
    step at or below the bound, per n and problem (an n whose bound lies below the grid is left out; much
    smaller steps need more than 50 n rounds, so they are not a test of the bound); one check per family
    (identical client Hessians; heterogeneous ones: kinds ending in `HETERO`). With ZeroSARAH rows in `stab`,
    the non-convex table's eta = O(1/(L n^{1/2})) is checked the same way (at eta L <= n^(-1/2))."""

    def at_bound(method, bound, text, hetero):
        sel = stab[(stab["method"] == method) & (stab["kind"].str.endswith(HETERO) == hetero)]
        g = sel[sel["eta_L"] <= bound(sel["n"]) * (1 + 1e-12)]
        g = g.loc[g.groupby(["kind", "n"])["eta_L"].idxmax()]
        ok = int(g["value"].eq(1).sum())
        return claims.holds(f"{_family_name(hetero)}: {LABELS[method]} converges (every seed, within 50n rounds) "
                            "at the "
                            f"largest grid step eta L <= {text}, for every n and problem ({ok} of {len(g)})",
                            ok == len(g) and len(g) > 0, "converges at the bound's step in every (problem, n)",
                            ours=ok, reference=len(g))
    fams = [h for h in (False, True) if (stab["kind"].str.endswith(HETERO) == h).any()]
    saga = [at_bound("umifa_saga", lambda n: n ** (-2 / 3), "n^(-2/3)", h) for h in fams]
    out = {LR_MIFA: [at_bound("mifa", lambda n: 1 / n, "1/n", h) for h in fams],
           LR_REDDI: saga + [
               at_bound("umifa", lambda n: n ** (-2 / 3), "n^(-2/3)", h) for h in fams],
           SAGA_ETA: saga}
    if (stab["method"] == ZEROSARAH).any():
        out[ZEROSARAH_ETA] = [at_bound(ZEROSARAH, lambda n: n ** -0.5, "n^(-1/2)", h)
                                                         for h in fams]
    return out


def complexity_checks(slopes: pd.DataFrame, plateau: pd.DataFrame, plateau_slope: float) -> dict:
    """The theory page's section 5: `slopes` (index problem x method label; predicted and measured slope of
    the cost in n; ZeroSARAH's rows, on the non-convex problems, are checked against the table's 1/2);
    `plateau` (n, b, eta, avg_q2, avg_q4) and the fitted slope of FedPGD's plateau against
    the table's variance term."""
    out = {}
    for kind in dict.fromkeys(slopes.index.get_level_values(0)):
        base = kind.removesuffix(HETERO)
        tab = {"convex": "Convex table", "nonconvex": "Non-convex table"}[base]
        rows = [("fedgd", "FedGD"), ("fedpgd", "FedPGD"), ("umifa_saga", "SAGA/U-MIFA")]
        if base == "nonconvex" and (kind, LABELS[ZEROSARAH]) in slopes.index:
            rows.append((ZEROSARAH, "ZeroSarah"))       # only the non-convex table has a ZeroSarah row
        for m, row in rows:
            pr, ms = slopes.loc[(kind, LABELS[m]), ["predicted slope", "measured slope"]]
            # the table's complexities are O(.) bounds: a cost growing more slowly in n is within them
            out.setdefault(f"{tab}: {row}, complexity", []).append(claims.bound(
                f"{base} ({_family_name(kind.endswith(HETERO))}), {row}: measured slope of the cost in n {ms:.2f}, "
                f"not above the table's {pr:.2f} + {SLOPE_TOL} (an O(.) bound, tested one-sided)",
                ms, pr, tol=SLOPE_TOL, side="upper"))
    ratio = float((plateau["avg_q4"] / plateau["avg_q2"]).max())
    out[FEDPGD_CONVERGENCE] = [
        claims.holds(f"FedPGD's plateau is proportional to the table's variance term: fitted slope {plateau_slope:.2f} "
                     f"within {SLOPE_TOL} of 1", abs(plateau_slope - 1) <= SLOPE_TOL, "|slope - 1| <= 0.15",
                     ours=plateau_slope, reference=1.0),
        claims.holds("that term falls with T as printed inside (1/T)(...): the last-quarter plateau is at most "
                     "half the "
                     "second quarter's in every setting", ratio <= 0.5, "max ratio <= 1/2 (a term divided by T halves "
                     "when T doubles)", ours=ratio, reference=0.5)]
    return out


def epsilon_checks(expo: pd.DataFrame) -> dict:
    """The theory page's section 6: `expo` has one row per (criterion, method) with the table's exponent
    a ("table exponent") and the measured one ("measured exponent": minus the log-log slope of the best
    step's cost against eps over the smallest eps of the grid), on a convex, not strongly convex problem.
    Convex table (criterion "gap"): the measured exponent is the table's within SLOPE_TOL. Non-convex table
    (criterion "grad_norm2"): a convex problem can only show that the table's rate is not exceeded
    (measured <= table + SLOPE_TOL); it cannot test how tight a non-convex bound is."""
    rows = {"fedgd": "FedGD", "fedpgd": "FedPGD", "umifa_saga": "SAGA/U-MIFA"}
    conv, nonconv = [], []
    for _, r in expo.iterrows():
        a, m = float(r["table exponent"]), float(r["measured exponent"])
        if r["criterion"] == "gap":
            conv.append(claims.holds(
                f"{rows[r['method']]}: complexity to min_t f(x_t) - f* <= eps grows like (1/eps)^{m:.2f}, the table's "
                f"exponent {a:g} within {SLOPE_TOL}", bool(np.isfinite(m) and abs(m - a) <= SLOPE_TOL),
                "|measured - table exponent| <= 0.15", ours=m, reference=a))
        else:
            nonconv.append(claims.holds(
                f"{rows[r['method']]}: complexity to min_t ||grad f(x_t)||^2 <= eps grows like (1/eps)^{m:.2f}, not "
                f"faster than the table's exponent {a:g} (+{SLOPE_TOL}; a convex problem tests the bound, not its "
                f"tightness)", bool(np.isfinite(m) and m <= a + SLOPE_TOL), "measured exponent <= table's + 0.15",
                ours=m, reference=a))
    return {EPS_CONVEX: conv,
            EPS_NONCONVEX: nonconv}


def theory_checks(*, floor: pd.DataFrame, floor_task, rounds: int, mc_tests: pd.DataFrame, mc: pd.DataFrame,
                  stab: pd.DataFrame, slopes: pd.DataFrame, plateau: pd.DataFrame, expo: pd.DataFrame,
                  onestep: pd.DataFrame, general: pd.DataFrame, gd_emax: pd.Series, gd_grid, zs_slopes: pd.DataFrame,
                  zs_eps: float, zs_eps_n: int) -> dict:
    """The theory page's checks, every section's under its items: the error floors (:func:`floor_checks`, on
    `floor_task`'s n, L and sigma_G^2, `rounds` rounds), the stored entries (:func:`monte_carlo_checks`), the
    step-size conditions (:func:`step_size_checks`), the complexity tables (:func:`complexity_checks`, with the
    fitted slope of FedPGD's `plateau` in the table's variance term; :func:`epsilon_checks`), the one-step
    inequalities (`bounds.derivation_i_checks`, `bounds.general_checks`),
    FedGD's and FedPGD's step sizes (`bounds.gd_step_checks`) and ZeroSARAH at b = ceil(sqrt n)
    (`bounds.zerosarah_sqrt_checks`)."""
    return merge_checks(
        floor_checks(floor, T=rounds, n=floor_task.n, L=floor_task.L, sigma_G2=floor_task.sigma_G2),
        monte_carlo_checks(mc_tests, mc), step_size_checks(stab),
        complexity_checks(slopes, plateau, fit_slope(plateau["term"], plateau["avg_q4"])[0]), epsilon_checks(expo),
        {DERIVATION_I: bounds.derivation_i_checks(onestep), GENERAL: bounds.general_checks(general)},
        bounds.gd_step_checks(gd_emax, gd_grid), bounds.zerosarah_sqrt_checks(zs_slopes, zs_eps, zs_eps_n))
