"""The items of document 003 (``flkit/papers/items/003.yaml``) that the Fed-CVaR-Avg pages test, and how each
page's checks are filed under them for the scorecard (`flkit.papers.scorecard.record`):

* synthetic_2d: each panel of Fig. 2 (`fig2`: FedAvg fails on the least available user's pattern(s), Fed-CVaR-Avg
  classifies every pattern, per model variant), and the claim of Sec. 2 that FedAvg fails under a skewed RAM
  (`FIG2_CAUSES_ITEM`, `causes`: the authors' two model quirks separated);
* mnist: Figs. 3(b)-(c) and 4(b)-(d) (`mnist`: the rare classes over 80 % and above FedAvg, overall accuracy
  above FedAvg), and the document's horizon of 4000 rounds (`MNIST_HORIZON_ITEM`: are the curves still rising?);
* fmnist_table: each of the 60 numbers of Table 1 (`table1_item`) and the document's five statements about
  it (`TABLE1_CLAIMS`), `table1`.

The pages compute the checks (`claims.Check`); the functions here only name the item each one tests.
`item_verdicts` gives the scorecard's verdict on the items a page's checks are filed under."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pandas as pd

from flkit.papers import claims, verdicts
from flkit.papers.cvar.common import in_words

__all__ = ["DOC", "fig2_item", "FIG2_CAUSES_ITEM", "MNIST_HORIZON_ITEM", "TABLE1_CLAIMS", "table1_item", "fig2",
           "causes", "mnist", "table1", "item_verdicts"]

DOC = "003"


def fig2_item(panel: str) -> str:
    """The item of one panel of Fig. 2, e.g. "Fig. 2(a)"."""
    return f"Fig. 2({panel})"


FIG2_CAUSES_ITEM = "Claim (Sec. 2): under a highly skewed RAM, solving (2) generally fails to classify accurately"
MNIST_HORIZON_ITEM = "Setting (Sec. 4): 4000 global rounds for MNIST, curves read at their end"
TABLE1_CLAIMS = {
    "rise": "Claim (Sec. 4): Table 1, pattern 2 improves from ~60 % (standard FL) to > 71 % at (γ, α) = (0.1, 0.1)",
    "p1": "Claim (Sec. 4): Table 1, pattern 1 also improves over FedAvg",
    "harder": "Claim (Sec. 4): Table 1, pattern 2 is harder to learn than pattern 1, even for standard FL",
    "beats": "Claim (Sec. 4): Table 1, overall performance improves as α → 0",
    "best": "Claim (Sec. 4): Table 1, (γ, α) = (0.1, 0.1) performs best",
}


def table1_item(gamma: float, alpha: float, quantity: str) -> str:
    """The scorecard id of one number of the document's Table 1, e.g. "Table 1: γ=0.1, α=0.1, pattern 2"."""
    return f"Table 1: γ={gamma}, α={alpha}, {quantity}"


def fig2(check: pd.DataFrame) -> dict[str, list]:
    """The synthetic_2d page's checks of Fig. 2, by item (Fig. 2(a), 2(b), 2(c)): each row of
    `synthetic_2d.confirm_fig2` (one panel, one model variant) as two `claims.holds`, its two criteria unchanged:
    FedAvg fails on the least available user's pattern(s) (final test accuracy on them < 50 %, mean over seeds),
    Fed-CVaR-Avg classifies every pattern (> 90 % on each class)."""
    out: dict[str, list] = {}
    for r in check.itertuples():
        who = f"{r.model}, {r.seeds} seed{'s' if r.seeds > 1 else ''}"
        out.setdefault(fig2_item(r.panel), []).extend([
            claims.holds(f"FedAvg fails on the rare pattern(s) {r.rare_classes} ({who})", r.fedavg_fails,
                         "final test accuracy on the rare class(es), mean over seeds, < 50 %",
                         ours=r.fedavg_rare, reference=50.0),
            claims.holds(f"Fed-CVaR-Avg classifies every pattern ({who})", r.proposed_classifies_all,
                         "final test accuracy of the worst class, mean over seeds, > 90 %",
                         ours=r.proposed_worst_class, reference=90.0)])
    return out


def causes(acc: pd.DataFrame, single=("zero-init", "double-softmax"), against: str = "neither") -> dict[str, list]:
    """The synthetic_2d page's checks of the two quirks' separate effects, from its per-run rare-class accuracies
    (`synthetic_2d.cause_accuracy`), filed under `FIG2_CAUSES_ITEM` (the document's reading that FedAvg, solving
    (2), fails under a skewed RAM; panel named in each check): for each variant of `single`, FedAvg's rare-class
    final accuracy below 50 % (mean over seeds, `claims.holds`), and paired over the seeds both have, `against`
    (our model) above the variant on it (`claims.compare`: the variant lowers FedAvg's rare-class accuracy)."""
    acc = acc[acc["method"] == "fedavg"]
    out: dict[str, list] = {}
    for panel, g in acc.groupby("panel"):
        per = g.pivot_table(index="seed", columns="variant", values="rare")
        for v in single:
            if v not in per:
                continue
            vals = per[v].dropna()
            what = f"{v} alone" if v in ("zero-init", "double-softmax") else f"the {v} model"
            out.setdefault(FIG2_CAUSES_ITEM, []).append(claims.holds(
                f"Fig. 2({panel}): FedAvg with {what} fails on the rare pattern(s) ({len(vals)} seeds)",
                vals.mean() < 50,
                "final test accuracy on the rare class(es), mean over seeds, < 50 %", ours=vals.mean(), reference=50.0))
            if against in per:
                both = per[[against, v]].dropna()
                out[FIG2_CAUSES_ITEM].append(claims.compare(
                    f"Fig. 2({panel}): FedAvg, rare class: our model above {what} (paired over {len(both)} seeds)",
                    both[against].to_numpy(), both[v].to_numpy()))
    return out


def _mnist_holds(check: pd.DataFrame, when: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in check.itertuples():
        checks = [r.check] if r.rare_class == "overall" else [r.level, r.check]
        for c in checks:
            out.setdefault(r.figure, []).append(dataclasses.replace(
                c, what=f"{c.what}, {when}", rule=f"{c.rule} ({'paired ' if c is r.check else ''}over seeds, {when})"))
    return out


def mnist(check: pd.DataFrame, final: pd.DataFrame | None = None,
          slopes: pd.DataFrame | None = None, horizon: list | None = None) -> dict[str, list]:
    """The mnist page's checks, by item (Fig. 3(b), 3(c), 4(b), 4(c), 4(d)): the checks of `mnist.confirm_mnist`'s
    rows (last 10 % of the rounds: rare class, "over 80 %" one-sided over seeds and "above FedAvg" paired over
    seeds; overall, "above FedAvg" paired); `final`:
    the same rows on the final-round accuracy (`confirm_mnist(df, last_frac=0)`), filed beside them; the
    overall rows are the paired check of `confirm_mnist` (`claims.compare`, a difference inside two standard
    errors is not testable, not "confirmed");
    `slopes` (`mnist.mnist_slopes`): under `MNIST_HORIZON_ITEM`, one `claims.not_rising` per curve: "no longer
    rising at the last round" is confirmed only when the mean slope over the last 25 % of the rounds is below zero
    by more than 2 se over seeds, contradicted when above zero by more than 2 se, else not testable at this scale;
    `horizon` (`diagnosis.horizon_checks` of the runs twice as long): filed under `MNIST_HORIZON_ITEM` too, beside
    the slopes (none when no such run is stored)."""
    out = _mnist_holds(check, "last 10 % of the rounds")
    if final is not None:
        for k, v in _mnist_holds(final, "final round").items():
            out.setdefault(k, []).extend(v)
    if slopes is not None:
        out[MNIST_HORIZON_ITEM] = [
            dataclasses.replace(r.check, rule="least-squares slope of the accuracy (%) on the round over the last "
                                f"25 % of the rounds, per run (pp per 1000 rounds); {r.check.rule}")
            for r in slopes.itertuples()]
    if horizon:
        out.setdefault(MNIST_HORIZON_ITEM, []).extend(horizon)
    return out


def table1(numbers: Mapping[tuple[float, float, str], claims.Check], reading: Mapping) -> dict[str, list]:
    """The fmnist_table page's checks, by item: `numbers`, (gamma, alpha, quantity) -> the check of that number of
    Table 1 (in the table's order), each under its own item (`table1_item`); `reading`, the paired checks of the
    text's five statements (`fmnist_table.reading`: rise and level, p1, harder, beats, best_check), each under its
    statement (`TABLE1_CLAIMS`)."""
    out: dict[str, list] = {table1_item(g, a, q): [c] for (g, a, q), c in numbers.items()}
    out[TABLE1_CLAIMS["rise"]] = [reading["rise"], reading["level"]]
    out[TABLE1_CLAIMS["p1"]] = [reading["p1"]]
    out[TABLE1_CLAIMS["harder"]] = [reading["harder"]]
    out[TABLE1_CLAIMS["beats"]] = list(reading["beats"])
    out[TABLE1_CLAIMS["best"]] = [reading["best_check"]]
    return out


def item_verdicts(checks: Mapping[str, list]) -> str:
    """The scorecard's verdict (`scorecard.verdict`, the book's one rule) on each item a page's `checks` are
    filed under: the verdicts with their counts in words, e.g. "not reproduced (61 of 65 items)". The scale of
    the runs and the runs still owed at the document's scale are stated beside it, never folded into it."""
    known = {it.id: it for it in verdicts.items(DOC)}
    unknown = sorted(set(checks) - set(known))
    if unknown:
        raise ValueError(f"item id(s) {unknown} are not in flkit/papers/items/003.yaml")
    got = []
    for item, cs in checks.items():
        got.append(verdicts.verdict(known[item], pd.DataFrame(verdicts.rows(DOC, {item: cs}))))
    n = pd.Series(got).value_counts()
    return in_words(f"{v} ({k} of {len(got)} items)" for v, k in n.items())
